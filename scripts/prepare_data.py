"""Decode a folder of captioned photos once into the uint8 image cache training reads (or
generate shapes).

The layout is found from the files in --root (or one folder below it); when several are there,
the first of this list is read and the others named as ignored (--format picks one):

  karpathy     dataset_flickr30k.json,      Karpathy's split files: the standard split (Flickr30k
               dataset_flickr8k.json,       29,000 / 1,014 / 1,000; restval joins train); COCO's
               dataset_coco.json            entries' filepath (train2014/, val2014/) is kept
  nlphuji      flickr_annotations_30k.csv   the Hugging Face hub copy (nlphuji/flickr30k):
                                            JSON-list captions, the real split in its `split`
                                            column; --from-hub downloads it into --root first
                                            (needs network)
  coco         annotations/captions_{train,val}2017.json (or 2014): COCO's own; photos in
                                            train2017/, val2017/; train is train, val is halved
                                            into val and test by a hash of the file name
  flickr8k     Flickr8k.token.txt           Flickr8k as released: "name.jpg#0<TAB>caption", split
                                            by Flickr_8k.{train,dev,test}Images.txt beside it (dev
                                            is val; photos in none are left out and counted);
                                            photos in Flicker8k_Dataset/ (sic)
  imagefolder  metadata.jsonl, metadata.csv  a folder of one's own photos (Hugging Face
                                            imagefolder): file_name + text (or caption) columns,
                                            several rows a photo; train/ validation/ test/
                                            folders are the split where present
  token        results_20130124.token       Flickr30k's release: "1000092795.jpg#0<TAB>caption"
  kaggle       results.csv                  Kaggle's Flickr30k "image_name| comment_number|
                                            comment" file; its broken row ("2199200615.jpg| 4
                                            A dog ...") is repaired, any other bad row reported
                                            by line number
  kaggle8k     captions.txt                 Kaggle's Flickr8k: CSV "image,caption", photos in
                                            Images/

The photos are looked for in flickr30k-images/, flickr30k_images/flickr30k_images/,
Flicker8k_Dataset/, Images/ ... (or --images-dir). Without a split in the annotations (token,
kaggle, kaggle8k; an imagefolder without split folders) photos are split by a hash of their file
name (~3.2% val, ~3.1% test, the rest train). Missing, unreadable, truncated or zero-byte images
and empty captions are skipped with a warning; more than --max-bad-fraction of them is an error.
The cache is reused when its recorded settings match, rebuilt otherwise. More: docs/training.md.

--config configs/flickr30k.yaml takes --root, --out, --format, --images-dir, --max-bad-fraction
and --image-size from that training config (a flag given as well wins), so the cache built ahead
of a multi-GPU run is exactly the one training reads. Without it the defaults are the configs'
(--out data/flickr30k-cache-224, --image-size 224).

--format shapes generates the embedded default (captioned pictures of shapes) into --out instead.

The last line printed is one JSON object:
  {"format": ..., "images": N, "captions": N, "skipped": N,
   "splits": {"train": N, "val": N, "test": N}}

`prepare_data.py shards --from SRC --out DIR` writes streamed shards instead, for data past one
disk or many nodes (vitbert.streaming.StreamingSource reads them; docs/scale-out.md): litdata chunks
of the original photo bytes and captions, from any layout above or an img2dataset webdataset
folder (00000.tar, ...); see `prepare_data.py shards --help`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import NoReturn

from vitbert.data import captioned_photos, layouts
from vitbert.data.cache import DataError
from vitbert.shapes import data as shapes

# Source settings a training config's data.source.init_args may hold, and their flag names here.
CONFIG_KEYS = {"root": "root", "cache_dir": "out", "format": "format", "images_dir": "images_dir",
               "max_bad_fraction": "max_bad_fraction"}


def build_parser() -> argparse.ArgumentParser:
    """The command line (tests/test_readme_commands.py parses the docs' commands with it)."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--config", default=None, metavar="YAML",
                   help="training config to take the data settings and image size from")
    p.add_argument("--root", default=None,
                   help=f"folder of captioned photos in any layout above (default "
                   f"{captioned_photos.DEFAULT_ROOT})")
    p.add_argument("--out", default=None, help=f"cache folder (default "
                   f"{captioned_photos.DEFAULT_CACHE_DIR}, or {shapes.DEFAULT_ROOT} with "
                   f"--format shapes)")
    p.add_argument("--format", default=None, choices=["auto", *layouts.FORMATS, "shapes"],
                   help="layout (default auto: the first found)")
    p.add_argument("--image-size", type=int, default=None,
                   help="side of the square cached pictures (default 224; 32 for shapes)")
    p.add_argument("--images-dir", default=None, help="photo folder, if not a usual name")
    p.add_argument("--workers", type=int, default=min(8, os.cpu_count() or 1),
                   help="decoding processes (0 = this process)")
    p.add_argument("--max-bad-fraction", type=float, default=None, help="default 0.05")
    p.add_argument("--force", action="store_true", help="rebuild even if the cache is current")
    p.add_argument("--from-hub", default=None, metavar="NAME",
                   help="download NAME (e.g. nlphuji/flickr30k) into --root first")
    p.add_argument("--seed", type=int, default=0, help="shapes: generation seed")
    p.add_argument("--num-train", type=int, default=20_000, help="shapes: training pictures")
    p.add_argument("--num-val", type=int, default=2_000, help="shapes: validation pictures")
    p.add_argument("--num-test", type=int, default=2_000, help="shapes: test pictures")
    add_shards_command(p)
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    args = build_parser().parse_args(argv)
    if args.command == "shards":
        return args
    if args.config:
        _read_config(args)
    for flag, default in (("root", captioned_photos.DEFAULT_ROOT), ("format", "auto"),
                          ("max_bad_fraction", 0.05)):
        if getattr(args, flag) is None:
            setattr(args, flag, default)
    return args


