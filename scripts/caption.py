#!/usr/bin/env python
"""Write a caption for each photo: greedy, beam search, Mask-Predict, or sampled and reranked.

    python scripts/caption.py --ckpt runs/latest/checkpoints/last.ckpt --image photo.png
    python scripts/caption.py --ckpt export/ --image a.png b.png --num-beams 3 --json
    python scripts/caption.py --ckpt mlm_only.ckpt --image a.png --method mask-predict
    python scripts/caption.py --ckpt runs/latest/checkpoints/last.ckpt --image a.png --method rerank

Greedy and beam search need a model trained with the generation objective
(a ``CaptionWriting`` objective, as the embedded default has); Mask-Predict writes with any
checkpoint, an MLM-only one included. Rerank writes the greedy caption and --num-samples sampled
ones and keeps the one the contrastive heads match best to the photo (a model trained with
the contrastive objective, as the embedded default has). ``--ckpt`` takes a ``.ckpt`` written by
scripts/train.py or an exported folder (config.json, model.safetensors, tokenizer.json).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from vitbert.script_args import add_runtime_arguments, fail

# vitbert.captioner.METHODS, without importing torch
METHODS = ("greedy", "beam", "mask-predict", "rerank")
EPILOG = """\
--json prints a list with one object per photo, in the order given:
  [{"image": "a.png", "captions": [{"caption", "score", "generated_text"}, ...]}, ...]
score: the caption's log-probability per piece (the closing [SEP] counted; beam search divides
by length ** --length-penalty); Mask-Predict's is the mean over its pieces. Rerank adds
"similarity", the contrastive score (cosine), and "likelihood", the pseudo-log-likelihood of the
content words with the photo: its captions are ordered by similarity / temperature + likelihood.

exit status: 0 on success; 2 for a missing or unreadable image, a file that is not a vitbert
checkpoint or lacks its tokenizer, or unusable numbers (--num-beams < 1, ...). On an error
nothing is printed to stdout."""


def build_parser() -> argparse.ArgumentParser:
    """The command line (tests/test_readme_commands.py parses the docs' commands with it)."""
    summary = __doc__.split("\n\n")[0]
    parser = argparse.ArgumentParser(description=summary, epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--image", required=True, type=Path, nargs="+", metavar="PHOTO",
                        help="one or more photos (JPEG, PNG, ...), captioned as one batch")
    parser.add_argument("--ckpt", required=True, type=Path,
                        help="the model: a .ckpt written by scripts/train.py or an exported folder")
    parser.add_argument("--method", choices=METHODS, default=None,
                        help="default: greedy for one beam, beam for --num-beams > 1; "
                             "mask-predict for a .ckpt trained without caption writing")
    parser.add_argument("--num-beams", type=int, default=1, help="beams (default 1)")
    parser.add_argument("--num-samples", type=int, default=15,
                        help="rerank: captions sampled beside the greedy one (default 15)")
    parser.add_argument("--num-return-sequences", type=int, default=1,
                        help="captions per photo, best first (at most --num-beams, or "
                             "--num-samples + 1 for rerank)")
    parser.add_argument("--max-new-tokens", type=int, default=None,
                        help="word pieces at most (default: as many as the model's positions)")
    parser.add_argument("--length-penalty", type=float, default=1.0,
                        help="scores are divided by length ** this (default 1.0)")
    parser.add_argument("--json", action="store_true", help="print JSON (see below)")
    add_runtime_arguments(parser, "CPU threads for torch (default 1, as scripts/predict.py)")
    parser.add_argument("--timing", action="store_true",
                        help="print the load and caption times to stderr")
    return parser


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    return build_parser().parse_args(argv)


def argument_problem(args: argparse.Namespace) -> str | None:
    """Cheap checks first: a wrong argument should not cost a model load."""
    for image in args.image:
        if not image.is_file():
            return f"--image {image}: no such file"
    if args.num_beams < 1:
        return f"--num-beams {args.num_beams}: use at least 1"
    if args.num_samples < 1:
        return f"--num-samples {args.num_samples}: use at least 1"
    if args.max_new_tokens is not None and args.max_new_tokens < 1:
        return f"--max-new-tokens {args.max_new_tokens}: use at least 1"
    return None


def caption_photos(args: argparse.Namespace) -> tuple[list[dict], str]:
    """Load the model and caption every photo; returns the results and a timing line."""
    from vitbert.captioner import Captioner

    start = time.perf_counter()
    captioner = Captioner.from_checkpoint(args.ckpt, device=args.device)
    loaded = time.perf_counter()
    found = captioner([str(p) for p in args.image], num_beams=args.num_beams, method=args.method,
                      max_new_tokens=args.max_new_tokens, length_penalty=args.length_penalty,
                      num_return_sequences=args.num_return_sequences,
                      num_samples=args.num_samples)
    timing = (f"load {loaded - start:.3f} s, {len(args.image)} caption(s) "
              f"{time.perf_counter() - loaded:.3f} s on {captioner.device}")
    return [{"image": str(path), "captions": captions}
            for path, captions in zip(args.image, found, strict=True)], timing


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    problem = argument_problem(args)
    if problem is not None:
        return fail(problem)

    from vitbert.data.cache import BadImageError
    from vitbert.io import CheckpointError
    from vitbert.predict import PredictError, torch_threads

    with torch_threads(args.threads):
        try:
            results, timing = caption_photos(args)
        except (CheckpointError, PredictError, BadImageError) as error:
            return fail(str(error))  # printed nothing yet: stdout stays empty
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        for result in results:
            print(result["image"])
            for caption in result["captions"]:
                match = (f", similarity {caption['similarity']:.3f}, likelihood "
                         f"{caption['likelihood']:.2f}" if "similarity" in caption else "")
                print(f"  {caption['caption']}   ({caption['score']:.3f}{match})")
    if args.timing:
        print(timing, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
