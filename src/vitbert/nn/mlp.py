"""The position-wise feed-forward network: D → 4D → D (timm names: ``fc1``, ``fc2``).

GELU is the default (BERT, ViT); ReLU is the 2017 original; SwiGLU (``SiLU(XW) ⊙ XV``) is the
gated variant of modern LLMs, which adds a third matrix, so its hidden width is usually 2/3 of
the plain one to keep the parameter count equal.
"""

from __future__ import annotations

from typing import Literal

import torch.nn.functional as F
from torch import Tensor, nn

MLPKind = Literal["gelu", "relu", "swiglu"]


class MLP(nn.Module):
    """Linear → activation → dropout → Linear → dropout."""

    def __init__(self, dim: int, hidden_dim: int, activation: str = "gelu", drop: float = 0.0):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden_dim)
        self.act = {"gelu": nn.GELU(), "relu": nn.ReLU()}[activation]
        self.drop1 = nn.Dropout(drop)
        self.fc2 = nn.Linear(hidden_dim, dim)
        self.drop2 = nn.Dropout(drop)

    def forward(self, x: Tensor) -> Tensor:
        return self.drop2(self.fc2(self.drop1(self.act(self.fc1(x)))))


class SwiGLU(nn.Module):
    """``fc2(SiLU(x W) ⊙ x V)``; ``fc1`` holds W and V side by side (one matmul)."""

    def __init__(self, dim: int, hidden_dim: int, drop: float = 0.0):
        super().__init__()
        self.fc1 = nn.Linear(dim, 2 * hidden_dim)
        self.drop1 = nn.Dropout(drop)
        self.fc2 = nn.Linear(hidden_dim, dim)
        self.drop2 = nn.Dropout(drop)

    def forward(self, x: Tensor) -> Tensor:
        gate, value = self.fc1(x).chunk(2, dim=-1)
        return self.drop2(self.fc2(self.drop1(F.silu(gate) * value)))


def build_mlp(kind: MLPKind, dim: int, mlp_ratio: float, drop: float = 0.0) -> nn.Module:
    hidden = int(dim * mlp_ratio)
    if kind == "swiglu":
        return SwiGLU(dim, int(hidden * 2 / 3), drop)
    if kind in ("gelu", "relu"):
        return MLP(dim, hidden, kind, drop)
    raise ValueError(f"unknown MLP kind {kind!r}; choose gelu, relu or swiglu")
