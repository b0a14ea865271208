"""Test-wide settings (never reach the network) and fixtures shared across folders."""

import json
import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pytest
import torch


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture
def karpathy_flickr(tmp_path) -> Path:
    """A miniature Flickr30k in Karpathy's format, with real photographs: 12 photos in
    ``tmp_path / "flickr"`` (train, val and test), five captions each."""
    from PIL import Image
    from skimage import data as skdata

    root = tmp_path / "flickr"
    photos = [skdata.astronaut(), skdata.chelsea(), skdata.coffee()]
    (root / "flickr30k-images").mkdir(parents=True)
    words = ["dog", "man", "grass", "street", "red", "blue", "runs", "sits", "ball", "water"]
    images = []
    for i in range(12):
        name = f"{1000000 + i}.jpg"
        crop = photos[i % 3][i * 9 : i * 9 + 300, i * 7 : i * 7 + 400]
        Image.fromarray(crop).save(root / "flickr30k-images" / name, quality=85)
        split = "val" if i % 4 == 1 else "test" if i % 4 == 2 else "train"
        captions = [f"a {words[(i + k) % 10]} and a {words[(i * k + 3) % 10]} ." for k in range(5)]
        images.append({"filename": name, "imgid": i, "split": split,
                       "sentences": [{"raw": c, "tokens": c.split()} for c in captions]})
    (root / "dataset_flickr30k.json").write_text(json.dumps({"images": images}))
    return root
