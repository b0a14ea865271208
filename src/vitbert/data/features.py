"""The feature cache's file format and batch keys: what a frozen part of the image tower outputs
for each photo, stored once, read back instead of run.

The data layer knows only the files and how a batch carries their rows; what is cached, when,
and under which key is the training side's (`vitbert.lit.frozen`, which runs the frozen part
over the image cache at fit start and hands the data module the result,
`CaptionDataModule.use_image_features`). Two parts may be frozen, each with its batch key:

* the whole tower: rows (N, D_img), the tower's output tokens, under :data:`FEATURES_KEY`;
* a hybrid tower's CNN backbone: rows (C, h, w), its feature map (averaged to (C, g, g) with
  ``image.backbone_grid`` g), under :data:`BACKBONE_KEY`.

A feature cache lies next to the image cache it was computed over:

    features-<key>.npy   (R, …) float16, row r = photo r of images.npy
    features-<key>.json  what it was built from (the writer's ``about``), its key and shape;
                         written last, so its presence means "complete"

``key`` names what the rows depend on; a new key is a new pair of files, and the others stay
(another run may be reading one).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from .cache import CaptionDataset, DataError
from .files import atomic_write, temp_path

FEATURES_KEY = "image_features"  # the batch key of a frozen tower's cached output
BACKBONE_KEY = "backbone_features"  # the batch key of a frozen CNN backbone's cached output
PARTS = {"tower": FEATURES_KEY, "backbone": BACKBONE_KEY}  # what may be frozen, and its key
FEATURE_DTYPE = np.float16


# ----------------------------------------------------------------------------- the files


@dataclass
class ImageFeatures:
    """A complete feature cache: the .npy of float16 rows, its key, and the part it holds."""

    path: Path
    key: str
    part: str = "tower"

    def array(self) -> np.ndarray:
        return np.load(self.path, mmap_mode="r")

    def wrap(self, dataset: CaptionDataset) -> FeatureDataset:
        """The same items as ``dataset``, carrying the photo's features instead of its pixels."""
        return FeatureDataset(dataset, self.path, PARTS[self.part])


def feature_paths(cache_dir: str | Path, key: str) -> tuple[Path, Path]:
    """(the .npy, the .json) of the feature cache ``key`` in the image cache ``cache_dir``."""
    cache_dir = Path(cache_dir)
    return cache_dir / f"features-{key}.npy", cache_dir / f"features-{key}.json"


def find_image_features(cache_dir: str | Path, key: str, part: str) -> ImageFeatures | None:
    """The complete feature cache ``key`` of ``part`` in ``cache_dir``, or None."""
    npy, meta = feature_paths(cache_dir, key)
    return ImageFeatures(npy, key, part) if meta.is_file() and npy.is_file() else None


def other_feature_caches(cache_dir: str | Path, key: str) -> list[Path]:
    """The .npy files of the feature caches in ``cache_dir`` other than ``key``'s."""
    npy, _ = feature_paths(cache_dir, key)
    return [p for p in sorted(Path(cache_dir).glob("features-*.npy")) if p != npy]


def write_image_features(cache_dir: str | Path, key: str, part: str,
                         batches: Iterable[np.ndarray], rows: int,
                         about: dict[str, Any]) -> ImageFeatures:
    """Write the feature cache ``key`` of ``part``: ``rows`` rows in all, given in order as
    ``batches`` of (b, …) arrays (stored as float16), then its .json (``about``, the key and
    the shape). Atomic: the rows go to a hidden per-process file renamed into place, and the
    .json comes last, so a reader (or a parallel rank) sees no cache or a complete one."""
    npy, meta = feature_paths(cache_dir, key)
    tmp = temp_path(npy)  # hidden, per process: a reader of the folder never takes it for a cache
    out: np.ndarray | None = None
    start = 0
    try:
        for batch in batches:
            if out is None:
                out = np.lib.format.open_memmap(tmp, mode="w+", dtype=FEATURE_DTYPE,
                                                shape=(rows, *batch.shape[1:]))
            out[start : start + len(batch)] = batch
            start += len(batch)
        if out is None or start != rows:
            raise DataError(f"{cache_dir}: {start} rows of features for {rows} photos; rebuild "
                            f"the image cache")
        out.flush()
        shape = list(out.shape)
        del out
        os.replace(tmp, npy)
    finally:
        tmp.unlink(missing_ok=True)
    atomic_write(meta, json.dumps({**about, "key": key, "shape": shape}, indent=2))
    return ImageFeatures(npy, key, part)


# ----------------------------------------------------------------------------- reading


class FeatureDataset(Dataset):
    """A `CaptionDataset`'s items with the photo's cached features (float16) under ``key``
    (:data:`FEATURES_KEY` or :data:`BACKBONE_KEY`) in place of ``image``. The memmap is opened
    lazily in each worker process."""

    def __init__(self, captions: CaptionDataset, features_path: str | Path,
                 key: str = FEATURES_KEY):
        self.captions = captions
        self.features_path = Path(features_path)
        self.key = key
        self._features: np.ndarray | None = None

    @property
    def features(self) -> np.ndarray:
        if self._features is None:
            self._features = np.load(self.features_path, mmap_mode="r")
        return self._features

    def __len__(self) -> int:
        return len(self.captions)

    def __getitem__(self, i: int) -> dict[str, Any]:
        row = int(self.captions.rows[i])
        return {self.key: torch.from_numpy(np.array(self.features[row])),
                "caption": self.captions.captions[i], "index": i, "row": row}

    def __getstate__(self) -> dict[str, Any]:  # never pickle the memmap into workers
        state = self.__dict__.copy()
        state["_features"] = None
        return state


# ----------------------------------------------------------------------------- batches

# The batch key, and `VitBert.forward`'s argument: (B,) long, the photo each caption sees among
# the batch's P distinct photos (`images` (P, 3, S, S), or their cached features). Without it the
# photos are one per caption, in caption order.
IMAGE_INDEX = "image_index"
