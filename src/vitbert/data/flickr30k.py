"""The import path of the reading and caching code before it read more than Flickr30k, kept for
the code and scripts that use it: `vitbert.data.captioned_photos` builds the image cache from any
layout, `vitbert.data.layouts` reads the layouts (Flickr30k's own in `layouts.flickr30k`)."""

from .captioned_photos import (
    DEFAULT_CACHE_DIR,
    DEFAULT_ROOT,
    IMAGE_DIRS,
    build_cache,
    cache_settings,
    locate,
)
from .layouts import (
    FORMATS,
    TEST_FRACTION,
    VAL_FRACTION,
    ImageRecord,
    Parsed,
    detect,
    hash_split,
    read_annotations,
)
from .layouts.flickr30k import load_from_hub, parse_kaggle, parse_nlphuji, parse_token
from .layouts.karpathy import KARPATHY_SPLITS, parse_karpathy

__all__ = ["DEFAULT_CACHE_DIR", "DEFAULT_ROOT", "FORMATS", "IMAGE_DIRS", "KARPATHY_SPLITS",
           "TEST_FRACTION", "VAL_FRACTION", "ImageRecord", "Parsed", "build_cache",
           "cache_settings", "detect", "hash_split", "load_from_hub", "locate", "parse_kaggle",
           "parse_karpathy", "parse_nlphuji", "parse_token", "read_annotations"]
