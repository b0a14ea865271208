"""Data-path measurements: the cached loader against decoding the JPEGs every time and against
streamed litdata shards, and the storage choice behind the cache (numpy memmap against a
`datasets` Arrow table).

Used by `scripts/bench.py` (section "data"); kept here so tests and notebooks can call it.
Training never imports this module: `DecodingDataset` exists only to be measured against.
Without a Flickr30k copy it writes a Flickr-like folder: JPEGs of ~500x375 (Flickr30k's typical
size) cut from scikit-image's bundled photos, with a results_20130124.token file.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset

from vitbert.data import captioned_photos
from vitbert.data.cache import CaptionDataset, decode_image
from vitbert.streaming.shards import write_shards

# Caption words for generated annotations: Flickr-like lengths and about ninety words.
_WORDS = ("a an the man woman boy girl child dog dogs people group two three young old little "
          "black white red blue green yellow brown orange pink large small wearing shirt hat "
          "jacket dress playing running walking sitting standing riding jumping holding looking "
          "street water grass beach snow field road building park crowd ball bike bicycle car "
          "camera guitar stage table front near next on in at of with while and into over under "
          "his her their is are")


def caption_text(rng: np.random.Generator) -> str:
    """A caption of 6 to 20 words (Flickr30k's average is about 12)."""
    n = int(np.clip(rng.normal(12, 4), 6, 20))
    return " ".join(rng.choice(_WORDS.split(), n)) + " ."


def make_jpeg_folder(root: str | Path, n: int = 256, size: tuple[int, int] = (500, 375),
                     seed: int = 0, layout: str = "token") -> Path:
    """A Flickr-like root of n JPEGs (random crops of real photos) and 5 captions each, as a
    results_20130124.token file (``layout="token"``) or Karpathy's dataset_flickr30k.json
    (``"karpathy"``: 1 in 20 photos val, 1 in 20 test, the rest train)."""
    from skimage import data as skdata

    root = Path(root)
    folder = root / "flickr30k-images"
    folder.mkdir(parents=True, exist_ok=True)
    photos = [skdata.astronaut(), skdata.chelsea(), skdata.coffee(), skdata.rocket()]
    rng = np.random.default_rng(seed)
    lines, records = [], []
    for i in range(n):
        p = photos[i % len(photos)]
        h, w = p.shape[:2]
        ch, cw = int(h * rng.uniform(0.6, 1)), int(w * rng.uniform(0.6, 1))
        y, x = int(rng.integers(h - ch + 1)), int(rng.integers(w - cw + 1))
        Image.fromarray(p[y : y + ch, x : x + cw]).resize(size).save(folder / f"{i}.jpg",
                                                                     quality=90)
        if layout == "token":
            lines += [f"{i}.jpg#{k}\tphoto number {i} caption {k} .\n" for k in range(5)]
        else:
            captions = [caption_text(rng) for _ in range(5)]
            split = "val" if i % 20 == 1 else "test" if i % 20 == 2 else "train"
            records.append({"filename": f"{i}.jpg", "imgid": i, "split": split,
                            "sentences": [{"raw": c, "tokens": c.split(), "imgid": i,
                                           "sentid": 5 * i + k}
                                          for k, c in enumerate(captions)]})
    if layout == "token":
        (root / "results_20130124.token").write_text("".join(lines))
    elif layout == "karpathy":
        (root / "dataset_flickr30k.json").write_text(
            json.dumps({"images": records, "dataset": "flickr30k"}))
    else:
        raise ValueError(f"layout={layout!r}: choose token or karpathy")
    return root


class DecodingDataset(Dataset):
    """The same items as a CaptionDataset, but decoding the source image file every time.

    Only for the benchmark: it is what training would cost without the cache.
    """

    def __init__(self, cached: CaptionDataset, image_paths: Callable[[int], Path]):
        self.cached = cached
        self.image_paths = image_paths

    def __len__(self) -> int:
        return len(self.cached)

    def __getitem__(self, i: int) -> dict[str, Any]:
        row = int(self.cached.rows[i])
        img = decode_image(self.image_paths(row), self.cached.image_size)
        return {"image": torch.from_numpy(img), "caption": self.cached.captions[i], "index": i,
                "row": row}


def _stack(items: list[dict[str, Any]]) -> dict[str, Any]:
    return {"images": torch.stack([it["image"] for it in items]),
            "caption": [it["caption"] for it in items]}


def loader_throughput(dataset: Dataset, batch_size: int = 64, num_workers: int = 2,
                      max_batches: int = 20, collate_fn: Callable | None = None) -> float:
    """Samples per second a shuffled DataLoader delivers, after one warm-up batch."""
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=True, num_workers=num_workers,
                        collate_fn=collate_fn or _stack, persistent_workers=False)
    return _samples_per_s(loader, max_batches)


