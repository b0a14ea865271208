"""The small models the experiments compare, built from the project's own modules.

* :class:`CNN` with ``pool="end"``: 3×3 convs that halve the grid three times (40 → 5), so a
  cell of the last map sees the whole picture, then a global average pool. The arrangement is
  kept until the last step: the convs can relate the two shapes.
* :class:`CNN` with ``pool="early"``: the *same* layers with the global average pool right after
  the first conv. What is left is a bag of 3×3 local features: the same numbers wherever the
  shapes stand, so "left of" is invisible (≈ chance).
* :class:`AttentionClassifier`: a conv stem → one pre-norm :class:`~vitbert.nn.Encoder` block →
  :class:`ClassifierHead`, with a choice of position scheme (``none`` / ``learned`` / ``bias`` /
  ``rope2d``). Without position the block is permutation equivariant and the mean pool
  permutation invariant, so left and right look the same. The stem (:func:`borderless_conv_stem`)
  pads only the raw picture, with its background, so that no token can learn where it is from
  the zero padding: the position comes from the position scheme alone.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import Tensor, nn

from experiments.data import IMAGE_SIZE
from experiments.position import RelativePositionBias2D, Rotary2D
from vitbert.models.patch_embed import ConvStem
from vitbert.nn import AttentionContext, BlockConfig, Encoder, LearnedPosition

Position = Literal["none", "learned", "bias", "rope2d"]
POSITIONS: tuple[str, ...] = ("none", "learned", "bias", "rope2d")
Pool = Literal["early", "end"]
POOLS: tuple[str, ...] = ("early", "end")
PATCH = 4  # 40×40 pictures → a 10×10 token grid


class ClassifierHead(nn.Module):
    """Mean over tokens, then a linear layer: (B, N, D) → (B, num_classes)."""

    def __init__(self, dim: int, num_classes: int) -> None:
        super().__init__()
        self.fc = nn.Linear(dim, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc(x.mean(dim=1))


def _conv(cin: int, cout: int, stride: int = 1) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False), nn.BatchNorm2d(cout),
        nn.ReLU(inplace=True),
    )


class CNN(nn.Module):
    """One small CNN; ``pool`` says where its global average pool goes.

    ``first`` is a 3×3 conv at full resolution; ``rest`` are 3×3 convs, three of them with
    stride 2 (40 → 20 → 10 → 5), then one more: a cell of the last map sees the whole picture.
    ``pool="end"`` averages the last map; ``pool="early"`` averages right after ``first`` and
    runs ``rest`` on the 1×1 map (a 3×3 conv with padding 1 on one cell uses only its centre tap,
    so the same layers then act as a small MLP on the pooled features).
    """

    def __init__(self, pool: Pool = "end", num_classes: int = 2, width: int = 16,
                 in_chans: int = 3) -> None:
        super().__init__()
        if pool not in POOLS:
            raise ValueError(f"unknown pool {pool!r}; choose from {POOLS}")
        self.pool = pool
        self.first = _conv(in_chans, width)
        self.rest = nn.Sequential(
            _conv(width, width, stride=2), _conv(width, 2 * width, stride=2),
            _conv(2 * width, 2 * width, stride=2), _conv(2 * width, 2 * width),
        )
        self.head = nn.Linear(2 * width, num_classes)

    def features(self, x: Tensor) -> Tensor:
        """The pooled features the linear head reads: (B, 3, 40, 40) → (B, 2C)."""
        x = self.first(x)  # (B, C, 40, 40)
        if self.pool == "early":
            x = x.mean(dim=(2, 3), keepdim=True)  # (B, C, 1, 1): where things were is gone
        x = self.rest(x)  # (B, 2C, 5, 5), or (B, 2C, 1, 1) after the early pool
        return x.mean(dim=(2, 3))

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.features(x))


def borderless_conv_stem(dim: int, hidden_dim: int, in_chans: int = 3) -> ConvStem:
    """The project's :class:`ConvStem` (two 3×3 convs, a 4×4 patch conv), re-padded.

    ConvStem pads both 3×3 convs with zeros. The first pads the picture, whose background is 0:
    harmless. The second pads the first conv's *output*, where the background is not 0 (BatchNorm
    and ReLU shift it), so the tokens at the picture's edge differ from the others and carry
    their position into a model that is meant to have none. Here the first conv pads by 2 and
    the second not at all (40 + 4 − 2 − 2 = 40): every output pixel is computed from real or
    background pixels alike, and moving the picture's content by a whole patch moves the tokens
    by one cell and changes nothing else.
    """
    stem = ConvStem(img_size=IMAGE_SIZE, patch_size=PATCH, in_chans=in_chans, embed_dim=dim,
                    hidden_dim=hidden_dim)
    first, second = stem.stem[0], stem.stem[3]
    first.padding, second.padding = (2, 2), (0, 0)
    return stem


class GridRotary2D(Rotary2D):
    """2D RoPE whose slowest pair turns by ``π / cells`` per cell (:class:`Rotary2D`: 1 rad).

    A rotating pair tells a positive offset from a negative one only while the angle between
    the two tokens stays within ±π. The library's slowest pair turns by 1 rad per cell, so on a
    10-cell axis offsets of 4 and more wrap round; a head of width 4 has *only* that pair per
    axis and cannot tell left from right beyond 3 cells. Scaling every angle so that the slowest
    pair covers the grid in under π (the faster pairs keep their ratios) fixes that.
    """

    def angles(self, device: torch.device) -> Tensor:
        return super().angles(device) * (math.pi / max(self.grid_size))  # (N, Dh)


def build_encoder(dim: int, num_heads: int, mlp_ratio: float, scale: bool) -> Encoder:
    """One pre-norm block: the only place the experiments construct the project's Encoder."""
    return Encoder(BlockConfig(dim, num_heads, mlp_ratio, scale=scale), depth=1)


