"""Benchmarks, one section each; `--json` prints one JSON object with every section's figures.

    python scripts/bench.py                      # all sections, human-readable
    python scripts/bench.py --sections data --json

Sections:
  data   samples/s of the cached loader (uint8 memmap) against decoding the JPEGs every time,
         same items, same DataLoader settings; and the cache's storage choice (numpy memmap vs
         a `datasets` Arrow table) with --storage. Uses --data-root if given (a Flickr30k copy in
         any format), else writes a Flickr-like folder of JPEGs from scikit-image's photos.

To add a section: write `bench_<name>(args) -> dict`, add its options in `add_<name>_args`, and
register both in SECTIONS.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from vitbert.data.bench import compare_storage, data_benchmark


def add_data_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("data")
    g.add_argument("--data-root", default=None, help="a Flickr30k copy (default: generated JPEGs)")
    g.add_argument("--data-images", type=int, default=256, help="generated JPEGs")
    g.add_argument("--data-image-size", type=int, default=224)
    g.add_argument("--data-batch-size", type=int, default=64)
    g.add_argument("--data-workers", type=int, default=2)
    g.add_argument("--data-batches", type=int, default=20, help="timed batches per loader")
    g.add_argument("--storage", action="store_true", help="also time memmap vs Arrow reads")


def bench_data(args: argparse.Namespace) -> dict[str, Any]:
    out = data_benchmark(args.data_root, args.data_images, args.data_image_size,
                         args.data_batch_size, args.data_workers, args.data_batches)
    if args.storage:
        out["storage"] = compare_storage(2000, args.data_image_size, 1000)
    return out


SECTIONS: dict[str, tuple[Callable[[argparse.ArgumentParser], None],
                          Callable[[argparse.Namespace], dict[str, Any]]]] = {
    "data": (add_data_args, bench_data),
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--sections", nargs="+", default=list(SECTIONS), choices=list(SECTIONS))
    p.add_argument("--json", action="store_true", help="print one JSON object, nothing else")
    for add_args, _ in SECTIONS.values():
        add_args(p)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    results = {name: SECTIONS[name][1](args) for name in args.sections}
    if args.json:
        print(json.dumps(results))
    else:
        for name, figures in results.items():
            print(f"== {name}")
            for k, v in figures.items():
                print(f"  {k:24s} {v}")
    return results


if __name__ == "__main__":
    main()
