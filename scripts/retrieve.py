#!/usr/bin/env python
"""Find the photos of a folder for a sentence, or the sentences of a file for a photo.

    python scripts/retrieve.py --ckpt runs/latest/checkpoints/last.ckpt --images photos/ \\
        --text "a dog in the snow" --top-k 5 [--json]
    python scripts/retrieve.py --ckpt export/ --image photo.jpg --captions captions.txt

Photos and sentences are embedded apart by the model's contrastive heads and every pair scored by
its cosine. The first search of a folder embeds its photos and saves them in
<folder>/.vitbert-index-<model>.safetensors (or --index); later searches read that file and embed
only photos added or changed since. The model must have been trained with the contrastive heads
(--model.net.itc_dim and the contrastive objective). Output and the JSON schema: docs/retrieval.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from vitbert.script_args import add_runtime_arguments, fail

EPILOG = """\
--captions FILE holds one sentence a line (blank lines are left out).

exit status: 0 on success; 2 for a missing or photo-less --images folder, a missing or unreadable
--image, a --captions file that is missing or empty, a file that is not a vitbert checkpoint, or
a model trained without the contrastive heads (the message names the setting to train one). On an
error nothing is printed to stdout. Photos of the folder that cannot be read are skipped and
named on stderr ("skipped NAME: why"), as are words of --text the model does not know."""


def build_parser() -> argparse.ArgumentParser:
    """The command line (tests/test_readme_commands.py parses the docs' commands with it)."""
    parser = argparse.ArgumentParser(description=__doc__, epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ckpt", required=True, type=Path,
                        help="a .ckpt from scripts/train.py, or an exported folder")
    photos = parser.add_argument_group("photos for a sentence")
    photos.add_argument("--images", type=Path, metavar="DIR", help="the folder to search")
    photos.add_argument("--text", help='the sentence, e.g. "a dog in the snow"')
    photos.add_argument("--index", type=Path, metavar="FILE",
                        help="where the folder's embeddings are kept (default: "
                             "DIR/.vitbert-index-<model>.safetensors)")
    sentences = parser.add_argument_group("sentences for a photo")
    sentences.add_argument("--image", type=Path, help="the photo (JPEG, PNG, ...)")
    sentences.add_argument("--captions", type=Path, metavar="FILE",
                           help="the sentences to rank, one a line")
    parser.add_argument("--top-k", type=int, default=5, help="results to show (default 5)")
    parser.add_argument("--json", action="store_true",
                        help="print the result as one JSON object (schema: docs/retrieval.md)")
    add_runtime_arguments(parser, threads_help=None)
    return parser


def check(args: argparse.Namespace) -> str | None:
    """Why the arguments cannot be answered, before any model is loaded; None when they can."""
    by_text = args.images is not None or args.text is not None
    by_image = args.image is not None or args.captions is not None
    if by_text == by_image:
        return ("ask one thing: --images DIR --text SENTENCE (photos for a sentence) or --image "
                "PHOTO --captions FILE (sentences for a photo)")
    if by_text and (args.images is None or not (args.text or "").strip()):
        return "photos for a sentence need both --images DIR and --text SENTENCE"
    if by_image and (args.image is None or args.captions is None):
        return "sentences for a photo need both --image PHOTO and --captions FILE"
    if by_text and not args.images.is_dir():
        return f"--images {args.images}: no such folder; pass a folder of photos"
    if by_image and not args.image.is_file():
        return f"--image {args.image}: no such file"
    if by_image and not args.captions.is_file():
        return f"--captions {args.captions}: no such file; pass a text file, one sentence a line"
    if args.top_k < 1:
        return f"--top-k {args.top_k}: ask for at least one result"
    return None


def read_captions(path: Path) -> list[str]:
    return [line.strip() for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip()]


def format_table(result: dict) -> str:
    """The results, one a line, best first, with their cosine."""
    lines = [f"{_query(result)} (ranked by the contrastive score among {result['candidates']})"]
    for found in result["results"]:
        what = found["image"] if "image" in found else found["caption"]
        lines.append(f"  {found['rank']:>2}  {found['score']:6.3f}  {what}")
    return "\n".join(lines)


def _query(result: dict) -> str:
    query = result["query"]
    return f"photos for {query['text']!r}" if "text" in query else f"sentences for {query['image']}"


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if (problem := check(args)) is not None:  # cheap checks first: no model load for a typo
        return fail(problem)
    captions = None
    if args.captions is not None:
        try:
            captions = read_captions(args.captions)
        except (OSError, UnicodeDecodeError) as error:
            return fail(f"--captions {args.captions}: cannot read it as text ({error})")
        if not captions:
            return fail(f"--captions {args.captions}: no sentences in it; write one a line")
    return run(args, captions)


def run(args: argparse.Namespace, captions: list[str] | None) -> int:
    """Load, search, print; nothing on stdout unless everything succeeded."""
    from vitbert.data.cache import BadImageError
    from vitbert.io import CheckpointError
    from vitbert.predict import PredictError
    from vitbert.retriever import Retriever

    try:
        retriever = Retriever.from_checkpoint(args.ckpt, device=args.device)
        if captions is None:
            index = retriever.index(args.images, args.index)
            result = retriever.images_for(args.text, index, top_k=args.top_k)
        else:
            result = retriever.captions_for(str(args.image), captions, top_k=args.top_k)
    except (CheckpointError, PredictError, BadImageError) as error:
        return fail(str(error))
    print(json.dumps(result, indent=2) if args.json else format_table(result))
    for skipped in result.get("skipped", []):
        print(f"skipped {skipped['image']}: {skipped['reason']}", file=sys.stderr)
    if result.get("warning"):
        print(f"warning: {result['warning']}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
