#!/usr/bin/env python
"""Try a trained vitbert in a browser: a photo and a sentence with [MASK]s in, the guesses out.

    python scripts/demo.py --ckpt runs/latest/checkpoints/last.ckpt   # open http://127.0.0.1:7860
    python scripts/demo.py --ckpt exported/ --examples photos/ --share
    python scripts/demo.py --ckpt exported/ --images photos/     # "Find the photo" searches photos/

Needs the demo extra: pip install -e ".[demo]". ``--ckpt`` takes a ``.ckpt`` written by
``scripts/train.py`` or an exported folder. Uploads stay in a temporary folder removed on exit.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import tempfile
from pathlib import Path

from vitbert.script_args import add_runtime_arguments, fail


def build_parser() -> argparse.ArgumentParser:
    """The command line (tests/test_readme_commands.py parses the docs' commands with it)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     epilog="exit status 2: a checkpoint, --examples or --images "
                                            "folder that cannot be used; the message says why.")
    parser.add_argument("--ckpt", required=True, type=Path,
                        help="a .ckpt from scripts/train.py, or an exported folder")
    parser.add_argument("--port", type=int, default=7860,
                        help="port on 127.0.0.1 (default 7860)")
    parser.add_argument("--share", action="store_true",
                        help="also publish through a temporary public gradio.live link")
    parser.add_argument("--examples", type=Path, metavar="DIR",
                        help="a folder of photos: the first few join the gallery (beside the "
                             "shapes test pictures for a model trained on those)")
    parser.add_argument("--images", type=Path, metavar="DIR",
                        help='the folder "Find the photo" searches (default: the example '
                             "pictures); its embeddings are kept in "
                             "DIR/.vitbert-index-<model>.safetensors for the next start")
    add_runtime_arguments(parser)
    return parser


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    return build_parser().parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # Before gradio is imported anywhere: every upload lands in this folder, removed on exit.
    temp = Path(tempfile.mkdtemp(prefix="vitbert-demo-"))
    os.environ["GRADIO_TEMP_DIR"] = str(temp)
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")  # no calls home
    # A plain `kill` (SIGTERM) ends the server through the `finally` below, like Ctrl-C does.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        return run(args)
    finally:
        shutil.rmtree(temp, ignore_errors=True)


def run(args: argparse.Namespace) -> int:
    import torch

    from vitbert import demo
    from vitbert.io import CheckpointError
    from vitbert.predict import FillMask

    torch.set_num_threads(max(1, args.threads))
    try:
        fill_mask = FillMask.from_checkpoint(args.ckpt, device=args.device)
    except CheckpointError as error:
        return fail(str(error))
    try:
        examples = demo.folder_examples(args.examples) if args.examples is not None else []
        if demo.shows_shapes(args.ckpt):  # the embedded default's test pictures
            examples += demo.shapes_examples(fill_mask.image_size)
        elif not examples:
            print("vitbert demo: a model trained on photos; for a gallery, pass --examples DIR",
                  file=sys.stderr, flush=True)
        finder = demo.search_for(fill_mask, examples, args.images)
    except demo.DemoInputError as error:
        return fail(str(error))
    captioner_class = demo.captioner_class()  # HOOK: None until vitbert.Captioner exists
    captioner = captioner_class.from_checkpoint(args.ckpt) if captioner_class else None
    print(f"vitbert demo: {args.ckpt} on {fill_mask.device}; uploads go to "
          f"{os.environ['GRADIO_TEMP_DIR']}", flush=True)
    demo.serve(fill_mask, examples, port=args.port, share=args.share,
               captioner=captioner, title=f"Model: `{args.ckpt}`", finder=finder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
