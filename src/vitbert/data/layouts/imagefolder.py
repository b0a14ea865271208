"""A folder of one's own photos, in the Hugging Face `imagefolder` convention.

    imagefolder  metadata.jsonl (a JSON object a line) or metadata.csv (a header line) with a
                 `file_name` column (the photo's path from the metadata file's folder) and a
                 `text` or `caption` column (in jsonl also a list of captions); a photo may
                 have several rows, a caption each. One metadata file at the top, or one in each
                 split folder: train/, validation/, test/ (and the other names `datasets` takes:
                 training; valid, val, dev; testing, eval, evaluation) are the split where
                 present, and photos outside them are then left out and counted; without split
                 folders the hash split of the file name. Beside a metadata.jsonl, a
                 metadata.csv in the same folder is not read.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

from ..cache import DataError
from .records import UNLISTED, Parsed, group, read_text

METADATA = ("metadata.jsonl", "metadata.csv")
TEXT_COLUMNS = ("text", "caption")
SPLIT_DIRS = {"train": "train", "training": "train", "validation": "val", "valid": "val",
              "val": "val", "dev": "val", "test": "test", "testing": "test", "eval": "test",
              "evaluation": "test"}
LEFT_OUT = "outside the split folders"  # the split summary's words for the photos left out
CONVENTION = ("a 'file_name' column (the photo's path from the metadata file's folder) and a "
              "'text' or 'caption' column")


def split_origin(path: str, rule: dict[str, Any]) -> str:
    """The split summary's words for where the split came from (`path`: the first metadata
    file, at the top or in a split folder)."""
    return f"the folders {', '.join(d + '/' for d in rule['folders'])} of {_top(path, rule)}"


def empty_split(split: str, path: str, rule: dict[str, Any]) -> tuple[str, str]:
    """(why `split` holds no photo, how to give it some)."""
    folder = next(d for d in [*rule["folders"], *SPLIT_DIRS] if SPLIT_DIRS[d] == split)
    where = _top(path, rule) / folder
    return (f"no photo in {where}/", f"put {split} photos and their metadata rows in {where}/")


def _top(path: str, rule: dict[str, Any]) -> Path:
    """The imagefolder's own folder, from its first metadata file."""
    parent = Path(path).parent
    return parent.parent if parent.name in rule["folders"] else parent


def metadata_files(folder: Path) -> list[Path]:
    """The metadata files of the imagefolder at `folder`: its own, then its split folders'
    (jsonl before csv in one folder)."""
    found = []
    for d in [folder, *(folder / name for name in SPLIT_DIRS)]:
        found += [p for p in (d / name for name in METADATA) if p.is_file()][:1]
    return found


def find(folder: Path) -> Path | None:
    files = metadata_files(folder)
    return files[0] if files else None


def parse_imagefolder(marker: Path, base: Path) -> Parsed:
    """Every metadata file of the imagefolder at `base`; photo paths made relative to `base`.
    The split: the split folder a photo is in, when `base` has split folders."""
    split_dirs = {name: split for name, split in SPLIT_DIRS.items() if (base / name).is_dir()}
    parsed = Parsed([], files=metadata_files(base), image_dirs=[base],
                    split={"rule": "annotations", "folders": list(split_dirs)} if split_dirs
                    else None)
    pairs: list[tuple[str, str]] = []
    for path in parsed.files:
        rows = read_rows(path, path.relative_to(base).as_posix(), parsed.bad_captions)
        prefix = path.parent.relative_to(base).as_posix()
        pairs += [(f"{prefix}/{file}" if prefix != "." else file, text) for file, text in rows]
    parsed.records = group([(str(Path(f).as_posix()), t) for f, t in pairs])
    for r in parsed.records:
        top = r.file.split("/", 1)[0]
        r.split = split_dirs.get(top, UNLISTED) if split_dirs else None
    return parsed


def read_rows(path: Path, shown: str, bad: list[str]) -> list[tuple[str, str]]:
    """(file_name, caption) of every good row of one metadata file (`shown` as its rows are
    named); bad rows into `bad`. A file with rows but no good one stops the build: its columns
    are not the convention's."""
    before = len(bad)
    rows = read_csv(path, shown, bad) if path.suffix == ".csv" else read_jsonl(path, shown, bad)
    if not rows and len(bad) > before:
        raise DataError(f"{path}: no row has {CONVENTION} (first problem: {bad[before]}); "
                        f"rename the columns, as the Hugging Face imagefolder convention has them")
    return rows


def read_jsonl(path: Path, shown: str, bad: list[str]) -> list[tuple[str, str]]:
    rows = []
    for n, line in enumerate(read_text(path).splitlines(), 1):
        if not line.strip():
            continue
        where = f"{shown} line {n}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            bad.append(f"{where}: not a JSON object")
            continue
        rows += row_captions(row, where, bad)
    return rows


def read_csv(path: Path, shown: str, bad: list[str]) -> list[tuple[str, str]]:
    reader = csv.DictReader(io.StringIO(read_text(path), newline=""))
    columns = [c.strip() for c in reader.fieldnames or []]
    if "file_name" not in columns or not set(TEXT_COLUMNS) & set(columns):
        raise DataError(f"{path}: columns {columns} lack {CONVENTION}; rename them in the "
                        f"header line")
    reader.fieldnames = columns
    rows = []
    for row in reader:
        rows += row_captions(row, f"{shown} line {reader.line_num}", bad)
    return rows


def row_captions(row: Any, where: str, bad: list[str]) -> list[tuple[str, str]]:
    """One metadata row's (file_name, caption) pairs; a row without them is a bad row."""
    if not isinstance(row, dict) or not isinstance(row.get("file_name"), str) \
            or not row["file_name"].strip():
        bad.append(f"{where}: no 'file_name'")
        return []
    column = next((c for c in TEXT_COLUMNS if c in row), None)
    texts = row.get(column) if column else None
    texts = texts if isinstance(texts, list) else [texts]
    if not texts or not all(isinstance(t, str) for t in texts):
        bad.append(f"{where}: no 'text' or 'caption'")
        return []
    file = row["file_name"].strip().removeprefix("./")
    return [(file, t) for t in texts]
