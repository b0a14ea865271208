"""Small Flickr30k copies in each real annotation format, written with real image files.

The photo set mixes good JPEGs (crops of scikit-image's bundled public-domain photos) with every
kind of bad or odd file the loader must handle: CMYK, greyscale, RGBA, 16-bit, zero-byte, truncated,
missing, and a photo whose only caption is blank.
"""

from __future__ import annotations

import csv
import io
import json
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from skimage import data as skdata

GOOD = [f"10000{i:02d}.jpg" for i in range(12)]
ODD = ["cmyk.jpg", "grey.jpg", "rgba.png", "sixteen.png"]  # converted, kept
BAD = ["zero.jpg", "truncated.jpg", "missing.jpg"]  # skipped
BLANK = "blank.jpg"  # a fine picture whose only caption is whitespace
WORDS = ["dog", "man", "woman", "child", "ball", "grass", "street", "water", "bike", "red", "blue",
         "running", "playing", "sitting"]


def _photos() -> list[np.ndarray]:
    return [skdata.astronaut(), skdata.chelsea(), skdata.coffee()]


def write_images(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    photos = _photos()
    for i, name in enumerate([*GOOD, BLANK]):
        p = photos[i % 3]
        crop = p[i * 7 : i * 7 + 150, i * 5 : i * 5 + 200]  # varied, non-square
        Image.fromarray(crop).resize((100, 75)).save(folder / name, quality=90)
    rgb = Image.fromarray(photos[1]).resize((80, 60))
    rgb.convert("CMYK").save(folder / "cmyk.jpg")
    rgb.convert("L").save(folder / "grey.jpg")
    rgba = np.zeros((60, 80, 4), np.uint8)
    rgba[..., 0] = 255  # red, but fully transparent on the left half: must come out white there
    rgba[:, 40:, 3] = 255
    Image.fromarray(rgba).save(folder / "rgba.png")
    sixteen = np.full((60, 80), 32768, np.uint16)  # half of full scale: ~128 after conversion
    Image.fromarray(sixteen).save(folder / "sixteen.png")
    (folder / "zero.jpg").write_bytes(b"")
    buf = io.BytesIO()
    Image.fromarray(photos[0]).save(buf, "JPEG")
    (folder / "truncated.jpg").write_bytes(buf.getvalue()[: len(buf.getvalue()) // 3])


def captions_for(name: str) -> list[str]:
    if name == BLANK:
        return ["   "]
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    return [" ".join(["a", *rng.choice(WORDS, 5)]) + " ." for _ in range(5)]


ALL = [*GOOD, *ODD, *BAD, BLANK]
SPLIT_OF = {n: ("val" if i % 6 == 1 else "test" if i % 6 == 2 else
                "restval" if i % 6 == 3 else "train") for i, n in enumerate(ALL)}


def write_annotations(root: Path, fmt: str) -> Path:
    if fmt == "token":
        p = root / "results_20130124.token"
        p.write_text("".join(f"{n}#{k}\t{c}\n" for n in ALL for k, c in enumerate(captions_for(n))))
    elif fmt == "kaggle":
        p = root / "results.csv"
        lines = ["image_name| comment_number| comment"]
        for n in ALL:
            for k, c in enumerate(captions_for(n)):
                lines.append(f"{n}| {k}| {c}")
        # The real file's broken row: no "|" between the number and the caption.
        lines.append("2199200615.jpg| 4   A dog runs across the grass .")
        p.write_text("\n".join(lines) + "\n")
    elif fmt == "karpathy":
        p = root / "dataset_flickr30k.json"
        images = [{"filename": n, "imgid": i, "split": SPLIT_OF[n],
                   "sentences": [{"raw": c, "tokens": c.split(), "imgid": i, "sentid": 5 * i + k}
                                 for k, c in enumerate(captions_for(n))]}
                  for i, n in enumerate(ALL)]
        p.write_text(json.dumps({"images": images, "dataset": "flickr30k"}))
    elif fmt == "nlphuji":
        p = root / "flickr_annotations_30k.csv"
        with open(p, "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["raw", "sentids", "split", "filename", "img_id"])
            for i, n in enumerate(ALL):
                caps = captions_for(n)
                split = "train" if SPLIT_OF[n] == "restval" else SPLIT_OF[n]
                w.writerow([json.dumps(caps), json.dumps(list(range(5 * i, 5 * i + 5))), split,
                            n, i])
    else:
        raise ValueError(fmt)
    return p


@pytest.fixture(scope="session")
def image_folder(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("images") / "flickr30k-images"
    write_images(folder)
    Image.fromarray(_photos()[2]).resize((100, 75)).save(folder / "2199200615.jpg")
    return folder


def make_flickr(tmp_path: Path, image_folder: Path, fmt: str) -> Path:
    """A Flickr30k root in format `fmt`: the annotation file plus a copy of the photos."""
    root = tmp_path / f"flickr-{fmt}"
    (root / "flickr30k-images").mkdir(parents=True)
    for f in image_folder.iterdir():
        (root / "flickr30k-images" / f.name).write_bytes(f.read_bytes())
    write_annotations(root, fmt)
    return root


@pytest.fixture
def flickr_root(tmp_path, image_folder):
    return lambda fmt: make_flickr(tmp_path, image_folder, fmt)


@pytest.fixture
def kaggle_copy():
    """``kaggle_copy(root, names)``: :func:`write_kaggle`, as a fixture (a test module importing
    ``conftest`` by name can get another folder's when several folders run together)."""
    return write_kaggle


def write_kaggle(root: Path, names: list[str]) -> Path:
    """A Kaggle-layout Flickr30k copy of real JPEGs: ``root/results.csv`` (its "| " format, five
    captions a photo) and ``root/flickr30k_images/<name>``; it carries no split of its own."""
    folder = root / "flickr30k_images"
    folder.mkdir(parents=True)
    photos = _photos()
    lines = ["image_name| comment_number| comment"]
    for i, name in enumerate(names):
        crop = photos[i % 3][i * 5 : i * 5 + 200, i * 4 : i * 4 + 260]
        Image.fromarray(crop).resize((64, 48)).save(folder / name, quality=90)
        lines += [f"{name}| {k}| {c}" for k, c in enumerate(captions_for(name))]
    (root / "results.csv").write_text("\n".join(lines) + "\n")
    return root
