"""Data: Flickr30k in its real formats and the generated shapes default, one uint8 image cache,
a WordPiece tokenizer, the MLM collator, and the LightningDataModules that tie them together."""

from .cache import CaptionDataset, DataError
from .masking import STOP_WORDS, MLMCollator
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
    "MLMCollator",
    "load_tokenizer",
    "tokenizer_from_json",
    "tokenizer_to_json",
    "train_wordpiece",
]