class AttentionClassifier(nn.Module):
    """Conv stem (40×40 → 10×10 tokens of width D) + one attention block + mean-pool head.

    ``position`` picks how the block learns where a token is:

    * ``none``: nothing (the control).
    * ``learned``: a learned absolute vector per cell, added to the tokens (ViT).
    * ``bias``: a learned score bias per head per (Δrow, Δcol) (``self.bias.table``).
    * ``rope2d``: q and k rotated by row and column (:class:`GridRotary2D`; a head width
      divisible by 4).
    """

    def __init__(
        self, position: Position = "none", num_classes: int = 2, dim: int = 32,
        num_heads: int = 2, stem_width: int = 8, mlp_ratio: float = 2.0, scale: bool = True,
        in_chans: int = 3,
    ) -> None:
        super().__init__()
        if position not in POSITIONS:
            raise ValueError(f"unknown position {position!r}; choose from {POSITIONS}")
        self.position = position
        self.stem = borderless_conv_stem(dim, stem_width, in_chans)
        grid = self.stem.grid_size
        self.pos = LearnedPosition(grid[0] * grid[1], dim) if position == "learned" else None
        self.bias = RelativePositionBias2D(num_heads, grid) if position == "bias" else None
        self.rotary = GridRotary2D(dim // num_heads, grid) if position == "rope2d" else None
        self.encoder = build_encoder(dim, num_heads, mlp_ratio, scale)
        self.head = ClassifierHead(dim, num_classes)

    def tokens(self, x: Tensor) -> Tensor:
        """The block's output tokens, which the head averages: (B, 3, 40, 40) → (B, N, D)."""
        x = self.stem(x)  # (B, N, D)
        if self.pos is not None:
            x = self.pos(x)
        bias = self.bias() if self.bias is not None else None  # (H, N, N)
        return self.encoder(x, AttentionContext(rotary=self.rotary, bias=bias))  # (B, N, D)

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.tokens(x))
