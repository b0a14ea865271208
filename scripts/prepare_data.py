"""Decode a Flickr30k copy once into the uint8 image cache training reads (or generate shapes).

The annotation format is auto-detected in --root (or one folder below it):

  token     results_20130124.token       the original release: "1000092795.jpg#0<TAB>caption"
  kaggle    results.csv                  Kaggle's "image_name| comment_number| comment" file;
                                         its broken row ("2199200615.jpg| 4   A dog ...") is
                                         repaired, any other bad row reported by line number
  karpathy  dataset_flickr30k.json       Karpathy's split file: the standard 29,000 / 1,014 /
                                         1,000 train / val / test split (restval joins train)
  nlphuji   flickr_annotations_30k.csv   the Hugging Face hub copy (nlphuji/flickr30k): JSON-list
                                         captions, the real split in its `split` column;
                                         --from-hub downloads it into --root first (needs network)

The photos are looked for in flickr30k-images/, flickr30k_images/flickr30k_images/, Images/ ...
(or --images-dir). Without a split in the annotations (token, kaggle) photos are split by a hash
of their file name (~3.2% val, ~3.1% test, the rest train). Missing, unreadable, truncated or
zero-byte images and empty captions are skipped with a warning; more than --max-bad-fraction of
them is an error. The cache is reused when its recorded settings match, rebuilt otherwise.

--format shapes generates the embedded default (captioned pictures of shapes) into --out instead.

The last line printed is one JSON object:
  {"format": ..., "images": N, "captions": N, "skipped": N,
   "splits": {"train": N, "val": N, "test": N}}
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from vitbert.data import flickr30k, shapes
from vitbert.data.cache import DataError


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--root", default="data/flickr30k", help="folder with the Flickr30k copy")
    p.add_argument("--out", default=None, help="cache folder (default data/flickr30k-cache, or "
                   "data/shapes with --format shapes)")
    p.add_argument("--format", default="auto", choices=["auto", *flickr30k.FORMATS, "shapes"])
    p.add_argument("--image-size", type=int, default=None,
                   help="side of the square cached pictures (default 224; 32 for shapes)")
    p.add_argument("--images-dir", default=None, help="photo folder, if not a usual name")
    p.add_argument("--workers", type=int, default=min(8, os.cpu_count() or 1),
                   help="decoding processes (0 = this process)")
    p.add_argument("--max-bad-fraction", type=float, default=0.05)
    p.add_argument("--force", action="store_true", help="rebuild even if the cache is current")
    p.add_argument("--from-hub", default=None, metavar="NAME",
                   help="download NAME (e.g. nlphuji/flickr30k) into --root first")
    p.add_argument("--seed", type=int, default=0, help="shapes: generation seed")
    p.add_argument("--num-train", type=int, default=20_000, help="shapes: training pictures")
    p.add_argument("--num-val", type=int, default=2_000, help="shapes: validation pictures")
    p.add_argument("--num-test", type=int, default=2_000, help="shapes: test pictures")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    if args.format == "shapes":
        meta = shapes.build_cache(args.out or "data/shapes", args.image_size or 32, args.num_train,
                                  args.num_val, args.num_test, args.seed, force=args.force)
        summary = {"format": "shapes", "images": meta["images"], "captions": meta["captions"],
                   "skipped": 0, "splits": meta["splits"]}
    else:
        if args.from_hub:
            flickr30k.load_from_hub(args.root, args.from_hub)
        try:
            full = flickr30k.build_cache(
                args.root, args.out or "data/flickr30k-cache", args.image_size or 224,
                args.format, args.images_dir, args.workers, args.max_bad_fraction,
                force=args.force)
        except DataError as e:
            sys.exit(f"error: {e}")
        summary = {k: full[k] for k in ("format", "images", "captions", "skipped", "splits")}
    print(json.dumps(summary))
    return summary


if __name__ == "__main__":
    main()
