"""Flickr30k from whichever annotation format is on disk, into the image cache.

Four on-disk formats are auto-detected in `root` (and one folder below it):

    token     results_20130124.token    "1000092795.jpg#0<TAB>Two young guys ... yard ."
    kaggle    results.csv               "image_name| comment_number| comment", a space after
                                        each "|", and one broken row (line 19,999 of the real file:
                                        "2199200615.jpg| 4   A dog runs ..." has no second "|"),
                                        repaired here; an unrepairable row is reported by its
                                        line number
    karpathy  dataset_flickr30k.json    images[] {filename, imgid, split, sentences[] {raw, tokens}}
                                        with the standard 29,000 / 1,014 / 1,000 split (+ restval)
    nlphuji   flickr_annotations_30k.csv  columns raw,sentids,split,filename,img_id; raw and
                                        sentids are JSON-list strings; `split` is the real split
                                        (`load_from_hub` writes this format from the HF hub)

Splits: Karpathy's where the annotations carry it (karpathy, nlphuji; "restval" joins train).
Otherwise (token, kaggle) a deterministic split by image: sha1(file name) maps each photo to a
number in [0, 1); below `test_fraction` (0.0315, Karpathy's 1,000 / 31,783) is test, below
`test_fraction + val_fraction` (+0.0319, Karpathy's 1,014 / 31,783) is val, the rest train. All
captions of one photo land in one split, and the split does not depend on which other photos exist.

Bad input (missing files, unreadable / truncated / zero-byte images, empty captions, unparsable
rows) is skipped with one warning that counts it and names the first few; above `max_bad_fraction`
the build stops with a DataError naming the root, the format and what was wrong. Odd image modes
(CMYK, greyscale, RGBA, 16-bit) are converted, not skipped.
"""

from __future__ import annotations

import csv
import hashlib
import json
import re
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import cache
from .cache import DataError
from .lock import one_builder

ANNOTATION_FILES = {
    "karpathy": "dataset_flickr30k.json",
    "nlphuji": "flickr_annotations_30k.csv",
    "kaggle": "results.csv",
    "token": "results_20130124.token",
}
FORMATS = tuple(ANNOTATION_FILES)
IMAGE_DIRS = ("flickr30k-images", "flickr30k_images/flickr30k_images", "flickr30k_images",
              "Images", "images")
KARPATHY_SPLITS = {"train": "train", "restval": "train", "val": "val", "test": "test"}
VAL_FRACTION = 1014 / 31783
TEST_FRACTION = 1000 / 31783
MAX_LISTED = 5


@dataclass
class ImageRecord:
    """One photo and its captions, as the annotation file lists it."""

    file: str
    captions: list[str]
    split: str | None = None


@dataclass
class Parsed:
    """What a parser read: records, plus captions/rows it had to drop and why."""

    records: list[ImageRecord]
    bad_captions: list[str] = field(default_factory=list)  # "where: why" for each dropped caption
    repaired: list[str] = field(default_factory=list)  # rows read despite a known quirk


# ----------------------------------------------------------------------------- detection


def detect(root: str | Path, fmt: str = "auto") -> tuple[str, Path]:
    """Find the annotation file: returns (format, path). Looks in root and one folder below."""
    root = Path(root)
    if not root.is_dir():
        raise DataError(f"data root {root} is not a folder; pass --data.root / --root pointing at "
                        f"the folder holding the Flickr30k images and annotation file")
    wanted = FORMATS if fmt == "auto" else (fmt,)
    if fmt != "auto" and fmt not in FORMATS:
        raise DataError(f"format {fmt!r} is not one of auto, {', '.join(FORMATS)}")
    for name in wanted:
        for folder in [root, *sorted(p for p in root.iterdir() if p.is_dir())]:
            if (folder / ANNOTATION_FILES[name]).is_file():
                return name, folder / ANNOTATION_FILES[name]
    expected = ", ".join(f"{ANNOTATION_FILES[n]} ({n})" for n in wanted)
    raise DataError(f"{root}: no Flickr30k annotation file found; expected one of {expected} in "
                    f"this folder or one below it (see scripts/prepare_data.py --help)")


