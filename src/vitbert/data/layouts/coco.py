"""COCO's own caption annotations.

    coco  annotations/captions_train2017.json and annotations/captions_val2017.json (or the
          2014 pair): {"images": [{"id", "file_name", ...}], "annotations": [{"image_id", "id",
          "caption"}]}, the photos in train2017/ and val2017/ (train2014/, val2014/) beside
          annotations/ or in images/ there. COCO publishes no test captions, so train is train
          and val is halved into val and test by a hash of the file name (the split summary
          says so). With both years present 2017 is read and 2014 ignored: 2017's train holds
          most of 2014's val.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..cache import DataError
from .records import ImageRecord, Parsed, read_json, unit

YEARS = ("2017", "2014")
PARTS = ("train", "val")
EXPECTED = ('COCO\'s captions file: {"images": [{"id", "file_name"}], '
            '"annotations": [{"image_id", "caption"}]}')


def finder(year: str) -> Callable[[Path], Path | None]:
    """`find` of one year's pair: its first file present in `folder`/annotations."""
    def find(folder: Path) -> Path | None:
        paths = [folder / "annotations" / f"captions_{part}{year}.json" for part in PARTS]
        return next((p for p in paths if p.is_file()), None)

    return find


def val_half(file: str) -> str:
    """COCO's val photos, halved by a hash of the file name into val and test."""
    return "val" if unit(file) < 0.5 else "test"


def split_origin(path: str, rule: dict[str, Any]) -> str:
    """The split summary's words for where the split came from (`path`: the first file read)."""
    said = [f"{rule['train']} is train" if rule["train"] else "no train file",
            f"{rule['halved']} is halved into val and test by a hash of the file name"
            if rule["halved"] else "no val file (so no val or test)"]
    return f"COCO's own files in {Path(path).parent}: {', '.join(said)}"


def empty_split(split: str, path: str, rule: dict[str, Any]) -> tuple[str, str]:
    """(why `split` holds no photo, how to give it some)."""
    part = "train" if split == "train" else "val"
    year, base = Path(path).stem[-4:], Path(path).parent.parent
    file = rule["train"] if part == "train" else rule["halved"]
    why = (f"no captions_{part}{year}.json" if file is None else
           f"{file} lists no photo" if part == "train" else f"the hash halves of {file} gave none")
    return why, f"add annotations/captions_{part}{year}.json and its {part}{year}/ to {base}"


def parse_coco(marker: Path) -> Parsed:
    """Both files of the marker's year that are present: train2017 is train, val2017 is halved
    into val and test. An entry lacking its fields, or a caption of an image not in images[], is
    a bad row, skipped and named; an image without a caption is skipped as such by the build."""
    year = marker.stem[-4:]
    base = marker.parent.parent  # the folder holding annotations/ and the photo folders
    parsed = Parsed([], image_dirs=[base, base / "images"])
    read = {}
    for part in PARTS:
        path = marker.parent / f"captions_{part}{year}.json"
        if path.is_file():
            parsed.files.append(path)
            parsed.records += read_file(path, f"{part}{year}", part, parsed.bad_captions)
            read[part] = path.name
    parsed.split = {"rule": "annotations", "train": read.get("train"), "halved": read.get("val")}
    return parsed


def read_file(path: Path, folder: str, part: str, bad: list[str]) -> list[ImageRecord]:
    """One captions_*.json: a record per image (its file below `folder`), its captions added."""
    data = read_json(path, EXPECTED)
    if not isinstance(data, dict) or not all(
            isinstance(data.get(k), list) for k in ("images", "annotations")):
        raise DataError(f"{path}: expected {EXPECTED}; 'images' or 'annotations' is missing or "
                        f"not a list. Use the captions_*.json of COCO's annotations zip")
    images: dict[Any, ImageRecord] = {}
    for i, im in enumerate(data["images"]):
        if not isinstance(im, dict) or "id" not in im or not isinstance(im.get("file_name"), str):
            bad.append(f"{path.name} images[{i}]: needs an 'id' and a 'file_name'")
            continue
        file = f"{folder}/{im['file_name']}"
        images[im["id"]] = ImageRecord(file, [], "train" if part == "train" else val_half(file))
    for i, a in enumerate(data["annotations"]):
        where = f"{path.name} annotations[{i}]"
        if not isinstance(a, dict) or not isinstance(a.get("caption"), str):
            bad.append(f"{where}: needs an 'image_id' and a text 'caption'")
        elif not isinstance(a.get("image_id"), int | str) or a["image_id"] not in images:
            bad.append(f"{where}: image_id {a.get('image_id')!r} is not in images[]")
        else:
            images[a["image_id"]].captions.append(a["caption"])
    return list(images.values())
