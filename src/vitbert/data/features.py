"""The frozen-tower feature cache: a frozen image tower's output, computed once per photo.

With ``model.freeze_image_tower: true`` the image tower never changes during the run, so its
output for a photo is the same every epoch; on the Flickr30k model it is 35 of the 37 forward
GFLOP of a sample. The cache stores it next to the image cache:

    features-<key>.npy   (R, N, D_img) float16, row r = photo r of images.npy: what
                         `VitBert.tower_tokens` gives (the pooled token, N = 1, or every patch)
    features-<key>.json  what it was built from; written last, so its presence means "complete"

``key`` hashes the image cache's settings (its source fingerprint and image size), the tower's
weights and its settings (`ImageTowerConfig`, pooled or patches): a change in any of them gives a
new key and the cache is rebuilt (older ``features-*`` files in the folder are removed). Training
then reads `FeatureDataset` items (``image_features`` instead of ``image``) and the model runs
only the projector and the text side (the cached output is the batch's `vitbert.models.Photos`).

The tower runs in eval mode here (no stochastic depth): a frozen tower is a fixed function.
Pretrained weights are loaded at fit start, so the cache is built in the LightningModule's
``on_fit_start`` (`attach_image_features`), after every load and on the training device.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset
from tqdm.auto import tqdm

from .cache import CaptionDataset, DataError, read_meta
from .files import atomic_write, temp_path

FEATURES_KEY = "image_features"  # the batch key of a frozen tower's cached output
FEATURES_VERSION = 1
FEATURE_DTYPE = np.float16


# ----------------------------------------------------------------------------- keys


def weights_hash(module: torch.nn.Module) -> str:
    """sha256 of every parameter and persistent buffer (names, dtypes, shapes and bytes)."""
    h = hashlib.sha256()
    for name, t in sorted(module.state_dict().items()):
        t = t.detach().cpu().contiguous()
        h.update(f"{name}:{t.dtype}:{tuple(t.shape)}\n".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def feature_key(image_cache: str | Path, model: Any) -> tuple[str, dict[str, Any]]:
    """(key, what it hashes) for ``model``'s tower (a `VitBert`) over the image cache."""
    meta = read_meta(image_cache)
    if meta is None:
        raise DataError(f"{image_cache}: no complete image cache (cache.json missing); build it "
                        f"first (the data module's prepare_data, or scripts/prepare_data.py)")
    basis = {"version": FEATURES_VERSION, "dtype": np.dtype(FEATURE_DTYPE).name,
             "image_cache": meta["settings"], "tower": asdict(model.config.image),
             "image_tokens": model.config.image_tokens,
             "weights": weights_hash(model.image_tower)}
    key = hashlib.sha256(json.dumps(basis, sort_keys=True).encode()).hexdigest()[:16]
    return key, basis


# ----------------------------------------------------------------------------- building


@dataclass
class ImageFeatures:
    """A complete feature cache: the .npy of (R, N, D_img) float16 rows and its key."""

    path: Path
    key: str

    def array(self) -> np.ndarray:
        return np.load(self.path, mmap_mode="r")

    def wrap(self, dataset: CaptionDataset) -> FeatureDataset:
        """The same items as ``dataset``, carrying the photo's features instead of its pixels."""
        return FeatureDataset(dataset, self.path)


def _paths(cache_dir: Path, key: str) -> tuple[Path, Path]:
    return cache_dir / f"features-{key}.npy", cache_dir / f"features-{key}.json"


@torch.no_grad()
def build_image_features(model: Any, image_cache: str | Path, batch_size: int = 64,
                         progress: bool = True) -> ImageFeatures:
    """The feature cache of ``model``'s (a `VitBert`) image tower over every photo of the image
    cache at ``image_cache``, built unless a current one is there; on the model's device."""
    cache_dir = Path(image_cache)
    key, basis = feature_key(cache_dir, model)
    npy, meta = _paths(cache_dir, key)
    if meta.is_file() and npy.is_file():
        return ImageFeatures(npy, key)
    images = np.load(cache_dir / "images.npy", mmap_mode="r")  # (R, 3, S, S) uint8
    device = next(model.parameters()).device
    tower, was_training = model.image_tower, model.image_tower.training
    tower.eval()
    tmp = temp_path(npy)  # hidden, per process: never matched by the stale-file sweep below
    out: np.ndarray | None = None
    try:
        starts = range(0, len(images), batch_size)
        for start in tqdm(starts, desc="image features", unit="batch", disable=not progress,
                          leave=False):
            pixels = torch.from_numpy(np.array(images[start : start + batch_size])).to(device)
            tokens = model.tower_tokens(pixels).float().cpu().numpy()  # (b, N, D_img)
            if out is None:
                out = np.lib.format.open_memmap(tmp, mode="w+", dtype=FEATURE_DTYPE,
                                                shape=(len(images), *tokens.shape[1:]))
            out[start : start + len(tokens)] = tokens
        if out is None:
            raise DataError(f"{cache_dir / 'images.npy'} holds no images; rebuild the cache")
        out.flush()
        shape = list(out.shape)
        del out
        os.replace(tmp, npy)
    finally:
        tmp.unlink(missing_ok=True)
        tower.train(was_training)
    for stale in cache_dir.glob("features-*"):  # other keys: another tower, or other photos
        if stale.name not in (npy.name, meta.name):
            stale.unlink(missing_ok=True)
    atomic_write(meta, json.dumps({**basis, "key": key, "shape": shape}, indent=2))
    return ImageFeatures(npy, key)


def attach_image_features(trainer: Any, model: Any, batch_size: int = 64) -> ImageFeatures:
    """Build (rank zero) or open the feature cache of ``model``'s tower over the trainer's data
    module's image cache, and switch the data module's loaders to it."""
    datamodule = getattr(trainer, "datamodule", None)
    if datamodule is None or not hasattr(datamodule, "use_image_features"):
        raise DataError("model.freeze_image_tower: true needs vitbert's CaptionDataModule (its "
                        "image cache holds the photos whose features are cached); unset it or "
                        "train with data: a CaptionDataModule")
    datamodule.check_image_features()
    if trainer.is_global_zero:
        build_image_features(model, datamodule.cache_dir, batch_size)
    trainer.strategy.barrier("image_features")
    features = build_image_features(model, datamodule.cache_dir, batch_size, progress=False)
    datamodule.use_image_features(features)
    return features


# ----------------------------------------------------------------------------- reading


class FeatureDataset(Dataset):
    """A `CaptionDataset`'s items with ``image_features`` (N, D_img) float16 in place of
    ``image``. The memmap is opened lazily in each worker process."""

    def __init__(self, captions: CaptionDataset, features_path: str | Path):
        self.captions = captions
        self.features_path = Path(features_path)
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
        return {FEATURES_KEY: torch.from_numpy(np.array(self.features[row])),
                "caption": self.captions.captions[i], "index": i, "row": row}

    def __getstate__(self) -> dict[str, Any]:  # never pickle the memmap into workers
        state = self.__dict__.copy()
        state["_features"] = None
        return state


# ----------------------------------------------------------------------------- batches

# The batch key, and `vitbert.models.Photos`' field: (B,) long, the photo each caption sees among
# the batch's P distinct photos (`images` (P, 3, S, S) or `image_features` (P, N, D_img)). Without
# it the photos are one per caption, in caption order.
IMAGE_INDEX = "image_index"
