"""The towers and the joint model, built on :mod:`vitbert.nn`.

* :class:`ViT` (:mod:`.vit`): the image tower, with a patch embedding injected by
  :func:`build_image_tower`: conv patchify, ResNet hybrid, or the small conv stem.
* :class:`TextTower`, :class:`MLMHead` (:mod:`.bert`): BERT embeddings, encoder, tied MLM head.
* :class:`WordDetectorHead` (:mod:`.heads`): the head of the word-detection objective (the
  caption's words from the image alone).
* :class:`VitBert` (:mod:`.multimodal`): image tokens + words in one encoder, MLM logits; the
  photos reach it as their image features (the tower's output, once per photo); with
  ``itc_dim`` also :class:`ContrastiveHeads` (:mod:`.contrastive`): photos and captions embedded
  apart, for retrieval (``embed_images``, ``embed_texts``).
* :class:`VitBertConfig` (:mod:`.config`): plain-value configuration; :func:`build_network` builds
  the network it describes (a :class:`NetworkExtension` may build one from outside the core).

Stored weights (checkpoints, exported folders, pretrained timm weights) are read and written by
:mod:`vitbert.io`, never here: a model's constructor loads nothing.
"""

from vitbert.models.bert import MLMHead, TextEmbeddings, TextTower
from vitbert.models.config import (
    ConfigError,
    ImageTowerConfig,
    NetworkExtension,
    TextTowerConfig,
    VitBertConfig,
)
from vitbert.models.contrastive import ContrastiveHeads
from vitbert.models.heads import WordDetectorHead
from vitbert.models.multimodal import Projector, VitBert, build_network
from vitbert.models.patch_embed import ConvStem, HybridEmbed, PatchEmbed
from vitbert.models.vit import ViT, build_image_tower

__all__ = [
    "ConfigError",
    "ContrastiveHeads",
    "ConvStem",
    "HybridEmbed",
    "ImageTowerConfig",
    "MLMHead",
    "NetworkExtension",
    "PatchEmbed",
    "Projector",
    "TextEmbeddings",
    "TextTower",
    "TextTowerConfig",
    "ViT",
    "VitBert",
    "VitBertConfig",
    "WordDetectorHead",
    "build_image_tower",
    "build_network",
]
