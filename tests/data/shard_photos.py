"""Small captioned photo sets on disk for the streamed-shard tests, in the layouts people have:
a Karpathy json, the original .token file, and an img2dataset webdataset folder written member
for member as img2dataset writes it. Every set holds one truncated JPEG, which must be skipped.

Imported by bare name (``from shard_photos import ...``): pytest puts this folder on sys.path.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

import numpy as np
from PIL import Image

WORDS = ["dog", "man", "child", "ball", "grass", "street", "water", "red", "blue", "running"]
TRUNCATED = "truncated.jpg"


def jpeg(i: int, size: tuple[int, int] = (40, 30)) -> bytes:
    """A small JPEG whose colour depends on ``i`` (so photos differ), with some texture."""
    rng = np.random.default_rng(i)
    pixels = np.zeros((size[1], size[0], 3), np.int16) + rng.integers(0, 256, 3)
    pixels += rng.integers(-20, 21, pixels.shape, dtype=np.int16)
    buf = io.BytesIO()
    Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)).save(buf, "JPEG", quality=85)
    return buf.getvalue()


def captions(i: int, n: int = 5) -> list[str]:
    rng = np.random.default_rng(1000 + i)
    return [" ".join(["a", *rng.choice(WORDS, 4)]) + " ." for _ in range(n)]


def photo_names(n: int) -> list[str]:
    return [f"{100000 + i}.jpg" for i in range(n)] + [TRUNCATED]


def write_photos(folder: Path, names: list[str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for i, name in enumerate(names):
        data = jpeg(i)
        (folder / name).write_bytes(data[: len(data) // 2] if name == TRUNCATED else data)


def karpathy_copy(root: Path, n: int = 30) -> Path:
    """``root/dataset_flickr30k.json`` + ``root/flickr30k-images/``: every 5th photo val, every
    5th+1 test, every 5th+2 restval (train)."""
    names = photo_names(n)
    write_photos(root / "flickr30k-images", names)
    splits = ["val", "test", "restval", "train", "train"]
    images = [{"filename": name, "imgid": i, "split": splits[i % 5],
               "sentences": [{"raw": c, "tokens": c.split()} for c in captions(i)]}
              for i, name in enumerate(names)]
    (root / "dataset_flickr30k.json").write_text(json.dumps({"images": images}))
    return root


def token_copy(root: Path, n: int = 30) -> Path:
    """``root/results_20130124.token`` + ``root/flickr30k-images/`` (no split: a hash split)."""
    names = photo_names(n)
    write_photos(root / "flickr30k-images", names)
    lines = [f"{name}#{k}\t{c}" for i, name in enumerate(names) for k, c in enumerate(captions(i))]
    (root / "results_20130124.token").write_text("\n".join(lines) + "\n")
    return root


def img2dataset_folder(folder: Path, shards: int = 2, per_shard: int = 12) -> dict[str, bytes]:
    """What ``img2dataset --output_format webdataset`` leaves: ``00000.tar`` ... each holding,
    per sample, ``<key>.jpg``, ``<key>.json`` and ``<key>.txt`` (webdataset's TarWriter writes a
    sample's members in sorted extension order), the key being the 5-digit shard number and a
    4-digit index; beside each tar its ``_stats.json``. One sample's JPEG is truncated. Returns
    {key: jpeg bytes} of the good samples."""
    folder.mkdir(parents=True, exist_ok=True)
    good = {}
    for shard in range(shards):
        with tarfile.open(folder / f"{shard:05d}.tar", "w") as tar:
            for k in range(per_shard):
                i = shard * per_shard + k
                key = f"{shard:05d}{k:04d}"
                data, caption = jpeg(i, (48, 36)), captions(i, 1)[0]
                if i == 5:
                    data = data[: len(data) // 3]
                else:
                    good[key] = data
                meta = {"url": f"https://example.com/{i}.jpg", "key": key, "status": "success",
                        "error_message": None, "width": 48, "height": 36,
                        "original_width": 48, "original_height": 36, "exif": "{}",
                        "sha256": hashlib.sha256(data).hexdigest(), "caption": caption}
                members = {"jpg": data, "json": json.dumps(meta).encode(),
                           "txt": caption.encode()}
                for ext in sorted(members):
                    info = tarfile.TarInfo(f"{key}.{ext}")
                    info.size = len(members[ext])
                    tar.addfile(info, io.BytesIO(members[ext]))
        (folder / f"{shard:05d}_stats.json").write_text(json.dumps({"count": per_shard}))
    return good
