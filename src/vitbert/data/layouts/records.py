"""What every layout reader returns, and what the readers share: one photo and its captions, the
rows a reader had to drop (each named, so a warning can count and show them), and the split a
photo gets from its file name when the annotations carry none."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..cache import DataError

# Karpathy's Flickr30k val and test shares (1,014 and 1,000 of 31,783): the hash split's default.
VAL_FRACTION = 1014 / 31783
TEST_FRACTION = 1000 / 31783
# The split of a photo its layout's split files (or split folders) leave out: it is not trained
# on, and the split summary counts it (`captioned_photos.locate`).
UNLISTED = "unlisted"


@dataclass
class ImageRecord:
    """One photo and its captions, as the annotations list it."""

    file: str  # the photo's path below the photo folder, "/"-separated
    captions: list[str]
    split: str | None = None  # train, val, test; None: the hash split; UNLISTED: left out


@dataclass
class Parsed:
    """What a reader read: records, plus captions/rows it had to drop and why."""

    records: list[ImageRecord]
    bad_captions: list[str] = field(default_factory=list)  # "where: why" for each dropped caption
    repaired: list[str] = field(default_factory=list)  # rows read despite a known quirk
    # Every annotation file read (the cache's fingerprint: editing any of them rebuilds it);
    # empty: the one file the layout was found by.
    files: list[Path] = field(default_factory=list)
    # The split rule when the annotations carry the split (recorded in the cache's settings);
    # None: the hash split of the file name.
    split: dict[str, Any] | None = None
    # Folders the photos must be in, when the layout fixes them (their paths are relative to
    # it); None: the usual photo folder names are searched.
    image_dirs: list[Path] | None = None
    ignored: list[str] = field(default_factory=list)  # other layouts found beside it, unread
    unlisted: list[str] = field(default_factory=list)  # photos left out by the split's files


def group(pairs: list[tuple[str, str]]) -> list[ImageRecord]:
    """(file, caption) pairs into one record per file, in first-seen order."""
    by_file: dict[str, ImageRecord] = {}
    for f, text in pairs:
        by_file.setdefault(f, ImageRecord(f, [])).captions.append(text)
    return list(by_file.values())


def unit(file: str) -> float:
    """A number in [0, 1) from the file name alone, the same on every machine."""
    return int(hashlib.sha1(file.encode()).hexdigest()[:8], 16) / 2**32


def hash_split(file: str, val_fraction: float = VAL_FRACTION,
               test_fraction: float = TEST_FRACTION) -> str:
    """Deterministic split of one photo from its file name alone."""
    u = unit(file)
    return "test" if u < test_fraction else "val" if u < test_fraction + val_fraction else "train"


def not_utf8(path: Path) -> DataError:
    """The error for an annotation file that is not UTF-8: where, and the command that fixes it."""
    raw = path.read_bytes()
    try:
        raw.decode("utf-8-sig")
        where = ""
    except UnicodeDecodeError as error:
        line = raw[: error.start].count(b"\n") + 1
        where = f" at line {line} (byte {error.start})"
    return DataError(f"{path}: not UTF-8{where}. Re-save it as UTF-8, e.g. "
                     f"iconv -f latin1 -t utf-8 {path.name} > fixed && mv fixed {path.name}")


def read_text(path: Path) -> str:
    """An annotation file's text (a BOM tolerated); not UTF-8 is a DataError naming it."""
    try:
        return path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as error:
        raise not_utf8(path) from error


def read_json(path: Path, expected: str) -> Any:
    """An annotation file's JSON; unreadable JSON is a DataError naming the file and `expected`."""
    try:
        return json.loads(read_text(path))
    except json.JSONDecodeError as error:
        raise DataError(f"{path}: not JSON ({error}); expected {expected}") from error
