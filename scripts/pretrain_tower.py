#!/usr/bin/env python
"""Pretrain the image tower on generated fractals: ``python scripts/pretrain_tower.py fit
--config configs/tower/fractal_small.yaml`` (or ``make tower``).

Writes the tower to the file the config names (``model.export_to``), which a caption run loads
with ``--model.net.image.pretrained``. ``fit --help`` lists every setting.
"""

from vitbert.pretraining.cli import main

if __name__ == "__main__":
    main()
