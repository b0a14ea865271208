"""Data sources: where captioned pictures come from and how they reach the image cache.

A source owns three things: the folder its cache lives in, building that cache (or finding it
current), and the training captions the tokenizer learns from. Everything after the cache
(tokenizer, masking, loaders) belongs to `CaptionDataModule`, which receives a source:

    data:
      source:
        class_path: vitbert.data.CaptionedPhotos
        init_args: {root: /data/flickr30k}

A new captioned set is a subclass of `DataSource` that writes the cache format of
`vitbert.data.cache`; nothing else changes. A source that does not fit one disk brings its own
datasets and training loader instead (`split_dataset`, `train_loader`, `tokenizer_file`,
`read_summary`: `vitbert.streaming.StreamingSource` streams litdata shards)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch.utils.data import DataLoader, Dataset

from . import captioned_photos
from .cache import CaptionDataset, read_meta
from .layouts import read_annotations


@dataclass(frozen=True)
class LoaderOptions:
    """What the data module asks of a training loader a source builds itself."""

    batch_size: int  # captions per batch
    num_workers: int
    pin_memory: bool
    image_size: int
    collate_fn: Callable[[list[dict[str, Any]]], dict[str, Any]]  # caption items -> MLM batch


class DataSource(ABC):
    """Captioned pictures written once into the image cache (`vitbert.data.cache`), or (a source
    that overrides `split_dataset` and `train_loader`) served some other way."""

    caches_images = True  # the image cache exists, so the frozen-tower feature cache can be built

    @property
    @abstractmethod
    def cache_dir(self) -> Path:
        """The folder holding images.npy, annotations.json and cache.json."""

    @abstractmethod
    def build_cache(self, image_size: int) -> dict[str, Any]:
        """Build the cache at `image_size` unless a current one is there; returns its summary.
        Cheap to call again: the data module calls it from prepare_data, setup and dataset."""

    @abstractmethod
    def train_captions(self, image_size: int) -> list[str]:
        """The training captions, the text the tokenizer is trained on."""

    def read_summary(self) -> dict[str, Any] | None:
        """What the data holds (the cache's cache.json: "settings", "splits" and
        "split_captions" per split), or None when there is none yet."""
        return read_meta(self.cache_dir)

    def tokenizer_file(self) -> Path | None:
        """A tokenizer.json the data comes with; None (the default): the data module trains one
        on `train_captions`."""
        return None

    def split_dataset(self, split: str, image_size: int) -> Dataset:
        """One split's captions, one per item (``{"image", "caption", "index", "row"}``) with
        ``captions`` and ``rows``: evaluation reads it in order; so does training, shuffled by
        the data module, unless `train_loader` gives a loader."""
        return CaptionDataset(self.cache_dir, split)

    def train_loader(self, options: LoaderOptions) -> DataLoader | None:
        """A training loader of this source's own; None (the default): the data module shuffles
        ``split_dataset("train")`` itself, resumably (`vitbert.data.resume`)."""
        return None

    def split_origin(self, meta: dict[str, Any]) -> str:
        """Where the cache's train / val / test split came from, said in the data summary at
        the start of every fit; ``meta`` is the cache's cache.json (`vitbert.data.cache`)."""
        return f"as written by {type(self).__name__}"

    def empty_split(self, meta: dict[str, Any], split: str) -> tuple[str, str]:
        """(why ``split`` holds no picture, how to give it some): the data summary's line for an
        empty split, and the error when there is nothing to train on."""
        return f"{type(self).__name__} wrote none", f"give {split} pictures in {self.cache_dir}"

    def settings(self) -> dict[str, Any]:
        """The constructor arguments, for the run's logged hyperparameters."""
        return {"class_path": f"{type(self).__module__}.{type(self).__name__}",
                "init_args": {k.lstrip("_"): v for k, v in vars(self).items()
                              if not k.startswith("__") and k not in ("_summaries", "_summary")}}


class CaptionedPhotos(DataSource):
    """Photos with captions from `root`, in any layout `vitbert.data.layouts` reads (Flickr30k's
    four, Flickr8k's two, Karpathy's json, COCO's, a Hugging Face imagefolder), decoded once into
    the image cache in `cache_dir` (`scripts/prepare_data.py` builds the same cache ahead)."""

    def __init__(
        self,
        *,
        root: str = captioned_photos.DEFAULT_ROOT,
        cache_dir: str = captioned_photos.DEFAULT_CACHE_DIR,
        format: str = "auto",
        images_dir: str | None = None,
        prepare_workers: int = 2,
        max_bad_fraction: float = 0.05,
    ):
        """
        Args:
            root: Folder holding the photos and their annotation file (here or one folder
                below); the layout is found from the files (docs/training.md).
            cache_dir: Folder of the decoded uint8 image cache; rebuilt when the photos, the
                annotations or the image size change.
            format: Layout: auto (the first found, in the order of docs/training.md), karpathy,
                nlphuji, coco, flickr8k, imagefolder, token, kaggle or kaggle8k (see
                scripts/prepare_data.py --help).
            images_dir: Photo folder (relative to root, or absolute) when it has none of the
                usual names.
            prepare_workers: Processes decoding the photos while the cache is built (0 = this
                process).
            max_bad_fraction: Largest fraction of unreadable images or empty captions skipped
                with a warning; above it the build stops with an error.
        """
        self.root, self._cache_dir, self.format = root, cache_dir, format
        self.images_dir, self.prepare_workers = images_dir, prepare_workers
        self.max_bad_fraction = max_bad_fraction
        self._summaries: dict[int, dict[str, Any]] = {}

    @property
    def cache_dir(self) -> Path:
        return Path(self._cache_dir)

    def build_cache(self, image_size: int) -> dict[str, Any]:
        if image_size not in self._summaries:  # the fingerprint stats every photo: check once
            self._summaries[image_size] = captioned_photos.build_cache(
                self.root, self.cache_dir, image_size, self.format, self.images_dir,
                self.prepare_workers, self.max_bad_fraction)
        return self._summaries[image_size]

    def split_origin(self, meta: dict[str, Any]) -> str:
        return captioned_photos.split_origin(meta)

    def empty_split(self, meta: dict[str, Any], split: str) -> tuple[str, str]:
        return captioned_photos.empty_split(meta["settings"], split, meta["images"], self.root)

    def train_captions(self, image_size: int) -> list[str]:
        # The annotations alone: the tokenizer does not wait for the photos to be decoded.
        _, _, parsed = read_annotations(self.root, self.format)
        return [c for r in parsed.records if r.split == "train" for c in r.captions]
