#!/usr/bin/env python
"""Fill the [MASK]s of a sentence about a photo, with the photo and without it, side by side.

    python scripts/predict.py --ckpt runs/latest/checkpoints/last.ckpt --image photo.png \\
        --text "a large [MASK] triangle above a small yellow cross"
    python scripts/predict.py --ckpt export/ --image photo.png --text "..." --json
    python scripts/predict.py --ckpt ... --image ... --text "..." --attention mask.png --layer -1

Words marked * are the ones the photo brought in: in the top-k with the photo, not in the
text-only top-k. Words of --text that the model's vocabulary lacks (read as [UNK]) are named in
one "warning:" line on stderr, and in --json as "unknown_words" and "warning".

``--ckpt`` takes a ``.ckpt`` written by ``scripts/train.py`` or an exported folder
(config.json, model.safetensors, tokenizer.json).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from vitbert.script_args import add_runtime_arguments, fail

EPILOG = """\
latency, measured with the default model (configs/default.yaml: 128 wide, 2+2 layers, 64 image
tokens) on this project's 2-core CPU while other jobs kept it busy (load average 5-6): loading
the checkpoint 0.15-0.18 s, both readings of one query 0.03-0.05 s, so about 0.2 s in all. The
whole command took 7-8 s, nearly all of it importing torch and transformers. With --threads 2 on
the same busy CPU: 1.2 s to load, 0.4-1.0 s a query (threads waiting for each other).
--timing prints the figures of a run.

exit status: 0 on success; 2 for a text without [MASK], a missing or unreadable image, a file that
is not a vitbert checkpoint or lacks its tokenizer, an unusable --layer or --attention path. On
an error nothing is printed to stdout and no picture is written."""


def build_parser() -> argparse.ArgumentParser:
    """The command line (tests/test_readme_commands.py parses the docs' commands with it)."""
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--ckpt", required=True, type=Path,
                        help="a .ckpt from scripts/train.py, or an exported folder")
    parser.add_argument("--image", required=True, type=Path, help="the photo (JPEG, PNG, ...)")
    parser.add_argument("--text", required=True,
                        help='the sentence, with [MASK] where a word is hidden (one or more)')
    parser.add_argument("--top-k", type=int, default=5, help="guesses per [MASK] (default 5)")
    parser.add_argument("--json", action="store_true",
                        help='print {"text", "unknown_words", "warning", "masks": [{"index", '
                             '"with_image", "text_only"}]}')
    parser.add_argument("--attention", type=Path, metavar="OUT.png",
                        help="save the photo overlaid with each [MASK]'s attention over the "
                             "image tokens (mean over heads)")
    parser.add_argument("--layer", type=int, default=-1,
                        help="text-encoder layer for --attention (default -1, the last)")
    add_runtime_arguments(parser, "CPU threads for torch (default 1: one query of a small model "
                          "is too little work to share, and on a busy CPU threads that wait for "
                          "each other cost 10-40x; raise it for the flickr30k models)")
    parser.add_argument("--timing", action="store_true",
                        help="print the load and query times to stderr")
    return parser


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    return build_parser().parse_args(argv)


def format_table(result: dict, top_k: int) -> str:
    """Per [MASK], the with-photo and text-only top-k in two columns, photo-only words starred."""
    lines = [result["text"], ""]
    count = len(result["masks"])
    for mask in result["masks"]:
        text_only = {guess["token"] for guess in mask["text_only"]}
        width = max(12, *(len(g["token_str"]) for g in mask["with_image"] + mask["text_only"]))
        title = f"[MASK] {mask['index'] + 1} of {count}" if count > 1 else "[MASK]"
        lines.append(f"{title}")
        lines.append(f"      {'with the photo':<{width + 10}}   text only")
        for rank, (a, b) in enumerate(zip(mask["with_image"], mask["text_only"], strict=True),
                                           start=1):
            star = "*" if a["token"] not in text_only else " "
            lines.append(f"  {rank:>2}  {a['token_str']:<{width}} {a['score']:6.1%} {star}"
                         f"   {b['token_str']:<{width}} {b['score']:6.1%}")
        lines.append("")
    lines.append(f"* brought in by the photo: in its top-{top_k}, not in the text-only top-{top_k}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # Cheap checks first: a wrong argument should not cost a model load.
    if "[MASK]" not in args.text:
        return fail(f"no [MASK] in --text {args.text!r}: write [MASK] (upper case) where the "
                    "hidden word goes")
    if not args.image.is_file():
        return fail(f"--image {args.image}: no such file")
    if args.top_k < 1:
        return fail(f"--top-k {args.top_k}: ask for at least one guess")
    if args.attention is not None and not args.attention.parent.is_dir():
        return fail(f"--attention {args.attention}: the folder {args.attention.parent} does not "
                    "exist; create it first")

    from vitbert.predict import torch_threads

    with torch_threads(args.threads):
        return run(args)


def run(args: argparse.Namespace) -> int:
    """Load, answer, draw; print or write only once everything has succeeded."""
    from vitbert.attention_picture import render_attention
    from vitbert.data.cache import BadImageError
    from vitbert.data.files import atomic_write
    from vitbert.io import CheckpointError
    from vitbert.predict import FillMask, PredictError

    start = time.perf_counter()
    try:
        fm = FillMask.from_checkpoint(args.ckpt, device=args.device)
    except CheckpointError as error:
        return fail(str(error))
    loaded = time.perf_counter()
    try:
        result = fm.compare(args.text, str(args.image), top_k=args.top_k)
        answered = time.perf_counter()
        picture = (render_attention(fm.attention(args.text, str(args.image), args.layer),
                                    args.text)
                   if args.attention is not None else None)
    except (PredictError, BadImageError) as error:
        return fail(str(error))
    output = json.dumps(result, indent=2) if args.json else format_table(result, args.top_k)
    if picture is not None:
        try:
            atomic_write(args.attention, picture)
        except OSError as error:
            return fail(f"--attention {args.attention}: cannot write ({error})")
    print(output)
    if result["warning"] is not None:  # stderr: stdout stays the table or one JSON document
        print(f"warning: {result['warning']}", file=sys.stderr)
    if picture is not None and not args.json:
        print(f"\nattention picture: {args.attention}")
    if args.timing:
        print(f"load {loaded - start:.3f} s, query (with and without the photo) "
              f"{answered - loaded:.3f} s on {fm.device}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
