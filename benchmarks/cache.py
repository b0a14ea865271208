"""The frozen CNN's feature cache, built from JPEG files, against the obvious loop.

The obvious loop is what one writes first: for each batch of 32 photos, PIL decodes and resizes
each JPEG, then timm's model runs in fp32, in eval mode, in the one process. Ours is what a fit
runs (`vitbert.lit.frozen`): the JPEGs decoded once into the image cache by worker processes
(``prepare_workers``), then the CNN over the cached pixels channels-last, under inference_mode,
in bf16 where the CPU has bf16 instructions. Both read the same files, at the same resolution, and
give the same output (the feature map's mean per photo, or the map): the figures are photos per
second from the files to the cached features, and their ratio ("speedup"); the outputs are
compared too (cosine similarity per photo, bf16 against fp32).
"""

from __future__ import annotations

import platform
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from vitbert.data.cache import decode_image
from vitbert.data.layouts.flickr8k import TOKEN

CNN = "tf_efficientnet_lite0"
BATCH = 32  # the obvious loop's batch
IMAGES = "Flicker8k_Dataset"  # the release's photo folder (its typo)


def cpu_name() -> str:
    """The CPU's model name (/proc/cpuinfo on Linux), else what the platform says."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def flickr8k_subset(root: Path, photos: int, out: Path) -> list[Path]:
    """The first ``photos`` photos of the Flickr8k folder ``root`` (its token file's order), laid
    out in Flickr8k's own format in ``out`` (links to the files, their captions): the folder both
    contenders read. Returns the photo files, in that order."""
    lines = (root / TOKEN).read_text().splitlines()
    chosen: dict[str, list[str]] = {}
    for line in lines:
        name = line.split("#", 1)[0]
        if (root / IMAGES / name).is_file() and (name in chosen or len(chosen) < photos):
            chosen.setdefault(name, []).append(line)
    (out / IMAGES).mkdir(parents=True)
    for name in chosen:
        (out / IMAGES / name).symlink_to((root / IMAGES / name).resolve())
    (out / TOKEN).write_text("\n".join(line for rows in chosen.values() for line in rows) + "\n")
    return [root / IMAGES / name for name in chosen]


def obvious_features(model: torch.nn.Module, files: list[Path], size: int, pool: bool
                     ) -> tuple[np.ndarray, float]:
    """The obvious loop (module doc): PIL, timm's ``model`` in fp32 eval mode, batches of 32,
    one process. Returns (features (R, C) or (R, C, h, w), seconds)."""
    model.eval()
    out = []
    start = time.perf_counter()
    for first in range(0, len(files), BATCH):
        pixels = torch.from_numpy(np.stack([decode_image(f, size)
                                            for f in files[first:first + BATCH]]))
        x = (pixels.float() / 255 - 0.5) / 0.5  # the CNN's mean and std
        with torch.no_grad():
            features = model.forward_features(x)  # (b, C, h, w)
        out.append((features.mean(dim=(2, 3)) if pool else features).numpy())
    return np.concatenate(out), time.perf_counter() - start


def our_features(weights: dict[str, torch.Tensor], folder: Path, work: Path, size: int,
                 pool: bool, workers: int) -> tuple[np.ndarray, float, str]:
    """A fit's path (module doc) from the files in ``folder`` to the feature cache in ``work``,
    the CNN holding ``weights``. Returns (features as the other loop's, seconds, the dtype the
    CNN ran in)."""
    from vitbert.data import CaptionedPhotos
    from vitbert.lit.frozen import build_image_features, compute_dtype
    from vitbert.models import ImageTowerConfig, VitBert, VitBertConfig

    net = VitBert(VitBertConfig(image=ImageTowerConfig(
        kind="hybrid", backbone=CNN, backbone_grid=1 if pool else None, image_size=size,
        patch_size=1, dim=64, depth=0, num_heads=1), image_tokens="pooled"))
    net.image_tower.patch_embed.backbone.load_state_dict(weights)
    source = CaptionedPhotos(root=str(folder), cache_dir=str(work / "cache"),
                             prepare_workers=workers)
    start = time.perf_counter()
    source.build_cache(size)
    features = build_image_features(net, source.cache_dir, "backbone", progress=False)
    seconds = time.perf_counter() - start
    array = np.asarray(features.array(), dtype=np.float32)  # (R, C, h, w), R in the cache's order
    names = [Path(f).name for f in _cache_files(source.cache_dir)]
    order = np.argsort(names)  # the files in name order, as the other loop's (sorted below)
    array = array[order]
    return (array[:, :, 0, 0] if pool else array), seconds, str(
        compute_dtype(torch.device("cpu"))).removeprefix("torch.")


def _cache_files(cache_dir: Path) -> list[str]:
    import json

    return json.loads((cache_dir / "annotations.json").read_text())["files"]


def cache_benchmark(root: str | Path, photos: int = 512, size: int = 224, pool: bool = True,
                    workers: int = 2) -> dict[str, Any]:
    """Both contenders over the same ``photos`` photos of the Flickr8k folder ``root``, the
    obvious loop first (the page cache then holds the files for both), then ours; their
    photos/s, the ratio and how alike their outputs are. The CNN's weights are random (the
    timings do not depend on them) and the same in both."""
    import timm

    model = timm.create_model(CNN, pretrained=False, num_classes=0, global_pool="")
    work = Path(tempfile.mkdtemp(prefix="vitbert-cache-bench-"))
    try:
        files = sorted(flickr8k_subset(Path(root), photos, work / "photos"),
                       key=lambda f: f.name)
        obvious, obvious_s = obvious_features(model, files, size, pool)
        ours, ours_s, dtype = our_features(model.state_dict(), work / "photos", work, size, pool,
                                           workers)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    a, b = torch.from_numpy(obvious).flatten(1), torch.from_numpy(ours).flatten(1)
    cosine = F.cosine_similarity(a, b, dim=1)
    return {
        "cpu": cpu_name(), "threads": torch.get_num_threads(), "photos": len(files),
        "image_size": size, "cnn": CNN, "output": "mean of the feature map" if pool else "map",
        "obvious_photos_per_s": len(files) / obvious_s, "ours_photos_per_s": len(files) / ours_s,
        "speedup": obvious_s / ours_s,
        "levers": {"decode_workers": workers, "channels_last": True, "inference_mode": True,
                   "dtype": dtype},
        "cosine_min": float(cosine.min()), "cosine_mean": float(cosine.mean()),
    }
