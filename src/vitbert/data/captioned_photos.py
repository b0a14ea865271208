"""Captioned photos from whichever layout is on disk, into the image cache.

The layouts (Flickr30k's four annotation formats, Flickr8k as released and from Kaggle,
Karpathy's json for Flickr8k and COCO, COCO's own annotations, a Hugging Face imagefolder) are
read by `vitbert.data.layouts`, which also says which one a folder holds. This module turns the
records into the image cache (`vitbert.data.cache`) in seven steps, `build_cache` calling them in
order: find the photos, settle the cache's settings, decode, pick the unusable photos, stop above
`max_bad_fraction`, pair captions with rows, write the metadata.

Splits: the layout's own where the annotations carry one (Karpathy's json and the nlphuji csv:
Karpathy's; Flickr8k's split files; COCO's train, its val halved into val and test; an
imagefolder's split folders). Otherwise a deterministic split by image: sha1(file name) maps each
photo to a number in [0, 1); below `test_fraction` (0.0315, Karpathy's 1,000 / 31,783) is test,
below `test_fraction + val_fraction` (+0.0319, Karpathy's 1,014 / 31,783) is val, the rest train.
All captions of one photo land in one split, and the split does not depend on which other photos
exist. Photos a layout's split files (or split folders) leave out are not cached; the split
summary counts them.

Bad input (missing files, unreadable / truncated / zero-byte images, empty captions, unparsable
rows) is skipped with one warning that counts it and names the first few; above `max_bad_fraction`
the build stops with a DataError naming the root, the format and what was wrong. Odd image modes
(CMYK, greyscale, RGBA, 16-bit) are converted, not skipped.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import cache, layouts
from .cache import DataError
from .layouts import TEST_FRACTION, UNLISTED, VAL_FRACTION, ImageRecord, Parsed
from .layouts.karpathy import FILES as KARPATHY_FILES
from .lock import one_builder

# Photo folders searched (below the root and below the annotation file's folder) when the
# layout does not fix one: Flickr30k's, Flickr8k's (typo included), Kaggle's.
IMAGE_DIRS = ("flickr30k-images", "flickr30k_images/flickr30k_images", "flickr30k_images",
              "Flicker8k_Dataset", "Flickr8k_Dataset", "Images", "images")
MAX_LISTED = 5
# Defaults shared by CaptionedPhotos, scripts/prepare_data.py and configs/flickr30k*.yaml, so the
# cache prepared ahead of a multi-GPU run is the one training reads (the size is the configs').
DEFAULT_ROOT = "data/flickr30k"
DEFAULT_CACHE_DIR = "data/flickr30k-cache-224"


def find_image_dir(root: Path, ann_path: Path, parsed: Parsed,
                   images_dir: str | Path | None = None) -> Path:
    """The folder holding the photos: `images_dir` if given, else the first of the layout's
    folders (or the usual names) that contains one of the first few listed files."""
    if images_dir is not None:
        p = Path(images_dir)
        p = p if p.is_absolute() else root / p
        if not p.is_dir():
            raise DataError(f"images_dir {p} is not a folder")
        return p
    probe = [r.file for r in parsed.records[:20]]
    candidates = parsed.image_dirs or [
        *(base / d for base in dict.fromkeys([root, ann_path.parent]) for d in IMAGE_DIRS),
        ann_path.parent, root]
    for c in candidates:
        if c.is_dir() and any((c / f).is_file() for f in probe):
            return c
    raise DataError(f"{root}: cannot find the photos listed in {ann_path.name} (e.g. {probe[:1]}); "
                    f"looked in {', '.join(str(c) for c in candidates)}; pass images_dir")


# ----------------------------------------------------------------------------- the cache


@dataclass
class PhotoCopy:
    """A copy of captioned photos as found on disk: its format, annotation file, photos, records."""

    root: Path
    fmt: str
    ann_path: Path
    img_dir: Path
    parsed: Parsed

    @property
    def records(self) -> list[ImageRecord]:
        return self.parsed.records

    @property
    def image_paths(self) -> list[Path]:
        return [self.img_dir / r.file for r in self.records]

    def describe(self) -> str:
        return f"{self.root} ({self.fmt} format, {self.ann_path.name}, images in {self.img_dir})"


def locate(root: str | Path, fmt: str = "auto", images_dir: str | Path | None = None
           ) -> PhotoCopy:
    """Step 1: read the annotations (splits assigned), find the photo folder, and set aside the
    photos the split leaves out (`Parsed.unlisted`). One of those without a file stays, to be
    skipped and counted as a missing photo like any other."""
    root = Path(root)
    fmt, ann_path, parsed = layouts.read_annotations(root, fmt)
    if not parsed.records:
        raise DataError(f"{ann_path}: no captions could be read ({fmt} format)")
    img_dir = find_image_dir(root, ann_path, parsed, images_dir)
    left_out = {r.file for r in parsed.records
                if r.split == UNLISTED and (img_dir / r.file).is_file()}
    parsed.unlisted = sorted(left_out)
    parsed.records = [r for r in parsed.records if r.file not in left_out]
    return PhotoCopy(root, fmt, ann_path, img_dir, parsed)


def cache_settings(src: PhotoCopy, image_size: int) -> dict[str, Any]:
    """Step 2: what the cache depends on, fingerprint of the files included; a cache built with
    other settings is stale."""
    split_rule = src.parsed.split or {"rule": "sha1", "val": VAL_FRACTION, "test": TEST_FRACTION}
    return {"version": cache.CACHE_VERSION, "format": src.fmt, "image_size": int(image_size),
            "source": str(src.ann_path.resolve()), "split": split_rule,
            "fingerprint": cache.fingerprint(src.parsed.files, src.image_paths)}


def split_origin(meta: dict[str, Any]) -> str:
    """Where a cache's train / val / test split came from (its cache.json), said at the start of
    every fit: a hash split has few val and test photos on a small copy, and a user who expected
    Karpathy's split should see at once that it was not used. Photos the split left out, and
    other layouts in the folder that were not read, are said too."""
    settings = meta["settings"]
    path, rule, fmt = settings["source"], settings["split"], settings["format"]
    texts = layouts.SPLIT_TEXTS.get(fmt)  # a layout with a split of its own kind says it
    if rule["rule"] != "annotations":
        origin = (f"hash of the file name ({path} has no split; ~{rule['val']:.0%} val, "
                  f"~{rule['test']:.0%} test)")
    else:
        origin = texts.split_origin(path, rule) if texts else f"Karpathy's split from {path}"
    if n := meta.get("unlisted"):
        origin += f"; {n} photo{'s' if n != 1 else ''} {texts.LEFT_OUT} left out"
    if meta.get("ignored"):
        origin += (f"; read {fmt} ({Path(path).name}), ignored: {', '.join(meta['ignored'])} "
                   f"(the first layout found is read: docs/training.md)")
    return origin


def empty_split(settings: dict[str, Any], split: str, photos: int, root: str | Path
                ) -> tuple[str, str]:
    """(why `split` holds no photo, how to give it some), for the data summary's line."""
    name, rule = Path(settings["source"]).name, settings["split"]
    if rule["rule"] == "annotations":
        if texts := layouts.SPLIT_TEXTS.get(settings["format"]):
            return texts.empty_split(split, settings["source"], rule)
        return (f"{name} puts no photo in {split}",
                f"give some photos split '{split}' in {name}")
    if split == "train":
        return (f"the hash split of {photos} photos gave none",
                f"add photos to {root} (about 94% of them land in train)")
    return (f"the hash split of {photos} photos gave none",
            f"add photos to {root} or give Karpathy's {KARPATHY_FILES[0]}")


