"""Data: Flickr30k in its real formats, one uint8 image cache, a WordPiece tokenizer, the MLM
collator, the data sources (`DataSource`, `Flickr30kSource`; the generated shapes default is
`vitbert.shapes.ShapesSource`) and the one LightningDataModule that ties them together
(`datamodule.CaptionDataModule`, not imported here: it pulls in Lightning, which inference does not
need). `StreamingSource` (litdata
shards, `vitbert.data.streaming`) is imported on first use, for the same reason."""

from .cache import CaptionDataset, DataError
from .masking import STOP_WORDS, MLMCollator
from .sources import DataSource, Flickr30kSource
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
