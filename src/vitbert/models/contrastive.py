"""The contrastive score beside the joint encoder (ALBEF's image-text contrastive, ITC; CLIP).

Each tower summarises its input alone, each summary is projected into one small shared space and
L2-normalised, and a caption's score against a photo is the cosine of the two:

    photo ─ ViT ─ image features (B, N, D_img) ─ mean ─ (B, D_img) ─ image_proj ─ (B, E) ─ ‖·‖ ─┐
    caption ─ text encoder, words alone ─ [CLS] or mean (B, D) ─ text_proj ─ (B, E) ─ ‖·‖ ── cos

Why beside the joint encoder: the joint encoder (MLM) reads a caption and a photo *together*,
so scoring every caption against every photo would cost one encoder pass per pair (1,000 photos
× 5,000 captions: 5 million). Here each photo and each caption is embedded once and every pair
is one dot product.

The image side reads the image features the text reads (``VitBert.image_features``: the pooled one,
or every patch), averaged: the tower's own mean pool, and so also what a frozen tower's feature
cache holds, so training never runs the tower twice. The text side runs the text encoder on the
caption with no image tokens (the text-only reading of :mod:`vitbert.lit.conditions`): its
[CLS] row, or the mean of its rows (``VitBertConfig.itc_text_pool``), then depends on the words
alone, so a caption is embedded once for every photo.

The temperature divides the cosines before the softmax of the InfoNCE loss
(:mod:`vitbert.lit.contrastive`). It is learned, as its logarithm (a positive quantity whose
useful values span orders of magnitude moves by ratios), starts at CLIP's and ALBEF's 0.07, and
is clamped to [0.01, 0.5] (CLIP caps the inverse at 100; ALBEF clamps to [0.001, 0.5]): too low
and a few pairs dominate the softmax, too high and nothing is told apart.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vitbert.models.vit import init_transformer_weights

INITIAL_TEMPERATURE = 0.07
TEMPERATURE_RANGE = (0.01, 0.5)


class ContrastiveHeads(nn.Module):
    """The two projections into the shared space of width ``dim`` (E), and the temperature."""

    def __init__(self, image_dim: int, text_dim: int, dim: int) -> None:
        super().__init__()
        self.image_proj = nn.Linear(image_dim, dim)
        self.text_proj = nn.Linear(text_dim, dim)
        self.log_temperature = nn.Parameter(torch.tensor(math.log(INITIAL_TEMPERATURE)))
        init_transformer_weights(self)

    @property
    def temperature(self) -> Tensor:
        """The learned temperature, clamped to :data:`TEMPERATURE_RANGE` (a 0-dim tensor)."""
        low, high = (math.log(t) for t in TEMPERATURE_RANGE)
        return self.log_temperature.clamp(low, high).exp()

    def embed_image_features(self, image_features: Tensor) -> Tensor:
        """Image features (B, N, D_img) → unit vectors (B, E). A frozen tower's cached features
        are stored in fp16: read in the projection's dtype."""
        pooled = image_features.mean(dim=1).to(self.image_proj.weight.dtype)  # (B, D_img)
        return F.normalize(self.image_proj(pooled), dim=-1)  # (B, E)

    def embed_text(self, summary: Tensor) -> Tensor:
        """A caption read without the image, summarised (its [CLS] row or the mean of its rows,
        B, D) → unit vectors (B, E)."""
        return F.normalize(self.text_proj(summary), dim=-1)  # (B, E)
