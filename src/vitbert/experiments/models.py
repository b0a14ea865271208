"""The small models the experiments compare, built from the project's own modules.

* :class:`CNNPoolEnd`: 3×3 convs at full resolution, then a global average pool. Each feature
  sees only a small neighbourhood, and the pool throws away where it was: the model can tell
  *that* there is a square and a circle, not which is left.
* :class:`CNNPoolEarly`: the same convs with max-pooling between them, so the receptive field
  grows to the whole picture before the final pool and the relation becomes visible.
* :class:`AttentionClassifier`: :class:`~vitbert.models.patch_embed.ConvStem` → one pre-norm
  :class:`~vitbert.nn.Encoder` block → :class:`ClassifierHead`, with a choice of position scheme
  (``none`` / ``learned`` / ``bias`` / ``rope2d``). Without position the block is permutation
  equivariant and the mean pool permutation invariant, so left and right look the same.
"""

from __future__ import annotations

from typing import Literal

from torch import Tensor, nn

from vitbert.models.patch_embed import ConvStem
from vitbert.nn import BlockConfig, Encoder, LearnedPosition, RelativePositionBias2D, Rotary2D

Position = Literal["none", "learned", "bias", "rope2d"]
POSITIONS: tuple[str, ...] = ("none", "learned", "bias", "rope2d")


class ClassifierHead(nn.Module):
    """Mean over tokens, then a linear layer: (B, N, D) → (B, num_classes)."""

    def __init__(self, dim: int, num_classes: int) -> None:
        super().__init__()
        self.fc = nn.Linear(dim, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc(x.mean(dim=1))


def _conv(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True)
    )


class CNNPoolEnd(nn.Module):
    """Three 3×3 convs at 40×40 (receptive field 7 px), then average over the whole grid."""

    def __init__(self, num_classes: int = 2, width: int = 16, in_chans: int = 3) -> None:
        super().__init__()
        self.features = nn.Sequential(_conv(in_chans, width), _conv(width, width),
                                      _conv(width, width))
        self.head = nn.Linear(width, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        x = self.features(x)  # (B, C, 40, 40)
        return self.head(x.mean(dim=(2, 3)))


class CNNPoolEarly(nn.Module):
    """Conv + 2×2 max-pool three times (40 → 20 → 10 → 5), two more convs, then average.

    By the last conv each cell sees the whole 40×40 picture (receptive field ≥ 40 px).
    """

    def __init__(self, num_classes: int = 2, width: int = 16, in_chans: int = 3) -> None:
        super().__init__()
        self.features = nn.Sequential(
            _conv(in_chans, width), nn.MaxPool2d(2),  # (B, C, 20, 20)
            _conv(width, width), nn.MaxPool2d(2),  # (B, C, 10, 10)
            _conv(width, 2 * width), nn.MaxPool2d(2),  # (B, 2C, 5, 5)
            _conv(2 * width, 2 * width), _conv(2 * width, 2 * width),
        )
        self.head = nn.Linear(2 * width, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        x = self.features(x)  # (B, 2C, 5, 5)
        return self.head(x.mean(dim=(2, 3)))


class AttentionClassifier(nn.Module):
    """ConvStem (40×40 → 10×10 tokens of width D) + one attention block + mean-pool head.

    ``position`` picks how the block learns where a token is:

    * ``none``: nothing (the control).
    * ``learned``: a learned absolute vector per cell, added to the tokens (ViT).
    * ``bias``: a learned score bias per head per (Δrow, Δcol) (``self.bias.table``).
    * ``rope2d``: q and k rotated by row and column (needs a head width divisible by 4).
    """

    def __init__(
        self, position: Position = "none", num_classes: int = 2, dim: int = 32,
        num_heads: int = 2, stem_width: int = 8, mlp_ratio: float = 2.0, scale: bool = True,
    ) -> None:
        super().__init__()
        if position not in POSITIONS:
            raise ValueError(f"unknown position {position!r}; choose from {POSITIONS}")
        self.position = position
        self.stem = ConvStem(img_size=40, patch_size=4, in_chans=3, embed_dim=dim,
                             hidden_dim=stem_width)
        grid = self.stem.grid_size
        self.pos = LearnedPosition(grid[0] * grid[1], dim) if position == "learned" else None
        self.bias = RelativePositionBias2D(num_heads, grid) if position == "bias" else None
        self.rotary = Rotary2D(dim // num_heads, grid) if position == "rope2d" else None
        self.encoder = Encoder(BlockConfig(dim, num_heads, mlp_ratio, scale=scale), depth=1)
        self.head = ClassifierHead(dim, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        x = self.stem(x)  # (B, N, D)
        if self.pos is not None:
            x = self.pos(x)
        bias = self.bias() if self.bias is not None else None  # (H, N, N)
        x = self.encoder(x, rotary=self.rotary, bias=bias)  # (B, N, D)
        return self.head(x)
