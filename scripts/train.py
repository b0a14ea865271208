#!/usr/bin/env python
"""Train, validate, test or predict: ``python scripts/train.py fit [--config configs/X.yaml]``.

Without ``--config`` the embedded default runs (configs/default.yaml). ``--help`` after a
subcommand lists every setting; ``--print_config`` shows the resolved configuration.
"""

from vitbert.cli import main

if __name__ == "__main__":
    main()