def find_image_dir(root: Path, ann_path: Path, records: list[ImageRecord],
                   images_dir: str | Path | None = None) -> Path:
    """The folder holding the photos: `images_dir` if given, else the first usual name that
    contains the first few listed files."""
    if images_dir is not None:
        p = Path(images_dir)
        p = p if p.is_absolute() else root / p
        if not p.is_dir():
            raise DataError(f"images_dir {p} is not a folder")
        return p
    probe = [r.file for r in records[:20]]
    candidates = [base / d for base in dict.fromkeys([root, ann_path.parent]) for d in IMAGE_DIRS]
    candidates += [ann_path.parent, root]
    for c in candidates:
        if c.is_dir() and any((c / f).is_file() for f in probe):
            return c
    raise DataError(f"{root}: cannot find the photos listed in {ann_path.name} (e.g. {probe[:1]}); "
                    f"looked in {', '.join(str(c) for c in candidates)}; pass images_dir")


# ----------------------------------------------------------------------------- parsers


def _group(pairs: list[tuple[str, str]]) -> list[ImageRecord]:
    by_file: dict[str, ImageRecord] = {}
    for f, text in pairs:
        by_file.setdefault(f, ImageRecord(f, [])).captions.append(text)
    return list(by_file.values())


def parse_token(path: Path) -> Parsed:
    """results_20130124.token: `name.jpg#k<TAB>caption` per line."""
    pairs, bad = [], []
    with open(path, encoding="utf-8-sig") as fh:
        for n, line in enumerate(fh, 1):
            line = line.rstrip("\n\r")
            if not line.strip():
                continue
            key, tab, text = line.partition("\t")
            name = key.split("#", 1)[0].strip()
            if not tab or not name:
                bad.append(f"{path.name} line {n}: expected 'name.jpg#k<TAB>caption'")
                continue
            pairs.append((name, text.strip()))
    return Parsed(_group(pairs), bad)


_KAGGLE_BROKEN = re.compile(r"^\s*(\d+)\s+(.*)$")


def parse_kaggle(path: Path) -> Parsed:
    """Kaggle results.csv: `image_name| comment_number| comment`, "| " separated, not real CSV
    (captions hold commas and quotes), so it is split by hand on the first two "|"."""
    pairs, bad, repaired = [], [], []
    with open(path, encoding="utf-8-sig") as fh:
        header = fh.readline()
        cols = [c.strip() for c in header.split("|")]
        if cols[:1] != ["image_name"]:
            raise DataError(f"{path}: first line should be the header 'image_name| comment_number| "
                            f"comment', got {header.strip()[:60]!r}")
        for n, line in enumerate(fh, 2):
            line = line.rstrip("\n\r")
            if not line.strip():
                continue
            parts = line.split("|", 2)
            if len(parts) == 3:
                name, text = parts[0].strip(), parts[2].strip()
            elif len(parts) == 2 and (m := _KAGGLE_BROKEN.match(parts[1])):
                # The known broken row: "2199200615.jpg| 4   A dog ..." lost its second "|".
                name, text = parts[0].strip(), m.group(2).strip()
                repaired.append(f"{path.name} line {n}")
            else:
                bad.append(f"{path.name} line {n}: expected 'image_name| comment_number| comment'")
                continue
            pairs.append((name, text.strip()))
    return Parsed(_group(pairs), bad, repaired)


def parse_karpathy(path: Path) -> Parsed:
    """Karpathy's dataset_flickr30k.json: images[] with filename, split, sentences[] raw/tokens."""
    try:
        data = json.loads(path.read_text(encoding="utf-8-sig"))  # a BOM is tolerated
        images = data["images"]
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise DataError(f"{path}: not Karpathy's format (a JSON object with an 'images' list):"
                        f" {e}") from e
    records = []
    for i, im in enumerate(images):
        try:
            split = KARPATHY_SPLITS[im["split"]]
            caps = [s.get("raw") or " ".join(s.get("tokens", [])) for s in im["sentences"]]
            records.append(ImageRecord(im["filename"], caps, split))
        except KeyError as e:
            raise DataError(f"{path}: images[{i}] lacks field {e} or has an unknown split"
                            f" (expected filename, sentences, split in"
                            f" {list(KARPATHY_SPLITS)})") from e
    return Parsed(records)