def decode_photos(src: PhotoCopy, out: Path, image_size: int, workers: int) -> dict[int, str]:
    """Step 3: every photo into its row of images.npy, in `workers` processes; returns
    {row: why} for the photos that could not be decoded."""
    cache.start_build(out)
    cache.new_image_array(out, len(src.records), image_size)  # dropped: workers open it themselves
    return cache.decode_all_into(out / "images.npy", [str(p) for p in src.image_paths],
                                 image_size, workers, desc=f"{src.fmt} photos {image_size}px")


def unusable_rows(src: PhotoCopy, bad_images: dict[int, str]) -> dict[int, str]:
    """Step 4: the photos left out, with why: undecodable, or no caption left to pair them with."""
    blank = {row: "no non-empty caption" for row, r in enumerate(src.records)
             if not r.captions and row not in bad_images}
    return {**bad_images, **blank}


def check_bad_fraction(src: PhotoCopy, out: Path, bad_rows: dict[int, str],
                       max_bad_fraction: float) -> int:
    """Step 5: stop with a DataError above `max_bad_fraction` (removing the partial cache), warn
    below it; returns the count of skipped images and captions."""
    records, bad_captions = src.records, src.parsed.bad_captions
    problems = [f"{records[row].file} ({why})" for row, why in sorted(bad_rows.items())]
    problems += bad_captions
    n_caps = sum(len(r.captions) for r in records) + len(bad_captions)
    frac_img, frac_cap = len(bad_rows) / len(records), len(bad_captions) / max(n_caps, 1)
    first = "; ".join(problems[:MAX_LISTED])
    if max(frac_img, frac_cap) > max_bad_fraction:
        cache.remove_cache(out)
        raise DataError(
            f"{src.describe()}: {len(bad_rows)} of {len(records)} images and "
            f"{len(bad_captions)} of {n_caps} captions are bad, more than "
            f"max_bad_fraction={max_bad_fraction}; first few: {first}. Fix the files, point "
            f"images_dir at the right folder, or raise max_bad_fraction"
        )
    skipped = len(bad_rows) + len(bad_captions)
    if skipped:
        warnings.warn(
            f"{src.fmt} photos at {src.root}: skipped {len(bad_rows)} of {len(records)} "
            f"images and {len(bad_captions)} captions; first few: {first}",
            stacklevel=3,
        )
    return skipped


