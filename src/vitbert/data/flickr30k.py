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
# Defaults shared by Flickr30kSource, scripts/prepare_data.py and configs/flickr30k*.yaml, so the
# cache prepared ahead of a multi-GPU run is the one training reads (the size is the configs').
DEFAULT_ROOT = "data/flickr30k"
DEFAULT_CACHE_DIR = "data/flickr30k-cache-224"


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
        raise DataError(f"data root {root} is not a folder; point --data.source.init_args.root "
                        f"(train.py) or --root (prepare_data.py) at the folder holding the "
                        f"Flickr30k photos and annotation file")
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


@dataclass
class Flickr30kCopy:
    """A Flickr30k copy as found on disk: its format, annotation file, photos and records."""

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


def locate(root: str | Path, fmt: str = "auto", images_dir: str | Path | None = None,
           val_fraction: float = VAL_FRACTION,
           test_fraction: float = TEST_FRACTION) -> Flickr30kCopy:
    """Step 1: read the annotations (splits assigned) and find the photo folder."""
    root = Path(root)
    fmt, ann_path, parsed = read_annotations(root, fmt, val_fraction, test_fraction)
    if not parsed.records:
        raise DataError(f"{ann_path}: no captions could be read ({fmt} format)")
    img_dir = find_image_dir(root, ann_path, parsed.records, images_dir)
    return Flickr30kCopy(root, fmt, ann_path, img_dir, parsed)


def cache_settings(src: Flickr30kCopy, image_size: int, val_fraction: float = VAL_FRACTION,
                   test_fraction: float = TEST_FRACTION) -> dict[str, Any]:
    """Step 2: what the cache depends on, fingerprint of the files included; a cache built with
    other settings is stale."""
    split_rule = ({"rule": "annotations"} if src.fmt in ("karpathy", "nlphuji") else
                  {"rule": "sha1", "val": val_fraction, "test": test_fraction})
    return {"version": cache.CACHE_VERSION, "format": src.fmt, "image_size": int(image_size),
            "source": str(src.ann_path.resolve()), "split": split_rule,
            "fingerprint": cache.fingerprint([src.ann_path], src.image_paths)}


def split_origin(settings: dict[str, Any]) -> str:
    """Where a cache's train / val / test split came from (its `cache_settings`), said at the
    start of every fit: a hash split has few val and test photos on a small copy, and a user
    who expected Karpathy's split should see at once that it was not used."""
    path, rule = settings["source"], settings["split"]
    if rule["rule"] == "annotations":
        return f"Karpathy's split from {path}"
    return (f"hash of the file name ({path} has no split; ~{rule['val']:.0%} val, "
            f"~{rule['test']:.0%} test)")


def empty_split(settings: dict[str, Any], split: str, photos: int, root: str | Path
                ) -> tuple[str, str]:
    """(why `split` holds no photo, how to give it some), for the data summary's line."""
    name = Path(settings["source"]).name
    if settings["split"]["rule"] == "annotations":
        return (f"{name} puts no photo in {split}",
                f"give some photos split '{split}' in {name}")
    if split == "train":
        return (f"the hash split of {photos} photos gave none",
                f"add photos to {root} (about 94% of them land in train)")
    return (f"the hash split of {photos} photos gave none",
            f"add photos to {root} or give Karpathy's {ANNOTATION_FILES['karpathy']}")


def decode_photos(src: Flickr30kCopy, out: Path, image_size: int, workers: int) -> dict[int, str]:
    """Step 3: every photo into its row of images.npy, in `workers` processes; returns
    {row: why} for the photos that could not be decoded."""
    cache.start_build(out)
    cache.new_image_array(out, len(src.records), image_size)  # dropped: workers open it themselves
    return cache.decode_all_into(out / "images.npy", [str(p) for p in src.image_paths],
                                 image_size, workers, desc=f"flickr30k {image_size}px")


def unusable_rows(src: Flickr30kCopy, bad_images: dict[int, str]) -> dict[int, str]:
    """Step 4: the photos left out, with why: undecodable, or no caption left to pair them with."""
    blank = {row: "no non-empty caption" for row, r in enumerate(src.records)
             if not r.captions and row not in bad_images}
    return {**bad_images, **blank}


def check_bad_fraction(src: Flickr30kCopy, out: Path, bad_rows: dict[int, str],
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
            f"flickr30k at {src.root} ({src.fmt}): skipped {len(bad_rows)} of {len(records)} "
            f"images and {len(bad_captions)} captions; first few: {first}",
            stacklevel=3,
        )
    return skipped


def caption_table(src: Flickr30kCopy,
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
    val_fraction: float = VAL_FRACTION,
    test_fraction: float = TEST_FRACTION,
    force: bool = False,
) -> dict[str, Any]:
    """Build (or reuse) the image cache of the Flickr30k copy at `root`; returns the summary
    `{"format", "images", "captions", "skipped", "splits": {...}, "cache", "rebuilt"}`."""
    out = Path(out)
    src = locate(root, fmt, images_dir, val_fraction, test_fraction)
    settings = cache_settings(src, image_size, val_fraction, test_fraction)
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