def parse_nlphuji(path: Path) -> Parsed:
    """flickr_annotations_30k.csv (the HF hub dataset nlphuji/flickr30k): raw is a JSON list."""
    records, bad = [], []
    with open(path, encoding="utf-8-sig", newline="") as fh:
        reader = csv.DictReader(fh)
        missing = {"raw", "split", "filename"} - set(reader.fieldnames or [])
        if missing:
            raise DataError(f"{path}: missing columns {sorted(missing)}; expected "
                            f"raw,sentids,split,filename,img_id")
        for n, row in enumerate(reader, 2):
            try:
                caps = json.loads(row["raw"])
                split = KARPATHY_SPLITS[row["split"].strip()]
            except (json.JSONDecodeError, KeyError, AttributeError):
                bad.append(f"{path.name} line {n}: 'raw' must be a JSON list and 'split' one of "
                           f"{list(KARPATHY_SPLITS)}")
                continue
            records.append(ImageRecord(row["filename"].strip(), [str(c) for c in caps], split))
    return Parsed(records, bad)


PARSERS = {"token": parse_token, "kaggle": parse_kaggle, "karpathy": parse_karpathy,
           "nlphuji": parse_nlphuji}


def hash_split(file: str, val_fraction: float = VAL_FRACTION,
               test_fraction: float = TEST_FRACTION) -> str:
    """Deterministic split of one photo from its file name alone."""
    u = int(hashlib.sha1(file.encode()).hexdigest()[:8], 16) / 2**32
    return "test" if u < test_fraction else "val" if u < test_fraction + val_fraction else "train"


def read_annotations(root: str | Path, fmt: str = "auto", val_fraction: float = VAL_FRACTION,
                     test_fraction: float = TEST_FRACTION) -> tuple[str, Path, Parsed]:
    """Detect, parse, assign splits, drop empty captions (recorded in `bad_captions`)."""
    fmt, path = detect(root, fmt)
    try:
        parsed = PARSERS[fmt](path)
    except UnicodeDecodeError as error:
        raise _not_utf8(path) from error
    for r in parsed.records:
        if r.split is None:
            r.split = hash_split(r.file, val_fraction, test_fraction)
        good = [c.strip() for c in r.captions if c and c.strip()]
        parsed.bad_captions += [f"{r.file}: empty caption"] * (len(r.captions) - len(good))
        r.captions = good
    return fmt, path, parsed


def _not_utf8(path: Path) -> DataError:
    raw = path.read_bytes()
    try:
        raw.decode("utf-8-sig")
        where = ""
    except UnicodeDecodeError as error:
        line = raw[: error.start].count(b"\n") + 1
        where = f" at line {line} (byte {error.start})"
    return DataError(f"{path}: not UTF-8{where}. Re-save it as UTF-8, e.g. "
                     f"iconv -f latin1 -t utf-8 {path.name} > fixed && mv fixed {path.name}")


# ----------------------------------------------------------------------------- the cache