def _samples_per_s(loader, max_batches: int) -> float:
    """Pictures per second over ``max_batches`` batches, after one warm-up batch."""
    it = iter(loader)
    next(it)  # worker start-up is not throughput
    n, t0 = 0, time.perf_counter()
    for i, batch in enumerate(it):
        n += len(batch["images"])
        if i + 1 >= max_batches:
            break
    return n / max(time.perf_counter() - t0, 1e-9)


def data_benchmark(root: str | Path | None = None, n_images: int = 256, image_size: int = 224,
                   batch_size: int = 64, num_workers: int = 2, max_batches: int = 20,
                   workdir: str | Path | None = None) -> dict[str, Any]:
    """Cached loader vs decode-every-time, same items, same loader settings; samples/s."""
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(workdir or tmp)
        if root is None:
            root = make_jpeg_folder(work / "jpegs", n_images)
        t0 = time.perf_counter()
        summary = captioned_photos.build_cache(root, work / "cache", image_size,
                                               workers=num_workers)
        build_s = time.perf_counter() - t0
        cached = CaptionDataset(work / "cache", "train")
        img_dir = captioned_photos.locate(root).img_dir
        decoding = DecodingDataset(cached, lambda row: img_dir / cached.files[row])
        cached_sps = loader_throughput(cached, batch_size, num_workers, max_batches)
        decode_sps = loader_throughput(decoding, batch_size, num_workers, max_batches)
        t0 = time.perf_counter()
        write_shards(root, work / "shards", workers=num_workers, min_frequency=1, force=True)
        shards_s = time.perf_counter() - t0
        streamed_sps = streamed_throughput(work / "shards", image_size, batch_size, num_workers,
                                           max_batches)
    return {"images": summary["images"], "image_size": image_size, "batch_size": batch_size,
            "num_workers": num_workers, "cache_build_s": round(build_s, 2),
            "cached_samples_per_s": round(cached_sps, 1),
            "decode_samples_per_s": round(decode_sps, 1),
            "speedup": round(cached_sps / decode_sps, 1),
            "shards_write_s": round(shards_s, 2),
            "streamed_samples_per_s": round(streamed_sps, 1)}


def streamed_throughput(shards: Path, image_size: int, batch_size: int, num_workers: int,
                        max_batches: int) -> float:
    """Captions per second from litdata shards (``prepare_data.py shards``) as training reads
    them: photos streamed, decoded and resized in the workers, each expanded to its captions;
    the same unit as :func:`loader_throughput`'s samples, after one warm-up batch."""
    from vitbert.data.sources import LoaderOptions
    from vitbert.streaming.source import StreamingSource

    options = LoaderOptions(batch_size=batch_size, num_workers=num_workers, pin_memory=False,
                            image_size=image_size, collate_fn=_stack)
    return _samples_per_s(StreamingSource(shards=str(shards)).train_loader(options), max_batches)


def compare_storage(n: int = 4000, image_size: int = 224, reads: int = 2000,
                    seed: int = 0) -> dict[str, float]:
    """Write n random (3, S, S) uint8 images as a .npy memmap and as an Arrow dataset saved to
    disk; time the writes and `reads` random single-image reads from each (one process)."""
    from datasets import Array3D, Features
    from datasets import Dataset as HFDataset

    rng = np.random.default_rng(seed)
    imgs = rng.integers(0, 256, (n, 3, image_size, image_size), dtype=np.uint8)
    order = rng.integers(n, size=reads)
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        mm = np.lib.format.open_memmap(f"{tmp}/images.npy", "w+", np.uint8, imgs.shape)
        mm[:] = imgs
        mm.flush()
        del mm
        out["memmap_write_s"] = time.perf_counter() - t0
        mm = np.load(f"{tmp}/images.npy", mmap_mode="r")
        t0 = time.perf_counter()
        for i in order:
            torch.from_numpy(np.array(mm[i]))
        out["memmap_images_per_s"] = reads / (time.perf_counter() - t0)

        t0 = time.perf_counter()
        feats = Features({"image": Array3D((3, image_size, image_size), "uint8")})
        ds = HFDataset.from_dict({"image": imgs}, features=feats)
        ds.save_to_disk(f"{tmp}/arrow")
        out["arrow_write_s"] = time.perf_counter() - t0
        ds = HFDataset.load_from_disk(f"{tmp}/arrow").with_format("numpy")
        t0 = time.perf_counter()
        for i in order:
            torch.from_numpy(np.asarray(ds[int(i)]["image"]))
        out["arrow_images_per_s"] = reads / (time.perf_counter() - t0)
    return {k: round(v, 2) for k, v in out.items()}
