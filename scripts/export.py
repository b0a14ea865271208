#!/usr/bin/env python
"""Turn a training checkpoint into a shareable folder: safetensors weights, config, tokenizer.

The folder needs neither Lightning nor pickle to load (``FillMask.from_checkpoint(folder)``,
``vitbert.io.load_model(folder)``) and can be given to ``--model.init_from`` to fine-tune. It
holds every trained weight: the network and the training heads (the word detector) the run had,
so a fine-tune from it starts them from what they learnt; it prints what went in. Its weights file
also says whether the run taught the model to write captions (the Captioner's default method).
A text tower in BERT's layout (``model.net.text.pretrained``) also goes to ``<out>/bert``, a
transformers ``BertForMaskedLM`` folder: ``AutoModelForMaskedLM.from_pretrained("<out>/bert")``
fills a [MASK] from the text as this model does without the photo.

    python scripts/export.py --ckpt runs/latest/checkpoints/last.ckpt --out exported/
"""

from __future__ import annotations

import argparse
import sys

from vitbert.captioner import export_metadata
from vitbert.io import CheckpointError, export_and_describe


def build_parser() -> argparse.ArgumentParser:
    """The command line (tests/test_readme_commands.py parses the docs' commands with it)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ckpt", required=True, help="a .ckpt written by scripts/train.py")
    parser.add_argument("--out", required=True, help="the folder to write (created if missing)")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        folder, contents = export_and_describe(args.ckpt, args.out, export_metadata(args.ckpt))
    except CheckpointError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"exported {args.ckpt} → {folder}: {contents}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
