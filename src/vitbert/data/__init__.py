"""Data: captioned photos in the layouts people have them in (Flickr30k, Flickr8k, COCO, a folder
of one's own: `layouts`), one uint8 image cache, a WordPiece tokenizer, the MLM collator, the data
sources (`DataSource`; `CaptionedPhotos`, also known by its first name `Flickr30kSource`; the
generated shapes default is `vitbert.shapes.ShapesSource`) and the one LightningDataModule that ties
them together (`datamodule.CaptionDataModule`, not imported here: it pulls in Lightning, which
inference does not need). `StreamingSource` (litdata shards, `vitbert.data.streaming`) is imported
on first use,
for the same reason."""

from .cache import CaptionDataset, DataError
from .masking import STOP_WORDS, MLMCollator
from .sources import CaptionedPhotos, DataSource, Flickr30kSource
from .tokenizer import (
    SPECIAL_TOKENS,
    load_tokenizer,
    tokenizer_from_json,
    tokenizer_to_json,
    train_wordpiece,
)

__all__ = [
    "SPECIAL_TOKENS",
    "STOP_WORDS",
    "CaptionDataset",
    "CaptionedPhotos",
    "DataError",
    "DataSource",
    "Flickr30kSource",
    "MLMCollator",
    "StreamingSource",
    "load_tokenizer",
    "tokenizer_from_json",
    "tokenizer_to_json",
    "train_wordpiece",
]


def __getattr__(name: str):
    if name == "StreamingSource":  # litdata is imported only by a run that streams
        from .streaming import StreamingSource

        return StreamingSource
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
