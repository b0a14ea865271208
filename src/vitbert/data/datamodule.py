"""The LightningDataModule: one class, fed by a data source (`vitbert.data.sources`).

The source says where the image cache lives, builds it, and gives the training captions (a source
that streams, `vitbert.streaming.StreamingSource`, gives its datasets, its training loader and
its tokenizer instead). The data module owns the rest: the tokenizer (loaded from a path, or
trained on the training captions and cached beside the data), the MLM collators (random masks for
training, per-example deterministic masks for val / test / predict) and the loaders.

`num_tokens` works right after __init__ (LightningCLI links it to the model's vocabulary size with
apply_on="instantiate", before any Trainer exists): it may generate a source's data or read its
annotations to train the tokenizer on first use. Writes are atomic (temp file + rename),
so parallel ranks doing the same at start-up do not corrupt each other.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path
from typing import Any

import lightning as L
import torch
from torch.utils.data import DataLoader, Dataset
from transformers import PreTrainedTokenizerFast

from .augment import random_resized_crop
from .cache import SPLITS, DataError
from .features import ImageFeatures
from .masking import MLMCollator
from .resume import eval_loader, resumable_loader
from .sources import DataSource, LoaderOptions
from .tokenizer import cached_wordpiece, load_tokenizer

# What each stage does with the split it reads (the error when that split is empty says it).
STAGE_VERB = {"fit": "train on", "validate": "validate", "test": "test", "predict": "predict"}


class TrainingSplit(Dataset):
    """The training split as the training loader reads it: each caption with its photo's pixels,
    or, once the data module is told to use a frozen part's feature cache
    (:meth:`CaptionDataModule.use_image_features`), with that part's cached output.

    One object per data module, switched in place: Lightning builds the training loader before
    the fit starts (to count the schedule's steps) and keeps it, while the cache is built at fit
    start (`vitbert.lit.frozen`); the loader holds this object, and its worker processes copy it
    at its first batch, after the switch. (Persistent workers already started keep their copy.)
    """

    def __init__(self, captions: Dataset) -> None:
        self.captions = self.served = captions  # the split's CaptionDataset: `captions`, `rows`

    def use(self, features: ImageFeatures | None) -> None:
        """Serve ``features``' cached rows from now on; None: the pixels again."""
        self.served = self.captions if features is None else features.wrap(self.captions)

    def __len__(self) -> int:
        return len(self.captions)  # type: ignore[arg-type]

    def __getitem__(self, i: int) -> dict[str, Any]:
        return self.served[i]


def evaluation_mlm_probability(mlm_probability: float,
                               eval_mlm_probability: float | None = None) -> float:
    """The fraction validation, test and predict hide: ``eval_mlm_probability`` when set, else
    training's (one rule for the data module and for a loader rebuilt from a checkpoint)."""
    return eval_mlm_probability or mlm_probability


class CaptionDataModule(L.LightningDataModule):
    """Captioned pictures from a data source, tokenized and masked for masked-language modelling.

    The defaults are BERT's (15% hidden); configs/default.yaml names the embedded default's
    source and what it changes.
    """

    def __init__(
        self,
        *,
        source: DataSource,
        batch_size: int = 64,
        num_workers: int = 1,
        image_size: int = 32,
        max_length: int = 64,
        tokenizer: str | None = None,
        vocab_size: int = 8000,
        min_frequency: int = 2,
        mlm_probability: float = 0.15,
        eval_mlm_probability: float | None = None,
        whole_word_masking: bool = False,
        pin_memory: bool = True,
        persistent_workers: bool = True,
        val_split: str = "val",
        test_split: str = "test",
        predict_split: str = "test",
        mask_seed: int = 0,
        content_weight: float = 1.0,
        random_crop_scale: float = 1.0,
        group_by_photo: bool = False,
        group_by_length: bool = False,
    ):
        """
        Args:
            source: Where the captioned pictures come from: vitbert.data.CaptionedPhotos (photos
                on disk), vitbert.streaming.StreamingSource (litdata shards, local or s3://), or a
                data set's own (the command line's default: the embedded generated pictures).
            batch_size: Captions per batch (each distinct picture in it stacked once).
            num_workers: DataLoader worker processes (0 = load in the training process).
            image_size: Side of the square cached pictures; set from model.net.image.image_size.
            max_length: Longest caption in tokens, [CLS] and [SEP] included, longer ones cut;
                set from model.net.text.max_len.
            tokenizer: A tokenizer.json or BERT vocab.txt to use; unset, a WordPiece is trained on
                the training captions and cached beside the data.
            vocab_size: Largest vocabulary of the trained WordPiece (the model gets its real size).
            min_frequency: Fewest occurrences for a piece to enter the trained vocabulary.
            mlm_probability: Fraction of caption pieces hidden as prediction targets. BERT's 0.15
                suits long natural captions; short templated ones (the embedded default's)
                give a hidden word away at 0.15, and 0.3 makes the picture necessary.
            eval_mlm_probability: The fraction validation, test and predict hide, when it should
                differ from training's (unset: mlm_probability): a short run learns faster from
                more targets, and its figures still compare with BERT's 0.15.
            whole_word_masking: Hide every piece of a chosen word together.
            pin_memory: Page-locked batches for faster copies to a GPU (ignored without one).
            persistent_workers: Keep loader workers alive between epochs.
            val_split: Split validation reads (train, val or test).
            test_split: Split `test` reads.
            predict_split: Split `predict` reads.
            mask_seed: Seed of the fixed per-example masks of val / test / predict.
            content_weight: Training only: how much likelier a piece of a content word (not in
                masking.STOP_WORDS) is to be hidden than a function word's, at the same overall
                rate. Validation masks stay uniform, so figures compare across settings.
            random_crop_scale: Training only: smallest area fraction of a random resized crop of
                the picture (1 = no crop). No flips or colour changes: they would falsify
                "left" or "red" (see vitbert.data.augment).
            group_by_photo: Training only: shuffle the photos (from the seed and the epoch) and
                keep each photo's captions together, so a batch of Flickr30k's (5 captions a
                photo) holds about batch_size / 5 photos and the image tower runs once per
                photo, not per caption: the same loss for about a fifth of the tower's work.
                Batches then hold fewer distinct photos. Nothing changes with one caption per
                picture (the generated shapes).
            group_by_length: Training only: batches of captions of about one length (sorted
                within windows of 50 batches, the batches shuffled), so little of a batch is
                padding: random batches of Flickr captions are padded to twice their mean
                length. Not with group_by_photo.
        """
        super().__init__()
        for name, split in (("val_split", val_split), ("test_split", test_split),
                            ("predict_split", predict_split)):
            if split not in SPLITS:
                raise DataError(f"{name}={split!r} is not one of {SPLITS}")
        self.source = source
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.image_size = image_size
        self.max_length = max_length
        self.tokenizer_path = tokenizer
        self.vocab_size = vocab_size
        self.min_frequency = min_frequency
        self.mlm_probability = mlm_probability
        self.eval_mlm_probability = evaluation_mlm_probability(mlm_probability,
                                                               eval_mlm_probability)
        self.whole_word_masking = whole_word_masking
        self.pin_memory = pin_memory
        self.persistent_workers = persistent_workers
        self.val_split, self.test_split, self.predict_split = val_split, test_split, predict_split
        self.mask_seed = mask_seed
        self.content_weight = content_weight
        self.train_transform = random_resized_crop(image_size, random_crop_scale)
        self.group_by_photo = group_by_photo
        self.group_by_length = group_by_length
        self._tokenizer: PreTrainedTokenizerFast | None = None
        self._datasets: dict[str, Dataset] = {}
        self._image_features: ImageFeatures | None = None
        self._training: TrainingSplit | None = None  # built with the first training loader
        # vocab_size is only the tokenizer's ceiling; the model's hparam of that name is the real
        # size (num_tokens), and Lightning refuses to log two different values under one key.
        self.save_hyperparameters(ignore=["vocab_size", "source"])
        self.hparams["source"] = source.settings()

    @property
    def cache_dir(self) -> Path:
        """The source's cache folder (the trained tokenizer is cached there too)."""
        return self.source.cache_dir

    def _build_cache(self) -> dict[str, Any]:
        return self.source.build_cache(self.image_size)

    # -- tokenizer --------------------------------------------------------------------------------

    @property
    def tokenizer(self) -> PreTrainedTokenizerFast:
        """Loaded from `tokenizer=`, or the one the data comes with (streamed shards), or
        trained once on the training captions and cached beside the data, keyed by the
        captions' hash, so it changes only when the captions do."""
        if self._tokenizer is None:
            if self.tokenizer_path is not None:
                self._tokenizer = load_tokenizer(self.tokenizer_path)
            elif (shipped := self.source.tokenizer_file()) is not None:
                self._tokenizer = load_tokenizer(shipped)
            else:
                texts = self.source.train_captions(self.image_size)
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
        if stage in STAGE_VERB:
            self._check_stage_split(stage)
        if stage == "fit":
            self._say(self.data_summary())
            if not self.split_sizes()[self.val_split][0] and self.trainer is not None:
                self.trainer.limit_val_batches = 0  # Lightning's "no validation", said above

    # -- the splits, said out loud ----------------------------------------------------------------

    def split_sizes(self) -> dict[str, tuple[int, int]]:
        """(photos, captions) of each split, as the cache recorded them when it was built."""
        meta = self._meta()
        return {s: (meta["splits"][s], meta["split_captions"][s]) for s in SPLITS}

    def data_summary(self) -> str:
        """What a fit reads: photos and captions per split and where the split came from.

        Printed at the start of every fit, so a split that is not the one expected (a hash split
        where Karpathy's was meant) or too small to mean anything is seen before hours of training.
        """
        meta = self._meta()
        lines = [f"data: {self.cache_dir}; split: {self.source.split_origin(meta)}"]
        for split, (photos, captions) in self.split_sizes().items():
            if photos:
                lines.append(f"  {split}: {photos} photos, {captions} captions")
                continue
            why, fix = self.source.empty_split(meta, split)
            roles = [role for role, used in (("validation is off", self.val_split),
                                             ("there is nothing to test", self.test_split))
                     if used == split]
            uses = f"; {' and '.join(roles)}: {fix}" if roles else ""  # else no stage reads it
            lines.append(f"  {split}: 0 photos ({why}){uses}")
        return "\n".join(lines)

    def _check_stage_split(self, stage: str) -> None:
        """Stop with one line when the split a stage needs is empty. A fit whose validation split
        is empty runs without validation instead: a zero-length loader would only get Lightning's
        "Total length of DataLoader across ranks is zero" and validation hooks with no batch."""
        split = {"fit": "train", "validate": self.val_split, "test": self.test_split,
                 "predict": self.predict_split}[stage]
        photos, _ = self.split_sizes()[split]
        if not photos:
            why, fix = self.source.empty_split(self._meta(), split)
            raise DataError(f"{split}: 0 photos ({why}); nothing to {STAGE_VERB[stage]}: {fix}")

    def _meta(self) -> dict[str, Any]:
        self._build_cache()
        meta = self.source.read_summary()
        if meta is None:  # built a moment ago: only a concurrent rebuild removes it
            raise DataError(f"{self.cache_dir}: the image cache disappeared (cache.json missing);"
                            " is another run rebuilding it?")
        return meta

    def _say(self, text: str) -> None:
        """Print once per run: on rank zero, or always without a Trainer."""
        if self.trainer is None or self.trainer.is_global_zero:
            print(text, flush=True)

    def dataset(self, split: str) -> Dataset:
        """One split's captions, one per item, with ``captions`` and ``rows`` (the source's
        `split_dataset`: a `CaptionDataset` of the image cache for the folder sources)."""
        if split not in self._datasets:
            self._build_cache()
            self._datasets[split] = self.source.split_dataset(split, self.image_size)
        return self._datasets[split]

    def caption(self, index: int, split: str) -> str:
        """The caption of example `index` of `split` (batch["index"] holds these indices)."""
        return self.dataset(split).captions[index]

    def collator(self, deterministic: bool) -> MLMCollator:
        """Training (`deterministic=False`) gets the content weight and the augmentation; val /
        test / predict get fixed uniform masks and the pictures as they are."""
        training = not deterministic
        rate = self.mlm_probability if training else self.eval_mlm_probability
        return MLMCollator(self.tokenizer, mlm_probability=rate,
                           whole_word=self.whole_word_masking, deterministic=deterministic,
                           seed=self.mask_seed, max_length=self.max_length,
                           content_weight=self.content_weight if training else 1.0,
                           image_transform=self.train_transform if training else None)

    def use_image_features(self, features: ImageFeatures | None) -> None:
        """Serve a frozen part's cached output (`vitbert.data.features`) instead of pixels: the
        training split switches in place (:class:`TrainingSplit`: the loader built before the
        fit started serves it too), and evaluation loaders created from now on read it; None
        goes back to pixels."""
        if features is not None:
            self.check_image_features()
        self._image_features = features
        if self._training is not None:
            self._training.use(features)

    def check_image_features(self) -> None:
        """Stop with one line when the source keeps no image cache to compute features over."""
        if not self.source.caches_images:
            raise DataError(f"a frozen image tower or backbone caches its output per photo of an "
                            f"image cache, and {type(self.source).__name__} streams photos "
                            f"without one: freeze it for some steps only (model.freeze_image."
                            f"steps), or use a folder source")

    def training_split(self) -> TrainingSplit:
        """The training split as the training loader reads it (one object, switched in place
        by :meth:`use_image_features`)."""
        if self._training is None:
            self._training = TrainingSplit(self.dataset("train"))
            self._training.use(self._image_features)
        return self._training

    def _loader(self, split: str, train: bool) -> DataLoader:
        if train and self._image_features is None:
            own = self.source.train_loader(LoaderOptions(
                batch_size=self.batch_size, num_workers=self.num_workers,
                pin_memory=self.pin_memory and torch.cuda.is_available(),
                image_size=self.image_size, collate_fn=self.collator(deterministic=False)))
            if own is not None:  # a streaming source deals its data to the ranks itself
                return own
        if train:  # resumes mid-epoch exactly (order, position, masks): see vitbert.data.resume
            dataset: Dataset = self.training_split()
            captions = self.dataset(split)
            groups = captions.rows if self.group_by_photo else None  # (captions,) photo rows
            lengths = ([len(c.split()) for c in captions.captions] if self.group_by_length
                       else None)
            make = functools.partial(resumable_loader, groups=groups, lengths=lengths)
        else:
            dataset = self.dataset(split)
            if self._image_features is not None:
                dataset = self._image_features.wrap(dataset)
            make = eval_loader
        return make(
            dataset,
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
