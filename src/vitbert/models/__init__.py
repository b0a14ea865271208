"""The towers and the joint model, built on :mod:`vitbert.nn`.

* :class:`ViT` (:mod:`.vit`): the image tower, with a patch embedding injected by
  :func:`build_image_tower`: conv patchify, ResNet hybrid, or the small conv stem.
* :func:`load_timm_weights` (:mod:`.weights`): pretrained timm ViT / hybrid weights into it.
* :class:`TextTower`, :class:`MLMHead` (:mod:`.bert`): BERT embeddings, encoder, tied MLM head.
* :class:`VitBert` (:mod:`.multimodal`): image tokens + words in one encoder, MLM logits.
* :class:`VitBertConfig` (:mod:`.config`): plain-value configuration, and named presets.
"""

from vitbert.models.bert import MLMHead, TextEmbeddings, TextTower
from vitbert.models.config import (
    PRESETS,
    ImageTowerConfig,
    TextTowerConfig,
    VitBertConfig,
    preset,
)
from vitbert.models.multimodal import Projector, VitBert
from vitbert.models.patch_embed import ConvStem, HybridEmbed, PatchEmbed
from vitbert.models.vit import ViT, build_image_tower
from vitbert.models.weights import WeightReport, load_timm_weights, resample_pos_embed

__all__ = [
    "PRESETS",
    "ConvStem",
    "HybridEmbed",
    "ImageTowerConfig",
    "MLMHead",
    "PatchEmbed",
    "Projector",
    "TextEmbeddings",
    "TextTower",
    "TextTowerConfig",
    "ViT",
    "VitBert",
    "VitBertConfig",
    "WeightReport",
    "build_image_tower",
    "load_timm_weights",
    "preset",
    "resample_pos_embed",
]
