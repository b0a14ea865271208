"""LightningDataModules: the generated shapes default and Flickr30k, one base class.

The base class owns what both share: the cache-backed datasets, the tokenizer (loaded from a
path, or trained on the training captions and cached beside the data), the MLM collators (random
masks for training, per-example deterministic masks for val / test / predict) and the loaders.
A subclass only says where its cache lives and how to build it.

`num_tokens` works right after __init__ (LightningCLI links it to the model's vocabulary size with
apply_on="instantiate", before any Trainer exists): it may generate the shapes data or read the
Flickr30k annotations to train the tokenizer on first use. Writes are atomic (temp file + rename),
so parallel ranks doing the same at start-up do not corrupt each other.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import lightning as L
import torch
from torch.utils.data import DataLoader
from transformers import PreTrainedTokenizerFast

from . import flickr30k, shapes
from .cache import SPLITS, CaptionDataset, DataError
from .masking import MLMCollator
from .resume import eval_loader, resumable_loader
from .tokenizer import cached_wordpiece, load_tokenizer


class CaptionDataModule(L.LightningDataModule):
    """Shared machinery; subclasses implement `cache_dir`, `_build_cache` and `_train_captions`."""

    def __init__(
        self,
        batch_size: int = 64,
        num_workers: int = 2,
        image_size: int = 32,
        tokenizer: str | None = None,
        vocab_size: int = 8000,
        min_frequency: int = 2,
        mlm_probability: float = 0.15,
        whole_word_masking: bool = False,
        max_length: int = 64,
        pin_memory: bool = True,
        persistent_workers: bool = True,
        val_split: str = "val",
        test_split: str = "test",
        predict_split: str = "test",
        mask_seed: int = 0,
    ):
        super().__init__()
        for name, split in (("val_split", val_split), ("test_split", test_split),
                            ("predict_split", predict_split)):
            if split not in SPLITS:
                raise DataError(f"{name}={split!r} is not one of {SPLITS}")
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.image_size = image_size
        self.tokenizer_path = tokenizer
        self.vocab_size = vocab_size
        self.min_frequency = min_frequency
        self.mlm_probability = mlm_probability
        self.whole_word_masking = whole_word_masking
        self.max_length = max_length
        self.pin_memory = pin_memory
        self.persistent_workers = persistent_workers
        self.val_split, self.test_split, self.predict_split = val_split, test_split, predict_split
        self.mask_seed = mask_seed
        self._tokenizer: PreTrainedTokenizerFast | None = None
        self._datasets: dict[str, CaptionDataset] = {}

    # -- what a subclass provides ---------------------------------------------------------------

    @property
    def cache_dir(self) -> Path:
        raise NotImplementedError

    def _build_cache(self) -> dict[str, Any]:
        """Build the image cache unless an up-to-date one is there; returns its summary."""
        raise NotImplementedError

    def _train_captions(self) -> list[str]:
        """The training captions the tokenizer is trained on."""
        raise NotImplementedError

    # -- tokenizer --------------------------------------------------------------------------------

    @property
    def tokenizer(self) -> PreTrainedTokenizerFast:
        """Loaded from `tokenizer=` or trained once on the training captions and cached beside
        the data, keyed by the captions' hash, so it changes only when the captions do."""
        if self._tokenizer is None:
            if self.tokenizer_path is not None:
                self._tokenizer = load_tokenizer(self.tokenizer_path)
            else:
                texts = self._train_captions()
                key = hashlib.sha256("\n".join(texts).encode()).hexdigest()[:12]
                name = f"tokenizer-{self.vocab_size}-{self.min_frequency}-{key}.json"
                self._tokenizer = cached_wordpiece(texts, self.vocab_size, self.min_frequency,
                                                   self.cache_dir / name)
        return self._tokenizer

    @property
    def num_tokens(self) -> int:
        """Vocabulary size the model's embedding table needs (len(tokenizer))."""
        return len(self.tokenizer)

    @property
    def pad_token_id(self) -> int:
        """Id of [PAD] (the model's embedding padding index); 0 for a trained tokenizer."""
        return int(self.tokenizer.pad_token_id)

    # -- Lightning hooks --------------------------------------------------------------------------

    def prepare_data(self) -> None:
        self._build_cache()

    def setup(self, stage: str | None = None) -> None:
        self._build_cache()  # no-op when current; covers setup() without prepare_data()
        _ = self.tokenizer

    def dataset(self, split: str) -> CaptionDataset:
        if split not in self._datasets:
            self._build_cache()
            self._datasets[split] = CaptionDataset(self.cache_dir, split)
        return self._datasets[split]

    def caption(self, index: int, split: str) -> str:
        """The caption of example `index` of `split` (batch["index"] holds these indices)."""
        return self.dataset(split).captions[index]

    def collator(self, deterministic: bool) -> MLMCollator:
        return MLMCollator(self.tokenizer, self.mlm_probability, self.whole_word_masking,
                           deterministic=deterministic, seed=self.mask_seed,
                           max_length=self.max_length)

    def _loader(self, split: str, train: bool) -> DataLoader:
        # Training resumes mid-epoch exactly (order, position, masks): see vitbert.data.resume.
        make = resumable_loader if train else eval_loader
        return make(
            self.dataset(split),
            batch_size=self.batch_size,
            drop_last=False,
            num_workers=self.num_workers,
            pin_memory=self.pin_memory and torch.cuda.is_available(),
            persistent_workers=self.persistent_workers and self.num_workers > 0,
            collate_fn=self.collator(deterministic=not train),
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", train=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self.val_split, train=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader(self.test_split, train=False)

    def predict_dataloader(self) -> DataLoader:
        return self._loader(self.predict_split, train=False)


class ShapesDataModule(CaptionDataModule):
    """The embedded default: two-shape pictures with captions, generated into `root` on first use
    (`vitbert.data.shapes`); val and test hold colour-shape pairs never seen in training."""

    def __init__(
        self,
        root: str = "data/shapes",
        num_train: int = 20_000,
        num_val: int = 2_000,
        num_test: int = 2_000,
        seed: int = 0,
        batch_size: int = 64,
        num_workers: int = 2,
        image_size: int = 32,
        tokenizer: str | None = None,
        vocab_size: int = 8000,
        min_frequency: int = 2,
        mlm_probability: float = 0.15,
        whole_word_masking: bool = False,
        max_length: int = 64,
        pin_memory: bool = True,
        persistent_workers: bool = True,
        val_split: str = "val",
        test_split: str = "test",
        predict_split: str = "test",
        mask_seed: int = 0,
    ):
        super().__init__(batch_size, num_workers, image_size, tokenizer, vocab_size, min_frequency,
                         mlm_probability, whole_word_masking, max_length, pin_memory,
                         persistent_workers, val_split, test_split, predict_split, mask_seed)
        self.root = root
        self.num_train, self.num_val, self.num_test, self.seed = num_train, num_val, num_test, seed
        # vocab_size is only the tokenizer's ceiling; the model's hparam of that name is the real
        # size (num_tokens), and Lightning refuses to log two different values under one key.
        self.save_hyperparameters(ignore=["vocab_size"])

    @property
    def cache_dir(self) -> Path:
        return Path(self.root)

    def _build_cache(self) -> dict[str, Any]:
        return shapes.build_cache(self.root, self.image_size, self.num_train, self.num_val,
                                  self.num_test, self.seed)

    def _train_captions(self) -> list[str]:
        self._build_cache()
        return self.dataset("train").captions


class Flickr30kDataModule(CaptionDataModule):
    """Flickr30k from `root` in any of its formats (`vitbert.data.flickr30k`), through the image
    cache in `cache_dir`, built by prepare_data when missing or stale."""

    def __init__(
        self,
        root: str = "data/flickr30k",
        cache_dir: str = "data/flickr30k-cache",
        format: str = "auto",
        images_dir: str | None = None,
        prepare_workers: int = 2,
        max_bad_fraction: float = 0.05,
        batch_size: int = 64,
        num_workers: int = 4,
        image_size: int = 224,
        tokenizer: str | None = None,
        vocab_size: int = 8000,
        min_frequency: int = 2,
        mlm_probability: float = 0.15,
        whole_word_masking: bool = False,
        max_length: int = 64,
        pin_memory: bool = True,
        persistent_workers: bool = True,
        val_split: str = "val",
        test_split: str = "test",
        predict_split: str = "test",
        mask_seed: int = 0,
    ):
        super().__init__(batch_size, num_workers, image_size, tokenizer, vocab_size, min_frequency,
                         mlm_probability, whole_word_masking, max_length, pin_memory,
                         persistent_workers, val_split, test_split, predict_split, mask_seed)
        self.root, self._cache_dir, self.format = root, cache_dir, format
        self.images_dir, self.prepare_workers = images_dir, prepare_workers
        self.max_bad_fraction = max_bad_fraction
        self._summary: dict[str, Any] | None = None
        # vocab_size is only the tokenizer's ceiling; the model's hparam of that name is the real
        # size (num_tokens), and Lightning refuses to log two different values under one key.
        self.save_hyperparameters(ignore=["vocab_size"])

    @property
    def cache_dir(self) -> Path:
        return Path(self._cache_dir)

    def _build_cache(self) -> dict[str, Any]:
        if self._summary is None:  # checking the fingerprint stats every image: do it once
            self._summary = flickr30k.build_cache(
                self.root, self.cache_dir, self.image_size, self.format, self.images_dir,
                self.prepare_workers, self.max_bad_fraction)
        return self._summary

    def _train_captions(self) -> list[str]:
        # The annotations alone: the tokenizer does not wait for the images to be decoded.
        _, _, parsed = flickr30k.read_annotations(self.root, self.format)
        return [c for r in parsed.records if r.split == "train" for c in r.captions]


def describe(dm: CaptionDataModule) -> str:
    """One line for logs: sizes of the splits and the vocabulary."""
    sizes = {s: len(dm.dataset(s)) for s in SPLITS}
    return json.dumps({"cache": str(dm.cache_dir), "captions": sizes, "vocab": dm.num_tokens})