@one_builder("out")
def build_cache(
    root: str | Path,
    out: str | Path,
    image_size: int = 224,
    fmt: str = "auto",
    images_dir: str | Path | None = None,
    workers: int = 0,
    max_bad_fraction: float = 0.05,
    val_fraction: float = VAL_FRACTION,
    test_fraction: float = TEST_FRACTION,
    force: bool = False,
) -> dict[str, Any]:
    """Build (or reuse) the image cache of the Flickr30k copy at `root`; returns the summary
    `{"format", "images", "captions", "skipped", "splits": {...}, "cache", "rebuilt"}`."""
    root, out = Path(root), Path(out)
    fmt, ann_path, parsed = read_annotations(root, fmt, val_fraction, test_fraction)
    records = parsed.records
    if not records:
        raise DataError(f"{ann_path}: no captions could be read ({fmt} format)")
    img_dir = find_image_dir(root, ann_path, records, images_dir)
    paths = [img_dir / r.file for r in records]
    split_rule = ({"rule": "annotations"} if fmt in ("karpathy", "nlphuji") else
                  {"rule": "sha1", "val": val_fraction, "test": test_fraction})
    settings = {"version": cache.CACHE_VERSION, "format": fmt, "image_size": int(image_size),
                "source": str(ann_path.resolve()), "split": split_rule,
                "fingerprint": cache.fingerprint([ann_path], paths)}
    if not force and cache.is_current(out, settings):
        meta = cache.read_meta(out)
        return _summary(meta, out, rebuilt=False)

    t0 = time.perf_counter()
    cache.start_build(out)
    images = cache.new_image_array(out, len(records), image_size)
    del images  # workers open it themselves
    bad_images = cache.decode_all_into(out / "images.npy", [str(p) for p in paths], image_size,
                                       workers, desc=f"flickr30k {image_size}px")
    for row, r in enumerate(records):
        if not r.captions and row not in bad_images:
            bad_images[row] = "no non-empty caption"
    problems = [f"{records[row].file} ({why})" for row, why in sorted(bad_images.items())]
    problems += parsed.bad_captions
    n_caps = sum(len(r.captions) for r in records) + len(parsed.bad_captions)
    frac_img, frac_cap = len(bad_images) / len(records), len(parsed.bad_captions) / max(n_caps, 1)
    if max(frac_img, frac_cap) > max_bad_fraction:
        cache.remove_cache(out)
        raise DataError(
            f"{root} ({fmt} format, {ann_path.name}, images in {img_dir}): {len(bad_images)} of "
            f"{len(records)} images and {len(parsed.bad_captions)} of {n_caps} captions are bad, "
            f"more than max_bad_fraction={max_bad_fraction}; first few: "
            f"{'; '.join(problems[:MAX_LISTED])}. Fix the files, point images_dir at the right "
            f"folder, or raise max_bad_fraction"
        )
    skipped = len(bad_images) + len(parsed.bad_captions)
    if skipped:
        warnings.warn(
            f"flickr30k at {root} ({fmt}): skipped {len(bad_images)} of {len(records)} images and "
            f"{len(parsed.bad_captions)} captions; first few: {'; '.join(problems[:MAX_LISTED])}",
            stacklevel=2,
        )
    rows, texts, splits = [], [], []
    for row, r in enumerate(records):
        if row in bad_images:
            continue
        rows += [row] * len(r.captions)
        texts += r.captions
        splits += [r.split] * len(r.captions)
    meta = cache.write_annotations(
        out, [r.file for r in records], rows, texts, splits, settings,
        extra={"skipped": skipped, "repaired": parsed.repaired,
               "build_seconds": round(time.perf_counter() - t0, 2)},
    )
    return _summary(meta, out, rebuilt=True)


def _summary(meta: dict[str, Any], out: Path, rebuilt: bool) -> dict[str, Any]:
    return {"format": meta["settings"]["format"], "images": meta["images"],
            "captions": meta["captions"], "skipped": meta.get("skipped", 0),
            "splits": meta["splits"], "cache": str(out), "rebuilt": rebuilt}


def load_from_hub(root: str | Path, name: str = "nlphuji/flickr30k") -> Path:
    """Download the HF hub copy into `root` in the nlphuji on-disk format (needs network).

    The hub dataset holds everything in one "test" split, the real split being the `split` column.
    `datasets` >= 4 no longer runs loading scripts; this works where the hub serves the data as
    files (parquet conversion). Images are written as their original bytes, never re-encoded.
    """
    from datasets import Image as HFImage
    from datasets import load_dataset

    root = Path(root)
    img_dir = root / IMAGE_DIRS[0]
    img_dir.mkdir(parents=True, exist_ok=True)
    ds = load_dataset(name, split="test").cast_column("image", HFImage(decode=False))
    with open(root / ANNOTATION_FILES["nlphuji"], "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["raw", "sentids", "split", "filename", "img_id"])
        for ex in ds:
            target = img_dir / ex["filename"]
            if not target.exists():
                target.write_bytes(ex["image"]["bytes"])
            w.writerow([json.dumps(ex["caption"]), json.dumps(ex["sentids"]), ex["split"],
                        ex["filename"], ex["img_id"]])
    return root