def caption_table(src: PhotoCopy,
                  bad_rows: dict[int, str]) -> tuple[list[int], list[str], list[str]]:
    """Step 6: one (image row, caption, split) per caption of every usable photo."""
    rows, texts, splits = [], [], []
    for row, r in enumerate(src.records):
        if row in bad_rows:
            continue
        rows += [row] * len(r.captions)
        texts += r.captions
        splits += [r.split] * len(r.captions)
    return rows, texts, splits


@one_builder("out")
def build_cache(
    root: str | Path,
    out: str | Path,
    image_size: int = 224,
    fmt: str = "auto",
    images_dir: str | Path | None = None,
    workers: int = 0,
    max_bad_fraction: float = 0.05,
    force: bool = False,
) -> dict[str, Any]:
    """Build (or reuse) the image cache of the captioned photos at `root`; returns the summary
    `{"format", "images", "captions", "skipped", "splits": {...}, "cache", "rebuilt"}`."""
    out = Path(out)
    src = locate(root, fmt, images_dir)
    settings = cache_settings(src, image_size)
    if not force and cache.is_current(out, settings):
        return _summary(cache.read_meta(out), out, rebuilt=False)
    t0 = time.perf_counter()
    bad_rows = unusable_rows(src, decode_photos(src, out, image_size, workers))
    skipped = check_bad_fraction(src, out, bad_rows, max_bad_fraction)
    rows, texts, splits = caption_table(src, bad_rows)
    # Step 7: the metadata, cache.json last (its presence marks the cache complete).
    meta = cache.write_annotations(
        out, [r.file for r in src.records], rows, texts, splits, settings,
        extra={"skipped": skipped, "repaired": src.parsed.repaired,
               "unlisted": len(src.parsed.unlisted), "ignored": src.parsed.ignored,
               "build_seconds": round(time.perf_counter() - t0, 2)},
    )
    return _summary(meta, out, rebuilt=True)


def _summary(meta: dict[str, Any], out: Path, rebuilt: bool) -> dict[str, Any]:
    return {"format": meta["settings"]["format"], "images": meta["images"],
            "captions": meta["captions"], "skipped": meta.get("skipped", 0),
            "splits": meta["splits"], "unlisted": meta.get("unlisted", 0), "cache": str(out),
            "rebuilt": rebuilt}
