"""Where a token is, for attention (which alone is blind to order): the learned table BERT and
ViT add to their tokens, and the (row, column) of each cell of an image grid.

The other schemes of the course (sinusoidal, RoPE in 1D and 2D, a learned offset bias) are used
by its experiments only and live with them (:mod:`experiments.position`, beside the package);
the encoder takes them through :class:`vitbert.nn.AttentionContext` (``rotary``, ``bias``).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


class LearnedPosition(nn.Module):
    """x + P[:L] with P a learned (num_positions, D) table (timm's ``pos_embed`` layout)."""

    def __init__(self, num_positions: int, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(1, num_positions, dim))
        nn.init.trunc_normal_(self.weight, std=0.02)

    def forward(self, x: Tensor) -> Tensor:
        L = x.shape[1]
        if L > self.weight.shape[1]:
            raise ValueError(f"sequence of {L} tokens exceeds {self.weight.shape[1]} positions")
        return x + self.weight[:, :L]


def grid_coordinates(grid: tuple[int, int], device: torch.device | None = None
                     ) -> tuple[Tensor, Tensor]:
    """(row, col) of each token of a rows × cols grid in raster order: two (N,) long tensors."""
    rows, cols = grid
    row = torch.arange(rows, device=device).repeat_interleave(cols)  # (N,)
    col = torch.arange(cols, device=device).repeat(rows)  # (N,)
    return row, col
