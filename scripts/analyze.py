#!/usr/bin/env python
"""Which words the photo helps: ``python scripts/analyze.py --ckpt CKPT [--split val]``.

Prints, and plots to a PNG, the words whose true-word probability gains most from the photo
(its own photo minus another image's photo) and the mean gain by word class (colour, noun, verb,
function word) with counts, on one split of the data the checkpoint was trained on.

``--captions`` (the embedded shapes, a model trained to write captions): greedy captions of
``--num-images`` pictures instead, scored per picture and per object, objects whose colour-shape
pair training never showed apart from the seen ones, and each miss told apart (the other
object's shape, a shape not in the picture, none), and where the model looks when it is about
to write a shape (its attention on the object the colour before names, and on the other one);
see ``vitbert.shapes.analysis``.

``--binding``: the binding swap tests instead (``vitbert.shapes.binding``): every caption of
``--num-images`` pictures against copies with what is bound to what changed (on the shapes: the
colours swapped, the shapes swapped, the relation turned; elsewhere two content words swapped),
scored by the pseudo-log-likelihood with the photo and without, and by fill-mask; chance is 50%.

``--retrieval``: image-text retrieval instead (``vitbert.lit.retrieval``): ``--num-images``
photos against all their captions, R@1/5/10 both ways and rsum by the contrastive score; chance
is k / photos.

Mistakes (missing checkpoint, data not found, bad split) exit 2 with one line.
"""

from __future__ import annotations

import argparse
import json
import sys


def build_parser() -> argparse.ArgumentParser:
    """The command line (tests/test_readme_commands.py parses the docs' commands with it)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ckpt", required=True, help="a .ckpt written by scripts/train.py fit")
    parser.add_argument("--split", default="val", help="train, val or test (default val)")
    parser.add_argument("--out", default="analysis.png", help="the plot (PNG)")
    parser.add_argument("--top", type=int, default=20, help="words shown (default 20)")
    parser.add_argument("--min-count", type=int, default=3,
                        help="fewest occurrences for a word to be ranked (default 3)")
    parser.add_argument("--data-root", help="the data folder, when it moved since training")
    parser.add_argument("--cache-dir", help="the image cache folder, when it moved")
    parser.add_argument("--json", help="also write the figures here (JSON)")
    parser.add_argument("--captions", action="store_true",
                        help="score written captions per object instead (shapes data only)")
    parser.add_argument("--binding", action="store_true",
                        help="the binding swap tests instead: the true caption against copies "
                             "with what is bound to what changed (vitbert.shapes.binding)")
    parser.add_argument("--retrieval", action="store_true",
                        help="image-text retrieval R@k both ways instead (a model trained with "
                             "the contrastive objective; vitbert.lit.retrieval)")
    parser.add_argument("--num-images", type=int, default=500,
                        help="pictures captioned with --captions, tested with --binding or "
                             "searched with --retrieval, a fixed sample (default 500)")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.num_images < 1:
        parser.error(f"--num-images must be at least 1, got {args.num_images}")

    from vitbert.analysis import (
        analyse_binding,
        analyse_retrieval,
        format_summary,
        plot,
        read_split,
        summarise,
    )
    from vitbert.data.cache import DataError
    from vitbert.io import CheckpointError
    from vitbert.run.console import format_binding_figures, format_retrieval_figures
    from vitbert.shapes.analysis import analyse_captions, format_caption_summary

    try:
        if args.binding:
            summary = analyse_binding(args.ckpt, args.split, args.num_images, args.data_root,
                                      args.cache_dir)
            report = "\n".join(format_binding_figures(
                {f"{args.split}/binding_{name}": value for name, value in summary.items()},
                args.split)) + "\n" + ", ".join(
                f"{name[6:]}: {int(n)} pairs" for name, n in summary.items()
                if name.startswith("pairs_"))
        elif args.retrieval:
            summary = analyse_retrieval(args.ckpt, args.split, args.num_images, args.data_root,
                                        args.cache_dir)
            report = "\n".join(format_retrieval_figures(
                {f"{args.split}/retrieval_{name}": value for name, value in summary.items()},
                args.split))
        elif args.captions:
            summary = analyse_captions(args.ckpt, args.split, args.num_images, args.data_root,
                                       args.cache_dir)
            report = format_caption_summary(summary)
        else:
            readings = read_split(args.ckpt, args.split, args.data_root, args.cache_dir)
            summary = summarise(readings, top=args.top, min_count=args.min_count)
            report = f"{format_summary(summary)}\nplot: {plot(summary, args.out)}"
    except (CheckpointError, DataError, FileNotFoundError) as error:
        print(f"error: {str(error).splitlines()[0]}", file=sys.stderr)
        return 2
    print(report)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
