"""Data: captioned photos in the layouts people have them in (Flickr30k, Flickr8k, COCO, a folder
of one's own: `layouts`), one uint8 image cache, a WordPiece tokenizer, the MLM collator, the data
sources (`DataSource`, `CaptionedPhotos`) and the one LightningDataModule that ties them together
(`datamodule.CaptionDataModule`, not imported here: it pulls in Lightning, which inference does
not need). Packages beside the core bring sources of their own through the same interface: the
embedded default's generated pictures, and streamed litdata shards
(`vitbert.streaming.StreamingSource`)."""

from .cache import CaptionDataset, DataError
from .masking import STOP_WORDS, MLMCollator
from .sources import CaptionedPhotos, DataSource
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
    "MLMCollator",
    "load_tokenizer",
    "tokenizer_from_json",
    "tokenizer_to_json",
    "train_wordpiece",
]

