"""Flickr8k as it is released, and as Kaggle ships it.

    flickr8k  Flickr8k.token.txt  "1000268201_693b08cb0e.jpg#0<TAB>A child in a pink dress ...",
              and beside it the official split, one file name a line: Flickr_8k.trainImages.txt,
              Flickr_8k.devImages.txt (the val split), Flickr_8k.testImages.txt (6,000 / 1,000 /
              1,000 photos in the release). The release unpacks to Flicker8k_Dataset/ (its typo)
              beside Flickr8k_text/ holding these files and Flickr8k.lemma.token.txt (the same
              captions lemmatised: not read); a flat folder reads as well. Its quirks: the token
              file lists 2258277193_586949ec62.jpg.1, a name no photo has (skipped and counted
              as a missing photo), and photos in no split file (91 of the release's 8,091) are
              left out and counted in the split summary. Without the split files: the hash split.
    kaggle8k  captions.txt        Kaggle's copy: real CSV with the header "image,caption" (a
              caption holding a comma or a quote is quoted), the photos in Images/; no split
              (the hash split of the file name).
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

from ..cache import DataError
from .flickr30k import parse_token
from .records import UNLISTED, Parsed, group, read_text

TOKEN = "Flickr8k.token.txt"
CAPTIONS = "captions.txt"
SPLIT_FILES = {"train": "Flickr_8k.trainImages.txt", "val": "Flickr_8k.devImages.txt",
               "test": "Flickr_8k.testImages.txt"}
LEFT_OUT = "in no split file"  # the split summary's words for the photos the split leaves out


def split_files(folder: Path) -> dict[str, Path] | None:
    """The three split files beside the token file; None when there is none (the hash split).
    Some but not all is a mistake worth stopping for: a split would silently be empty."""
    present = {s: folder / name for s, name in SPLIT_FILES.items() if (folder / name).is_file()}
    if not present:
        return None
    if len(present) < len(SPLIT_FILES):
        missing = [name for s, name in SPLIT_FILES.items() if s not in present]
        raise DataError(f"{folder}: {', '.join(missing)} missing beside {TOKEN}; put all three "
                        f"Flickr_8k.*Images.txt files there (Flickr8k_text.zip has them), or "
                        f"none for a hash split")
    return present


def read_split_files(files: dict[str, Path], bad: list[str]) -> dict[str, tuple[str, str]]:
    """{photo: (split, "file line n")} from the split files; a photo listed twice keeps its
    first split and the second listing is a bad row."""
    listed: dict[str, tuple[str, str]] = {}
    for split, path in files.items():
        for n, line in enumerate(read_text(path).splitlines(), 1):
            name = line.strip()
            if not name:
                continue
            where = f"{path.name} line {n}"
            if name in listed:
                bad.append(f"{where}: {name} is already listed in {listed[name][1]}")
                continue
            listed[name] = (split, where)
    return listed


def parse_flickr8k(token: Path) -> Parsed:
    """The token file's captions, split by the split files beside it. A photo the split files
    do not list gets the split UNLISTED (left out and counted once its file is found: one
    that has no file is skipped as a missing photo instead); a listed photo without a caption
    is a bad row of its split file."""
    parsed = parse_token(token)
    files = split_files(token.parent)
    if files is None:
        parsed.files = [token]
        return parsed
    parsed.files = [token, *files.values()]
    listed = read_split_files(files, parsed.bad_captions)
    captioned = {r.file for r in parsed.records}
    parsed.bad_captions += [f"{where}: {name} has no caption in {TOKEN}"
                            for name, (_, where) in listed.items() if name not in captioned]
    for r in parsed.records:
        r.split = listed[r.file][0] if r.file in listed else UNLISTED
    parsed.split = {"rule": "annotations", "files": list(SPLIT_FILES.values())}
    return parsed


def split_origin(path: str, rule: dict[str, Any]) -> str:
    """The split summary's words for where the split came from (`path`: the token file)."""
    return f"Flickr8k's split files beside {path} (Flickr_8k.devImages.txt is val)"


def empty_split(split: str, path: str, rule: dict[str, Any]) -> tuple[str, str]:
    """(why `split` holds no photo, how to give it some)."""
    listing = SPLIT_FILES[split]
    return (f"{listing} lists none of the photos here",
            f"list {split} photos in {Path(path).parent / listing}")


def parse_captions_txt(path: Path) -> Parsed:
    """Kaggle's captions.txt: CSV, header `image,caption`, one caption a row. A row whose
    caption holds an unquoted comma is read whole (the comma kept) and reported as repaired."""
    reader = csv.reader(io.StringIO(read_text(path), newline=""))
    header = [c.strip().lower() for c in next(reader, [])]
    if header != ["image", "caption"]:
        raise DataError(f"{path}: first line should be the header 'image,caption' (Kaggle's "
                        f"Flickr8k captions.txt), got {','.join(header)[:60]!r}")
    pairs, bad, repaired = [], [], []
    for row in reader:
        where = f"{path.name} line {reader.line_num}"
        if not any(c.strip() for c in row):
            continue
        if len(row) < 2 or not row[0].strip():
            bad.append(f"{where}: expected 'image,caption'")
            continue
        if len(row) > 2:
            repaired.append(f"{where}: unquoted comma, read as part of the caption")
        pairs.append((row[0].strip(), ",".join(row[1:]).strip()))
    return Parsed(group(pairs), bad, repaired)
