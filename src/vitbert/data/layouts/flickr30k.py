"""Flickr30k's own annotation files (Karpathy's json: `layouts.karpathy`).

    token     results_20130124.token    "1000092795.jpg#0<TAB>Two young guys ... yard ."
    kaggle    results.csv               "image_name| comment_number| comment", a space after
                                        each "|", and one broken row (line 19,999 of the real file:
                                        "2199200615.jpg| 4   A dog runs ..." has no second "|"),
                                        repaired here; an unrepairable row is reported by its
                                        line number
    nlphuji   flickr_annotations_30k.csv  columns raw,sentids,split,filename,img_id; raw and
                                        sentids are JSON-list strings; `split` is the real split
                                        (`load_from_hub` writes this format from the HF hub)
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

from ..cache import DataError
from .karpathy import KARPATHY_SPLITS
from .records import ImageRecord, Parsed, group

TOKEN = "results_20130124.token"
KAGGLE = "results.csv"
NLPHUJI = "flickr_annotations_30k.csv"
IMAGE_DIR = "flickr30k-images"  # where `load_from_hub` writes the photos


def parse_token(path: Path) -> Parsed:
    """`name.jpg#k<TAB>caption` per line (Flickr30k's results_20130124.token, and Flickr8k's
    Flickr8k.token.txt)."""
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
    return Parsed(group(pairs), bad)


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
    return Parsed(group(pairs), bad, repaired)


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
    return Parsed(records, bad, split={"rule": "annotations"})


def load_from_hub(root: str | Path, name: str = "nlphuji/flickr30k") -> Path:
    """Download the HF hub copy into `root` in the nlphuji on-disk format (needs network).

    The hub dataset holds everything in one "test" split, the real split being the `split` column.
    `datasets` >= 4 no longer runs loading scripts; this works where the hub serves the data as
    files (parquet conversion). Images are written as their original bytes, never re-encoded.
    """
    from datasets import Image as HFImage
    from datasets import load_dataset

    root = Path(root)
    img_dir = root / IMAGE_DIR
    img_dir.mkdir(parents=True, exist_ok=True)
    ds = load_dataset(name, split="test").cast_column("image", HFImage(decode=False))
    with open(root / NLPHUJI, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["raw", "sentids", "split", "filename", "img_id"])
        for ex in ds:
            target = img_dir / ex["filename"]
            if not target.exists():
                target.write_bytes(ex["image"]["bytes"])
            w.writerow([json.dumps(ex["caption"]), json.dumps(ex["sentids"]), ex["split"],
                        ex["filename"], ex["img_id"]])
    return root
