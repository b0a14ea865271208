"""Karpathy's split files: dataset_flickr30k.json, dataset_flickr8k.json, dataset_coco.json.

    images[] {filename, split, sentences[] {raw, tokens}} with the standard split
    (Flickr30k 29,000 / 1,014 / 1,000; Flickr8k 6,000 / 1,000 / 1,000; COCO 82,783 train +
    30,504 restval / 5,000 / 5,000); "restval" joins train. COCO's entries also carry
    `filepath` (train2014 or val2014), the folder the photo is in.
"""

from __future__ import annotations

from pathlib import Path

from ..cache import DataError
from .records import ImageRecord, Parsed, read_json

KARPATHY_SPLITS = {"train": "train", "restval": "train", "val": "val", "test": "test"}
FILES = ("dataset_flickr30k.json", "dataset_flickr8k.json", "dataset_coco.json")


def parse_karpathy(path: Path) -> Parsed:
    """images[] with filename (below `filepath` where given), split, sentences[] raw/tokens."""
    data = read_json(path, "Karpathy's format (a JSON object with an 'images' list)")
    try:
        images = data["images"]
    except (KeyError, TypeError) as e:
        raise DataError(f"{path}: not Karpathy's format (a JSON object with an 'images' list):"
                        f" {e}") from e
    records = []
    for i, im in enumerate(images):
        try:
            split = KARPATHY_SPLITS[im["split"]]
            caps = [s.get("raw") or " ".join(s.get("tokens", [])) for s in im["sentences"]]
            file = f"{im['filepath']}/{im['filename']}" if im.get("filepath") else im["filename"]
            records.append(ImageRecord(file, caps, split))
        except KeyError as e:
            raise DataError(f"{path}: images[{i}] lacks field {e} or has an unknown split"
                            f" (expected filename, sentences, split in"
                            f" {list(KARPATHY_SPLITS)})") from e
    return Parsed(records, split={"rule": "annotations"})
