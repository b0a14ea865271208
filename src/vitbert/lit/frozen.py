"""Part of the image tower held fixed: the one setting that says which part and for how long
(:class:`ImageFreeze`, ``model.freeze_image``), the callback that holds it, and, for a part frozen
the whole run, its output computed once per photo into the feature cache.

A part that never changes during the run gives a photo the same output every epoch, so it is
computed once and read back instead of run:

* ``part: tower``: the whole tower (on the Flickr30k model 35 of the 37 forward GFLOP of a
  sample); the cache holds its image features and training runs only the text side;
* ``part: backbone``: a hybrid tower's CNN (a pretrained EfficientNet, say); the cache holds its
  feature map, and every part after the CNN trains from it (`ViT.forward_backbone_features`).

The files (their names, float16 rows, the .json written last) are the data layer's
(`vitbert.data.features`); what goes into them is decided here. The key hashes the image cache's
settings (its source fingerprint and image size), the tower's settings the part's output depends
on (`ImageTowerConfig`: all of them for the tower; for a backbone the CNN's name, pooling, image
size, pixel statistics and weights file), the frozen part's weights, the part, and the dtypes it
was computed and stored in: a change in any of them gives a new key and a new cache. The others
stay (another run may be reading one) and the build says how much room they take.

The part runs in eval mode (no stochastic depth, BatchNorm's running statistics) under
``inference_mode``, channels-last, and in bf16 where the CPU has bf16 instructions (or on a GPU):
a frozen part is a fixed function, and these make its one pass several times faster than the
obvious loop (``scripts/bench.py --sections cache``).

When: pretrained weights are loaded at fit start, so the cache is built in
:class:`FrozenImageTower`'s ``on_fit_start``, after every load (pretrained, fine-tune, resume) and
on the training device, by rank zero while the others wait; then the data module serves it
(`CaptionDataModule.use_image_features`: its training split switches in place, so the loader
Lightning built before the fit started serves the cache too).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import lightning as L
import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from vitbert.data.cache import DataError, image_array, read_meta
from vitbert.data.features import (
    FEATURE_DTYPE,
    PARTS,
    ImageFeatures,
    find_image_features,
    other_feature_caches,
    write_image_features,
)
from vitbert.models import ConfigError

# The tower settings a backbone's output depends on (its width, blocks and pooling come after it).
BACKBONE_SETTINGS = ("kind", "backbone", "backbone_grid", "hybrid_layers", "image_size",
                     "in_chans", "mean", "std", "pretrained")
FEATURES_VERSION = 2


# ----------------------------------------------------------------------------- the setting


@dataclass(frozen=True)
class ImageFreeze:
    """Which part of the image tower is held fixed, and for how long.

    Attributes:
        part: ``tower``, the whole image tower; ``backbone``, a hybrid tower's CNN
            (``image.backbone``) alone: every part after it (projection, blocks, pooling) trains.
        steps: null, the whole run: the part's output is computed once per photo into a feature
            cache beside the image cache and training never runs it (a frozen backbone stays in
            eval mode, its BatchNorm statistics the pretrained ones); N, the first N optimiser
            steps only, in eval mode, then it trains (no cache: lets a fresh projector and text
            tower settle before a pretrained part moves).
    """

    part: Literal["tower", "backbone"] = "tower"
    steps: int | None = None

    @property
    def whole_run(self) -> bool:
        """Frozen for the whole run: its output comes from the feature cache."""
        return self.steps is None

    def frozen_at(self, step: int) -> bool:
        """Whether the part is held fixed at optimiser step ``step``."""
        return self.steps is None or step < self.steps


def image_freeze(setting: ImageFreeze | dict[str, Any] | None) -> ImageFreeze | None:
    """``model.freeze_image`` as given (a checkpoint holds it as a plain dict), checked: a part
    there is none of or a negative number of steps stops with one line naming the fix."""
    if setting is None or isinstance(setting, ImageFreeze):
        freeze = setting
    else:
        unknown = sorted(set(setting) - {"part", "steps"})
        if unknown:
            raise ConfigError(f"model.freeze_image has no setting {', '.join(unknown)}: it takes "
                              f"part (tower or backbone) and steps (null: the whole run)")
        freeze = ImageFreeze(**setting)
    if freeze is None:
        return None
    if freeze.part not in PARTS:
        raise ConfigError(f"model.freeze_image.part {freeze.part!r} is not a part of the tower: "
                          f"give {' or '.join(PARTS)}")
    if freeze.steps is not None and freeze.steps < 0:
        raise ConfigError(f"model.freeze_image.steps {freeze.steps}: give a number of optimiser "
                          f"steps (0 or more), or null to freeze the {freeze.part} for the whole "
                          f"run")
    return freeze


def frozen_module(net: Any, part: str) -> nn.Module:
    """The module of ``net`` (a `VitBert`) that ``part`` names: its image tower, or that tower's
    CNN backbone (a hybrid front end's)."""
    if part == "tower":
        return net.image_tower
    backbone = getattr(getattr(net.image_tower, "patch_embed", None), "backbone", None)
    if part != "backbone" or backbone is None:
        raise ConfigError(f"model.freeze_image.part: {part} freezes a hybrid tower's CNN, and "
                          f"this tower ({net.config.image.kind}) has none: set image.kind: hybrid "
                          f"(with image.backbone), or freeze the part: tower")
    return backbone


class FrozenImageTower(L.Callback):
    """Holds ``freeze.part`` of the image tower fixed (:class:`ImageFreeze`): for its first
    ``steps`` optimiser steps, or for the whole run, its output then read from the feature cache
    built at fit start (:func:`attach_image_features`). While fixed the part is in eval mode, so
    its BatchNorm statistics do not move either."""

    def __init__(self, freeze: ImageFreeze | None = None) -> None:
        super().__init__()
        self.freeze = freeze

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.freeze is not None and self.freeze.whole_run:
            attach_image_features(trainer, pl_module.net, self.freeze.part)

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, *args) -> None:
        if self.freeze is None:
            return
        frozen = self.freeze.frozen_at(trainer.global_step)
        frozen_module(pl_module.net, self.freeze.part).requires_grad_(not frozen).train(not frozen)


