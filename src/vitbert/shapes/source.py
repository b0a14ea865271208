"""The shapes data's source: the generated pictures (:mod:`vitbert.shapes.data`), plugged into
the core's data module through the :class:`~vitbert.data.sources.DataSource` interface."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vitbert.data.cache import CaptionDataset
from vitbert.data.sources import DataSource
from vitbert.shapes import data


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
        """
        self.root = root
        self.num_train, self.num_val, self.num_test, self.seed = num_train, num_val, num_test, seed

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
