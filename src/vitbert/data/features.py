"""The frozen-part feature cache: what a frozen part of the image tower outputs, computed once
per photo.

A part that never changes during the run gives a photo the same output every epoch, so it is
computed once and read back instead of run:

* ``model.freeze_image_tower: true``: the whole tower (on the Flickr30k model 35 of the 37
  forward GFLOP of a sample); the cache holds `VitBert.tower_tokens` (P, N, D_img) under the batch
  key :data:`FEATURES_KEY`, and training runs only the projector and the text side;
* ``model.freeze_image_backbone: true``: a hybrid tower's CNN (a pretrained EfficientNet, say);
  the cache holds its feature map (P, C, h, w), or its mean (P, C, 1, 1) with
  ``image.backbone_grid``, under :data:`BACKBONE_KEY`, and every part after the CNN (projection,
  blocks, pooling) trains from it (`ViT.forward_backbone_features`).

The cache lies next to the image cache:

    features-<key>.npy   (R, …) float16, row r = photo r of images.npy
    features-<key>.json  what it was built from; written last, so its presence means "complete"

``key`` hashes the image cache's settings (its source fingerprint and image size), the tower's
settings the part's output depends on (`ImageTowerConfig`: all of them for the tower; for a
backbone the CNN's name, pooling, image size, pixel statistics and weights file), the frozen part's
weights, the part, and the dtypes it was computed and stored in: a change in any of them gives a
new key and a new cache. The others stay (another run may be reading one) and the build says how
much room they take.

The part runs in eval mode (no stochastic depth, BatchNorm's running statistics) under
``inference_mode``, channels-last, and in bf16 where the CPU has bf16 instructions (or on a GPU):
a frozen part is a fixed function, and these make its one pass several times faster than the
obvious loop (``scripts/bench.py --sections cache``). Pretrained weights are loaded at fit start,
so the cache is built in the training module's ``on_fit_start`` (`attach_image_features`), after
every load and on the training device.
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
BACKBONE_KEY = "backbone_features"  # the batch key of a frozen CNN backbone's cached output
PARTS = {"tower": FEATURES_KEY, "backbone": BACKBONE_KEY}  # what may be frozen, and its key
# The tower settings a backbone's output depends on (its width, blocks and pooling come after it).
BACKBONE_SETTINGS = ("kind", "backbone", "backbone_grid", "hybrid_layers", "image_size",
                     "in_chans", "mean", "std", "pretrained")
FEATURES_VERSION = 2
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


def frozen_module(model: Any, part: str) -> torch.nn.Module:
    """The module of ``model`` (a `VitBert`) that ``part`` names: its image tower, or that
    tower's CNN backbone (a hybrid front end's)."""
    if part == "tower":
        return model.image_tower
    backbone = getattr(model.image_tower.patch_embed, "backbone", None)
    if part != "backbone" or backbone is None:
        raise DataError(f"cannot cache the {part!r} of a {model.config.image.kind} tower: a "
                        f"frozen backbone needs image.kind: hybrid")
    return backbone


def compute_dtype(device: torch.device) -> torch.dtype:
    """bf16 on a GPU or on a CPU with bf16 instructions (oneDNN's), else fp32."""
    if device.type == "cuda":
        return torch.bfloat16
    return torch.bfloat16 if torch.ops.mkldnn._is_mkldnn_bf16_supported() else torch.float32


def feature_key(image_cache: str | Path, model: Any, part: str = "tower",
                dtype: torch.dtype = torch.float32) -> tuple[str, dict[str, Any]]:
    """(key, what it hashes) for ``part`` of ``model``'s tower (a `VitBert`) over the image
    cache, computed in ``dtype``."""
    meta = read_meta(image_cache)
    if meta is None:
        raise DataError(f"{image_cache}: no complete image cache (cache.json missing); build it "
                        f"first (the data module's prepare_data, or scripts/prepare_data.py)")
    image = asdict(model.config.image)
    if part == "backbone":  # the CNN's output: the rest of the tower is not in it
        image = {k: image[k] for k in BACKBONE_SETTINGS}
    basis = {"version": FEATURES_VERSION, "dtype": np.dtype(FEATURE_DTYPE).name,
             "compute_dtype": str(dtype).removeprefix("torch."), "part": part,
             "image_cache": meta["settings"], "tower": image,
             "image_tokens": model.config.image_tokens if part == "tower" else None,
             "weights": weights_hash(frozen_module(model, part))}
    key = hashlib.sha256(json.dumps(basis, sort_keys=True).encode()).hexdigest()[:16]
    return key, basis


# ----------------------------------------------------------------------------- building


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


def _paths(cache_dir: Path, key: str) -> tuple[Path, Path]:
    return cache_dir / f"features-{key}.npy", cache_dir / f"features-{key}.json"


def build_image_features(model: Any, image_cache: str | Path, part: str = "tower",
                         batch_size: int = 64, progress: bool = True) -> ImageFeatures:
    """The feature cache of ``part`` of ``model``'s (a `VitBert`) image tower over every photo
    of the image cache at ``image_cache``, built unless a current one is there; on the model's
    device (module doc)."""
    cache_dir = Path(image_cache)
    device = next(model.parameters()).device
    dtype = compute_dtype(device)
    key, basis = feature_key(cache_dir, model, part, dtype)
    npy, meta = _paths(cache_dir, key)
    if meta.is_file() and npy.is_file():
        return ImageFeatures(npy, key, part)
    images = np.load(cache_dir / "images.npy", mmap_mode="r")  # (R, 3, S, S) uint8
    module = frozen_module(model, part)
    tower, was_training = model.image_tower, model.image_tower.training
    tower.eval().to(memory_format=torch.channels_last)
    tmp = temp_path(npy)  # hidden, per process: a reader of the folder never takes it for a cache
    out: np.ndarray | None = None
    try:
        starts = range(0, len(images), batch_size)
        for start in tqdm(starts, desc=f"image features ({part})", unit="batch",
                          disable=not progress, leave=False):
            pixels = torch.from_numpy(np.array(images[start : start + batch_size])).to(device)
            pixels = pixels.contiguous(memory_format=torch.channels_last)
            with torch.inference_mode(), torch.autocast(device.type, dtype,
                                                        enabled=dtype != torch.float32):
                if module is tower:
                    features = model.tower_tokens(pixels)  # (b, N, D_img)
                else:
                    features = tower.patch_embed.features(tower.normalize(pixels))  # (b, C, h, w)
            features = features.float().cpu().numpy()
            if out is None:
                out = np.lib.format.open_memmap(tmp, mode="w+", dtype=FEATURE_DTYPE,
                                                shape=(len(images), *features.shape[1:]))
            out[start : start + len(features)] = features
        if out is None:
            raise DataError(f"{cache_dir / 'images.npy'} holds no images; rebuild the cache")
        out.flush()
        shape = list(out.shape)
        del out
        os.replace(tmp, npy)
    finally:
        tmp.unlink(missing_ok=True)
        tower.train(was_training).to(memory_format=torch.contiguous_format)
    others = [p for p in cache_dir.glob("features-*.npy") if p != npy]
    if others and progress:  # another tower's, or other photos': another run may be reading it
        size = sum(p.stat().st_size for p in others) / 1e9
        print(f"{cache_dir}: {len(others)} other feature caches ({size:.1f} GB) of other towers "
              f"or photos stay; delete {cache_dir}/features-* to free them", flush=True)
    atomic_write(meta, json.dumps({**basis, "key": key, "shape": shape}, indent=2))
    return ImageFeatures(npy, key, part)


def attach_image_features(trainer: Any, model: Any, part: str = "tower",
                          batch_size: int = 64) -> ImageFeatures:
    """Build (rank zero) or open the feature cache of ``part`` of ``model``'s tower over the
    trainer's data module's image cache, and switch the data module's loaders to it."""
    datamodule = getattr(trainer, "datamodule", None)
    if datamodule is None or not hasattr(datamodule, "use_image_features"):
        raise DataError(f"model.freeze_image_{part}: true needs vitbert's CaptionDataModule (its "
                        f"image cache holds the photos whose features are cached); unset it or "
                        f"train with data: a CaptionDataModule")
    datamodule.check_image_features()
    if trainer.is_global_zero:
        build_image_features(model, datamodule.cache_dir, part, batch_size)
    trainer.strategy.barrier("image_features")
    features = build_image_features(model, datamodule.cache_dir, part, batch_size,
                                    progress=False)
    datamodule.use_image_features(features)
    # Lightning built the training loader already, to count the run's steps for the schedule;
    # it would go on serving pixels: have the fit loop build it again, from the cache.
    trainer.fit_loop._combined_loader = None
    return features


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

# The batch key, and `vitbert.models.Photos`' field: (B,) long, the photo each caption sees among
# the batch's P distinct photos (`images` (P, 3, S, S), or their cached features). Without it the
# photos are one per caption, in caption order.
IMAGE_INDEX = "image_index"
