"""Reading streamed shards (`vitbert.streaming.shards`) into `CaptionDataModule`, through litdata.

`StreamingSource` is a data source like the folder ones, with one difference: it brings its own
datasets and training loader, so nothing is decoded ahead and nothing needs one disk:

* **training**: litdata's `StreamingDataset` over ``train/`` deals the chunks to ranks and
  loader workers (each rank its own share, equal in count: ``drop_last`` under DDP), shuffles
  chunks and the photos inside them from ``(seed, epoch)``, and a `StreamingDataLoader` keeps its
  position in the checkpoint. A sample is a *photo*: the loader batches photos, and the collator
  (`PhotoBatch`) hands the MLM collator every caption of each, together, as ``group_by_photo``
  does for the folder source; so every caption trains every epoch, and the photos per batch are
  ``batch_size`` / (captions per photo), at least one. Photos are decoded and resized (the image
  cache's `decode_image_bytes`) in the loader workers.
* **masks**: each caption carries its fixed id (written with the shards) and the key
  ``(seed, epoch)``, so `MLMCollator` draws a mask from (mask seed, seed, epoch, caption id)
  alone: the same in a resumed run, whichever rank or worker reads it.
* **val / test / predict**: `ShardCaptions`, one caption per item in written order, read by the
  data module's ordinary evaluation loader (Lightning's distributed sampler splits it across
  ranks); its captions and photo rows serve the caption and binding evaluations too.

``shards`` is a local folder or a cloud URL (``s3://bucket/prefix``): litdata downloads chunks
into ``cache_dir`` as they are needed (``max_cache_size`` at most) and the small files
(shards.json, tokenizer.json) are fetched there once. What streaming cannot serve says so: the
frozen-tower feature cache (``model.freeze_image`` for the whole run) needs every photo's pixels
on one disk.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
from litdata import StreamingDataLoader, StreamingDataset
from torch.utils.data import DataLoader, Dataset

from vitbert.data.cache import SPLITS, DataError, decode_image_bytes
from vitbert.data.resume import MASK_KEY
from vitbert.data.sources import DataSource, LoaderOptions
from vitbert.streaming.shards import SHARDS_VERSION, SUMMARY, TOKENIZER

DEFAULT_CACHE_ROOT = "data/shard-cache"


def _is_url(location: str) -> bool:
    return "://" in location


class PhotoStream(StreamingDataset):
    """The training split's photos, streamed and decoded in the loader workers: each item is
    ``{"image": uint8 (3, S, S), "captions": [...], "photo": place, "first_caption": id,
    "key": str, "mask_key": (seed, epoch)}``."""

    def __init__(self, input_dir: str, image_size: int, *, seed: int, cache_dir: str | None,
                 max_cache_size: str) -> None:
        super().__init__(input_dir, cache_dir=cache_dir, shuffle=True, seed=seed,
                         max_cache_size=max_cache_size)
        self.image_size = image_size

    def __getitem__(self, index: Any) -> Any:
        sample = super().__getitem__(index)
        if not isinstance(sample, dict):  # a slice or a key look-up: litdata's own
            return sample
        return {**decoded(sample, self.image_size), MASK_KEY: (self.seed, self.current_epoch)}


def decoded(sample: dict[str, Any], image_size: int) -> dict[str, Any]:
    """A shard sample with its photo decoded and resized as the image cache does it."""
    return {"image": torch.from_numpy(decode_image_bytes(sample["image"], image_size)),
            "captions": sample["captions"].split("\n"), "photo": int(sample["photo"]),
            "first_caption": int(sample["first_caption"]), "key": sample["key"]}


class PhotoBatch:
    """Collate a batch of photos as the captions they hold: each caption an item of its own for
    ``collate`` (`MLMCollator`), with its fixed caption id as ``index``, its photo's place as
    ``row`` (the photo is stacked once, and the another-photo control tells photos apart by it)."""

    def __init__(self, collate: Any) -> None:
        self.collate = collate

    def __call__(self, photos: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        items = [{"image": p["image"], "caption": caption, "index": p["first_caption"] + k,
                  "row": p["photo"], MASK_KEY: p[MASK_KEY]}
                 for p in photos for k, caption in enumerate(p["captions"])]
        return self.collate(items)


class ShardCaptions(Dataset):
    """One split's captions in written order, one per item, as `CaptionDataset` gives them:
    ``{"image", "caption", "index", "row"}``, with ``captions`` and ``rows`` for the caption and
    binding evaluations. Reading the captions reads the split once (val and test are small)."""

    def __init__(self, input_dir: str, image_size: int, cache_dir: str | None,
                 max_cache_size: str) -> None:
        self.photos = StreamingDataset(input_dir, cache_dir=cache_dir, shuffle=False,
                                       drop_last=False, max_cache_size=max_cache_size)
        self.image_size = image_size
        self.captions: list[str] = []
        rows, self._place = [], {}
        for i in range(len(self.photos)):
            sample = self.photos[i]
            self._place[int(sample["photo"])] = i
            captions = sample["captions"].split("\n")
            self.captions += captions
            rows += [int(sample["photo"])] * len(captions)
        self.rows = np.array(rows, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.captions)

    def __getitem__(self, i: int) -> dict[str, Any]:
        row = int(self.rows[i])
        sample = self.photos[self._place[row]]
        image = torch.from_numpy(decode_image_bytes(sample["image"], self.image_size))
        return {"image": image, "caption": self.captions[i], "index": i, "row": row}


class StreamingSource(DataSource):
    """Captioned photos streamed from litdata shards (``scripts/prepare_data.py shards``), from
    a local folder or a cloud URL; see `vitbert.streaming.source`."""

    caches_images = False  # no image cache: the frozen-tower feature cache cannot be built

    def __init__(
        self,
        *,
        shards: str,
        cache_dir: str | None = None,
        seed: int = 0,
        max_cache_size: str = "50GB",
    ):
        """
        Args:
            shards: The shard folder prepare_data.py shards wrote (train/, val/, test/,
                tokenizer.json, shards.json), a local path or a cloud URL (s3://bucket/prefix).
            cache_dir: Local folder for downloaded chunks and the shards' small files; unset, the
                shard folder itself when local, else data/shard-cache/<hash of the URL>.
            seed: Shuffle seed of the training stream (chunks and the photos in them, anew each
                epoch from (seed, epoch)); litdata's checkpointed state holds it, and a resume
                with another seed stops.
            max_cache_size: Most disk the downloaded chunks may take ("50GB"); unused locally.
        """
        self.shards, self._cache_dir, self.seed = shards, cache_dir, seed
        self.max_cache_size = max_cache_size
        self._summary: dict[str, Any] | None = None

    @property
    def cache_dir(self) -> Path:
        if self._cache_dir is not None:
            return Path(self._cache_dir)
        if not _is_url(self.shards):
            return Path(self.shards)
        return Path(DEFAULT_CACHE_ROOT) / hashlib.sha1(self.shards.encode()).hexdigest()[:12]

    def _local(self, name: str) -> Path:
        """A small file of the shard folder, on this machine (fetched once from a URL)."""
        if not _is_url(self.shards):
            return Path(self.shards) / name
        target = self.cache_dir / name
        if not target.is_file():
            _download(f"{self.shards.rstrip('/')}/{name}", target)
        return target

    def _chunks(self, split: str) -> tuple[str, str | None]:
        """(input_dir, cache_dir) for litdata's StreamingDataset of ``split``."""
        if _is_url(self.shards):
            return f"{self.shards.rstrip('/')}/{split}", str(self.cache_dir / "chunks" / split)
        return str(Path(self.shards) / split), None

    def read_summary(self) -> dict[str, Any]:
        if self._summary is None:
            path = self._local(SUMMARY)
            if not path.is_file():
                raise DataError(f"{path}: no complete shard folder at {self.shards} (shards.json "
                                f"missing); write it with scripts/prepare_data.py shards --from "
                                f"<photos> --out {self.shards}")
            summary = json.loads(path.read_text())
            if summary.get("version") != SHARDS_VERSION:
                raise DataError(f"{path}: shards version {summary.get('version')}, this vitbert "
                                f"reads {SHARDS_VERSION}; write them again with prepare_data.py "
                                f"shards --force")
            self._summary = summary
        return self._summary

    def build_cache(self, image_size: int) -> dict[str, Any]:
        return self.read_summary()  # nothing to build: the shards were written ahead

    def train_captions(self, image_size: int) -> list[str]:
        return list(self.split_dataset("train", image_size).captions)

    def tokenizer_file(self) -> Path:
        return self._local(TOKENIZER)

    def split_origin(self, meta: dict[str, Any]) -> str:
        settings = meta["settings"]
        rule = ("the source's own" if settings["split"]["rule"] == "annotations"
                else "a hash of the key")
        return f"{rule} ({settings['format']} at {settings['source']}), streamed from {self.shards}"

    def empty_split(self, meta: dict[str, Any], split: str) -> tuple[str, str]:
        return ("the shards hold none", f"write shards whose source has {split} photos")

    def split_dataset(self, split: str, image_size: int) -> Dataset:
        if split not in SPLITS:
            raise DataError(f"split {split!r} is not one of {SPLITS}")
        if not self.read_summary()["splits"][split]:
            raise DataError(f"{self.shards}: the shards hold no {split} photo")
        input_dir, cache_dir = self._chunks(split)
        return ShardCaptions(input_dir, image_size, cache_dir, self.max_cache_size)

    def train_loader(self, options: LoaderOptions) -> DataLoader:
        """Photos streamed by litdata, each batch every caption of ``options.batch_size`` /
        (captions per photo) photos; built at each call (Lightning calls it in the fit's setup,
        when the process group exists, so each rank gets its own share)."""
        summary = self.read_summary()
        per_photo = summary["split_captions"]["train"] / max(summary["splits"]["train"], 1)
        photos_per_batch = max(1, round(options.batch_size / per_photo))
        input_dir, cache_dir = self._chunks("train")
        stream = PhotoStream(input_dir, options.image_size, seed=self.seed, cache_dir=cache_dir,
                             max_cache_size=self.max_cache_size)
        # Workers start afresh each epoch (not persistent): they must see the epoch set on the
        # dataset, which the masks are drawn from.
        return StreamingDataLoader(stream, batch_size=photos_per_batch,
                                   num_workers=options.num_workers, pin_memory=options.pin_memory,
                                   collate_fn=PhotoBatch(options.collate_fn))


def _download(url: str, target: Path) -> None:
    """One small file from a cloud URL (s3://bucket/key) into ``target``, through boto3 (a
    litdata dependency; credentials the usual AWS way)."""
    if not url.startswith("s3://"):
        raise DataError(f"{url}: only local folders and s3:// URLs are read; copy the shards "
                        f"to one of them")
    import boto3

    bucket, _, key = url[len("s3://"):].partition("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    boto3.client("s3").download_file(bucket, key, str(target))
