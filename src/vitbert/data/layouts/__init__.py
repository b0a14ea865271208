"""Every on-disk layout of captioned photos that vitbert reads, and which one a folder holds.

A layout is found by its annotation file, in the folder given or one folder below it. When
several stand there, the first in this order is read and the others are named as ignored in the
fit's split summary: layouts whose annotations carry a split come before those that do not.

    format       file (in the folder or one below)      split
    karpathy     dataset_flickr30k.json                 Karpathy's (`layouts.karpathy`)
    karpathy     dataset_flickr8k.json                  Karpathy's
    karpathy     dataset_coco.json                      Karpathy's (restval joins train)
    nlphuji      flickr_annotations_30k.csv             Karpathy's (`layouts.flickr30k`)
    coco         annotations/captions_*2017.json        train; val halved into val and test
    coco         annotations/captions_*2014.json        the same (`layouts.coco`)
    flickr8k     Flickr8k.token.txt                     Flickr_8k.{train,dev,test}Images.txt
                                                        (`layouts.flickr8k`)
    imagefolder  metadata.jsonl or metadata.csv         train/, validation/, test/ folders, else
                 (also in the split folders)            the hash (`layouts.imagefolder`)
    token        results_20130124.token                 hash of the file name (`layouts.flickr30k`)
    kaggle       results.csv                            hash of the file name
    kaggle8k     captions.txt                           hash of the file name (`layouts.flickr8k`)

Reading a layout means: find it (`detect`), parse its files into one `ImageRecord` per photo
(bad rows skipped and named in `Parsed.bad_captions`), give photos without a split the hash split,
and drop empty captions (`read_annotations`). Turning the records into the image cache is
`vitbert.data.captioned_photos`'s work; streamed shards, `vitbert.streaming.shards`'.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..cache import DataError
from . import coco, flickr8k, flickr30k, imagefolder, karpathy
from .records import (
    TEST_FRACTION,
    UNLISTED,
    VAL_FRACTION,
    ImageRecord,
    Parsed,
    hash_split,
    not_utf8,
)

__all__ = ["FORMATS", "LAYOUTS", "SPLIT_TEXTS", "TEST_FRACTION", "UNLISTED", "VAL_FRACTION",
           "Found", "ImageRecord", "Layout", "Parsed", "detect", "hash_split", "read_annotations"]


@dataclass(frozen=True)
class Layout:
    """One layout: its --format name, the file that marks it, how to find and read it."""

    name: str
    file: str  # the marking file, as errors and summaries name it
    find: Callable[[Path], Path | None]  # the marking file when `folder` holds this layout
    parse: Callable[[Path, Path], Parsed]  # (marking file, folder it was found in) -> records


def _file(name: str) -> Callable[[Path], Path | None]:
    return lambda folder: folder / name if (folder / name).is_file() else None


def _of_file(parse: Callable[[Path], Parsed]) -> Callable[[Path, Path], Parsed]:
    return lambda path, folder: parse(path)


# The order of detection (the module's docstring; docs/training.md).
LAYOUTS = (
    *(Layout("karpathy", name, _file(name), _of_file(karpathy.parse_karpathy))
      for name in karpathy.FILES),
    Layout("nlphuji", flickr30k.NLPHUJI, _file(flickr30k.NLPHUJI),
           _of_file(flickr30k.parse_nlphuji)),
    *(Layout("coco", f"annotations/captions_*{year}.json", coco.finder(year),
             _of_file(coco.parse_coco)) for year in coco.YEARS),
    Layout("flickr8k", flickr8k.TOKEN, _file(flickr8k.TOKEN), _of_file(flickr8k.parse_flickr8k)),
    Layout("imagefolder", "metadata.jsonl or metadata.csv", imagefolder.find,
           imagefolder.parse_imagefolder),
    Layout("token", flickr30k.TOKEN, _file(flickr30k.TOKEN), _of_file(flickr30k.parse_token)),
    Layout("kaggle", flickr30k.KAGGLE, _file(flickr30k.KAGGLE), _of_file(flickr30k.parse_kaggle)),
    Layout("kaggle8k", flickr8k.CAPTIONS, _file(flickr8k.CAPTIONS),
           _of_file(flickr8k.parse_captions_txt)),
)
FORMATS = tuple(dict.fromkeys(layout.name for layout in LAYOUTS))
# The layouts whose split is neither Karpathy's nor the hash: each module says where its split
# came from (`split_origin`), why a split is empty (`empty_split`) and how it names the photos
# its split leaves out (`LEFT_OUT`), for the fit's split summary.
SPLIT_TEXTS = {"coco": coco, "flickr8k": flickr8k, "imagefolder": imagefolder}


@dataclass(frozen=True)
class Found:
    """A layout found in a folder: which, its marking file, the folder, and every other layout
    found there too, as (name, file) pairs, in the order of detection."""

    layout: Layout
    path: Path
    folder: Path
    others: tuple[tuple[str, Path], ...]


def detect(root: str | Path, fmt: str = "auto") -> Found:
    """Find the layout in `root` or one folder below it: the first of LAYOUTS present (of those
    named `fmt`, unless "auto"), and all others present, to be named as ignored."""
    root = Path(root)
    if not root.is_dir():
        raise DataError(f"data root {root} is not a folder; point --data.source.init_args.root "
                        f"(train.py) or --root (prepare_data.py) at the folder holding the "
                        f"photos and their annotation file")
    if fmt != "auto" and fmt not in FORMATS:
        raise DataError(f"format {fmt!r} is not one of auto, {', '.join(FORMATS)}")
    folders = [root, *sorted(p for p in root.iterdir() if p.is_dir())]
    hits = [(layout, path, folder) for layout in LAYOUTS for folder in folders
            if (path := layout.find(folder)) is not None]
    chosen = next((h for h in hits if fmt in ("auto", h[0].name)), None)
    if chosen is None:
        wanted = [layout for layout in LAYOUTS if fmt in ("auto", layout.name)]
        expected = ", ".join(f"{layout.file} ({layout.name})" for layout in wanted)
        raise DataError(f"{root}: no Flickr30k annotation file found, nor any other layout "
                        f"vitbert reads; expected one of {expected} in this folder or one below "
                        f"it (see docs/training.md or scripts/prepare_data.py --help)")
    others = tuple(dict.fromkeys((layout.name, path) for layout, path, _ in hits
                                 if path != chosen[1]))
    return Found(chosen[0], chosen[1], chosen[2], others)


def read_annotations(root: str | Path, fmt: str = "auto") -> tuple[str, Path, Parsed]:
    """Detect, parse, assign splits, drop empty captions (recorded in `bad_captions`); returns
    (format, marking file, what was read)."""
    found = detect(root, fmt)
    try:
        parsed = found.layout.parse(found.path, found.folder)
    except UnicodeDecodeError as error:
        raise not_utf8(found.path) from error
    parsed.files = parsed.files or [found.path]
    parsed.ignored = [f"{name} ({_shown(path, Path(root))})" for name, path in found.others
                      if path not in parsed.files]
    for r in parsed.records:
        if r.split is None:
            r.split = hash_split(r.file)
        good = [c.strip() for c in r.captions if c and c.strip()]
        parsed.bad_captions += [f"{r.file}: empty caption"] * (len(r.captions) - len(good))
        r.captions = good
    return found.layout.name, found.path, parsed


def _shown(path: Path, root: Path) -> str:
    """`path` as the summary shows it: from `root`."""
    return path.relative_to(root).as_posix() if path.is_relative_to(root) else str(path)
