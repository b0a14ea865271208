"""The shapes data's source: the generated pictures (:mod:`vitbert.shapes.data`), their own
caption scores and binding negatives (:mod:`vitbert.shapes.captions`), and the twin photos the
twin contrast reads (:mod:`vitbert.shapes.twins`), plugged into the core's data module through
the :class:`~vitbert.data.sources.DataSource` interface."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from lightning.pytorch.utilities import rank_zero_info
from torch.utils.data import Dataset

from vitbert.data.cache import CaptionDataset
from vitbert.data.masking import BatchExtra
from vitbert.data.sources import DataSource
from vitbert.shapes import captions, data
from vitbert.shapes.twins import TwinPhotos, collate_twins


class ShapesSource(DataSource):
    """The embedded default: pictures of two shapes with captions, generated on first use
    (`vitbert.shapes.data`); val and test hold colour-shape pairs never seen in training."""

    def __init__(
        self,
        *,
        root: str = data.DEFAULT_ROOT,
        num_train: int = 20_000,
        num_val: int = 2_000,
        num_test: int = 2_000,
        seed: int = 0,
        twin_photos: bool = False,
    ):
        """
        Args:
            root: Folder the pictures are generated into (the cache itself); reused while its
                settings match.
            num_train: Training pictures (one caption each).
            num_val: Validation pictures, each holding a colour-shape pair unseen in training.
            num_test: Test pictures, drawn like the validation ones.
            seed: Generation seed: the same seed gives the same pictures, captions and held-out
                pairs.
            twin_photos: Training only: each caption also brings the photo of a *twin* (a
                caption of another photo with the same content words, two of them exchanged;
                vitbert.shapes.twins), for the twin contrast (vitbert.shapes.TwinContrast).
        """
        self.root = root
        self.num_train, self.num_val, self.num_test, self.seed = num_train, num_val, num_test, seed
        self.twin_photos = twin_photos
        self._twins: TwinPhotos | None = None

    @property
    def cache_dir(self) -> Path:
        return Path(self.root)

    def build_cache(self, image_size: int) -> dict[str, Any]:
        return data.build_cache(self.root, image_size, self.num_train, self.num_val,
                                  self.num_test, self.seed)

    def train_captions(self, image_size: int) -> list[str]:
        self.build_cache(image_size)  # generating the captions means generating the pictures
        return CaptionDataset(self.cache_dir, "train").captions

    def split_origin(self, meta: dict[str, Any]) -> str:
        return "generated (val and test hold colour-shape pairs unseen in training)"

    def empty_split(self, meta: dict[str, Any], split: str) -> tuple[str, str]:
        return (f"num_{split}=0", f"set --data.source.init_args.num_{split} above 0")

    def caption_scores(self, candidates: Sequence[str], references: Sequence[Sequence[str]]
                       ) -> dict[str, float]:
        """The share of captions naming both objects' colours and shapes right, and the colours
        alone and the shapes alone (`vitbert.shapes.captions`); one caption per picture."""
        shares = captions.colour_shape_shares(candidates, [rs[0] for rs in references])
        return shares or {}

    def caption_score_labels(self) -> dict[str, str]:
        return dict(captions.CAPTION_SCORE_LABELS)

    def binding_swaps(self) -> Callable[[str], list[tuple[str, str]]]:
        return captions.binding_swaps

    def training_items(self, dataset: Dataset) -> Dataset:
        """With ``twin_photos``, the training split with its twins' photos, found once."""
        if not self.twin_photos:
            return dataset
        if self._twins is None or self._twins.dataset is not dataset:
            self._twins = TwinPhotos(dataset)
            rank_zero_info(f"twin photos: {self._twins.share():.0%} of the training captions "
                           f"have a twin")
        return self._twins

    def batch_extra(self) -> BatchExtra | None:
        return collate_twins if self.twin_photos else None

    def settings(self) -> dict[str, Any]:
        settings = super().settings()
        settings["init_args"].pop("twins", None)
        return settings