def _read_config(args: argparse.Namespace) -> None:
    """Fill the flags not given from the training config's data source and image size."""
    import yaml

    try:
        cfg = yaml.safe_load(Path(args.config).read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as e:
        fail(f"--config {args.config}: cannot read it as YAML ({e})")
    source = ((cfg.get("data") or {}).get("source") or {})
    if not str(source.get("class_path", "")).endswith("CaptionedPhotos"):
        fail(f"--config {args.config}: data.source is not a CaptionedPhotos; "
             f"this script prepares photos on disk (use --format shapes for the shapes data)")
    for key, flag in CONFIG_KEYS.items():
        value = (source.get("init_args") or {}).get(key)
        if getattr(args, flag) is None and value is not None:
            setattr(args, flag, value)
    image = ((cfg.get("model") or {}).get("net") or {}).get("image") or {}
    if args.image_size is None and image.get("image_size") is not None:
        args.image_size = int(image["image_size"])


def fail(message: str) -> NoReturn:
    """A mistake the user can fix: one line on stderr, exit status 2 (as every script)."""
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def add_shards_command(parser: argparse.ArgumentParser) -> None:
    """`prepare_data.py shards`: the streamed shards' command line, beside the flat form (which
    takes no command)."""
    from vitbert.streaming import shards

    commands = parser.add_subparsers(dest="command", metavar="shards")
    p = commands.add_parser("shards", description=shards.__doc__,
                            formatter_class=argparse.RawTextHelpFormatter,
                            help="write streamed litdata shards instead of the image cache")
    p.add_argument("--from", dest="source", required=True, metavar="FOLDER",
                   help="captioned photos in any layout above, or an img2dataset output folder")
    p.add_argument("--out", required=True, help="shard folder to write (train/, val/, test/, "
                   "tokenizer.json, skipped.json, shards.json)")
    p.add_argument("--format", default="auto", choices=["auto", *layouts.FORMATS,
                                                        shards.IMG2DATASET],
                   help="layout of --from (default auto)")
    p.add_argument("--images-dir", default=None, help="photo folder, if not a usual name")
    p.add_argument("--workers", type=int, default=min(8, os.cpu_count() or 1),
                   help="processes checking and writing photos (0 = this process)")
    p.add_argument("--seed", type=int, default=0, help="seed of the shuffle before writing")
    p.add_argument("--vocab-size", type=int, default=8000,
                   help="largest vocabulary of the WordPiece trained on the training captions")
    p.add_argument("--min-frequency", type=int, default=2,
                   help="fewest occurrences for a piece to enter the vocabulary")
    p.add_argument("--chunk-bytes", default="64MB", help="litdata chunk size (default 64MB)")
    p.add_argument("--max-bad-fraction", type=float, default=0.05,
                   help="largest fraction of unusable photos skipped (default 0.05)")
    p.add_argument("--force", action="store_true", help="replace a non-empty --out")


def shards(args: argparse.Namespace) -> dict:
    from vitbert.streaming.shards import write_shards

    try:
        summary = write_shards(args.source, args.out, args.format, args.images_dir, args.workers,
                               args.seed, args.vocab_size, args.min_frequency, args.chunk_bytes,
                               args.max_bad_fraction, args.force)
    except DataError as e:
        fail(str(e))
    print(json.dumps({k: summary[k] for k in ("images", "captions", "skipped", "splits")}
                     | {"format": summary["settings"]["format"], "out": args.out}))
    return summary


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    if args.command == "shards":
        return shards(args)
    try:
        return prepare(args)
    except DataError as e:
        fail(str(e))


def prepare(args: argparse.Namespace) -> dict:
    if args.format == "shapes":
        meta = shapes.build_cache(args.out or shapes.DEFAULT_ROOT, args.image_size or 32,
                                  args.num_train, args.num_val, args.num_test, args.seed,
                                  force=args.force)
        summary = {"format": "shapes", "images": meta["images"], "captions": meta["captions"],
                   "skipped": 0, "splits": meta["splits"]}
    else:
        if args.from_hub:
            layouts.flickr30k.load_from_hub(args.root, args.from_hub)
        full = captioned_photos.build_cache(
            args.root, args.out or captioned_photos.DEFAULT_CACHE_DIR, args.image_size or 224,
            args.format, args.images_dir, args.workers, args.max_bad_fraction,
            force=args.force)
        summary = {k: full[k] for k in ("format", "images", "captions", "skipped", "splits")}
    print(json.dumps(summary))
    return summary


if __name__ == "__main__":
    main()