# ----------------------------------------------------------------------------- the cache's key


def weights_hash(module: nn.Module) -> str:
    """sha256 of every parameter and persistent buffer (names, dtypes, shapes and bytes)."""
    h = hashlib.sha256()
    for name, t in sorted(module.state_dict().items()):
        t = t.detach().cpu().contiguous()
        h.update(f"{name}:{t.dtype}:{tuple(t.shape)}\n".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def compute_dtype(device: torch.device) -> torch.dtype:
    """bf16 on a GPU or on a CPU with bf16 instructions (oneDNN's), else fp32."""
    if device.type == "cuda":
        return torch.bfloat16
    return torch.bfloat16 if torch.ops.mkldnn._is_mkldnn_bf16_supported() else torch.float32


def feature_key(image_cache: str | Path, net: Any, part: str = "tower",
                dtype: torch.dtype = torch.float32) -> tuple[str, dict[str, Any]]:
    """(key, what it hashes) for ``part`` of ``net``'s tower (a `VitBert`) over the image
    cache, computed in ``dtype``."""
    meta = read_meta(image_cache)
    if meta is None:
        raise DataError(f"{image_cache}: no complete image cache (cache.json missing); build it "
                        f"first (the data module's prepare_data, or scripts/prepare_data.py)")
    image = asdict(net.config.image)
    if part == "backbone":  # the CNN's output: the rest of the tower is not in it
        image = {k: image[k] for k in BACKBONE_SETTINGS}
    basis = {"version": FEATURES_VERSION, "dtype": np.dtype(FEATURE_DTYPE).name,
             "compute_dtype": str(dtype).removeprefix("torch."), "part": part,
             "image_cache": meta["settings"], "tower": image,
             "image_tokens": net.config.image_tokens if part == "tower" else None,
             "weights": weights_hash(frozen_module(net, part))}
    key = hashlib.sha256(json.dumps(basis, sort_keys=True).encode()).hexdigest()[:16]
    return key, basis


# ----------------------------------------------------------------------------- building


def build_image_features(net: Any, image_cache: str | Path, part: str = "tower",
                         batch_size: int = 64, progress: bool = True) -> ImageFeatures:
    """The feature cache of ``part`` of ``net``'s (a `VitBert`) image tower over every photo of
    the image cache at ``image_cache``, built unless a current one is there; on the model's
    device (module doc)."""
    cache_dir = Path(image_cache)
    device = next(net.parameters()).device
    dtype = compute_dtype(device)
    key, basis = feature_key(cache_dir, net, part, dtype)
    found = find_image_features(cache_dir, key, part)
    if found is not None:
        return found
    images = image_array(cache_dir)  # (R, 3, S, S) uint8
    tower, was_training = net.image_tower, net.image_tower.training
    tower.eval().to(memory_format=torch.channels_last)
    try:
        batches = _part_outputs(net, part, images, batch_size, dtype, progress)
        features = write_image_features(cache_dir, key, part, batches, len(images), basis)
    finally:
        tower.train(was_training).to(memory_format=torch.contiguous_format)
    others = other_feature_caches(cache_dir, key)
    if others and progress:  # another tower's, or other photos': another run may be reading it
        size = sum(p.stat().st_size for p in others) / 1e9
        print(f"{cache_dir}: {len(others)} other feature caches ({size:.1f} GB) of other towers "
              f"or photos stay; delete {cache_dir}/features-* to free them", flush=True)
    return features


def _part_outputs(net: Any, part: str, images: np.ndarray, batch_size: int, dtype: torch.dtype,
                  progress: bool) -> Iterator[np.ndarray]:
    """``part``'s output for the pixel rows ``images``, ``batch_size`` at a time, as float32
    arrays (the tower in eval mode and channels-last already)."""
    device = next(net.parameters()).device
    tower = net.image_tower
    starts = range(0, len(images), batch_size)
    for start in tqdm(starts, desc=f"image features ({part})", unit="batch",
                      disable=not progress, leave=False):
        pixels = torch.from_numpy(np.array(images[start : start + batch_size])).to(device)
        pixels = pixels.contiguous(memory_format=torch.channels_last)
        with torch.inference_mode(), torch.autocast(device.type, dtype,
                                                    enabled=dtype != torch.float32):
            if part == "tower":
                features = net.image_features(pixels)  # (b, N, D_img)
            else:
                features = tower.patch_embed.features(tower.normalize(pixels))  # (b, C, h, w)
        yield features.float().cpu().numpy()


def attach_image_features(trainer: L.Trainer, net: Any, part: str = "tower",
                          batch_size: int = 64) -> ImageFeatures:
    """Build (rank zero) or open the feature cache of ``part`` of ``net``'s tower over the
    trainer's data module's image cache, and have the data module serve it (module doc)."""
    datamodule = trainer.datamodule
    if datamodule is None or not hasattr(datamodule, "use_image_features"):
        raise ConfigError(f"model.freeze_image (the {part}, the whole run) caches its output per "
                          f"photo of vitbert's CaptionDataModule's image cache: train with data: "
                          f"a CaptionDataModule, or freeze it for some steps only (steps: N)")
    datamodule.check_image_features()
    if trainer.is_global_zero:
        build_image_features(net, datamodule.cache_dir, part, batch_size)
    trainer.strategy.barrier("image_features")
    features = build_image_features(net, datamodule.cache_dir, part, batch_size, progress=False)
    datamodule.use_image_features(features)
    return features
