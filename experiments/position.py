"""The position schemes the course's experiments compare (``scripts/experiments/position.py``);
the model itself uses a learned table (:class:`vitbert.nn.LearnedPosition`).

* :class:`SinusoidalPosition`: the fixed table of Vaswani et al., added to the tokens.
* :class:`Rotary1D` / :class:`Rotary2D` (RoPE): rotate each (q, k) channel pair by an angle
  proportional to the position, so that ``q_m · k_n`` depends only on the offset ``m - n``. In 2D,
  half of the channels turn with the row and half with the column. Values are never rotated.
* :class:`RelativePositionBias2D`: one learned scalar per (Δrow, Δcol) per head, added to the
  attention scores. Adam moves a weight by about ``lr`` per step, so a table whose entries must
  reach large values needs a larger learning rate (see the ``position`` experiment).

The encoder takes the rotations and the bias through :class:`vitbert.nn.AttentionContext`.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from vitbert.nn.position import grid_coordinates


def sinusoidal_table(num_positions: int, dim: int, base: float = 10000.0) -> Tensor:
    """(num_positions, dim): ``sin(pos / base^(2i/dim))`` at 2i, ``cos(...)`` at 2i + 1."""
    position = torch.arange(num_positions, dtype=torch.float64)[:, None]
    inv_freq = base ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    table = torch.zeros(num_positions, dim, dtype=torch.float64)
    table[:, 0::2] = torch.sin(position * inv_freq)
    table[:, 1::2] = torch.cos(position * inv_freq[: dim // 2])
    return table.float()


class SinusoidalPosition(nn.Module):
    """x + the fixed sinusoidal table; no parameters, any length up to ``num_positions``."""

    def __init__(self, num_positions: int, dim: int) -> None:
        super().__init__()
        self.register_buffer("table", sinusoidal_table(num_positions, dim), persistent=False)

    def forward(self, x: Tensor) -> Tensor:
        return x + self.table[: x.shape[1]].to(x.dtype)


def _rotate_half(x: Tensor) -> Tensor:
    """(x1, x2) → (−x2, x1) on the two halves of the last axis: a 90° turn of every pair."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def _rotary_angles(positions: Tensor, dim: int, base: float) -> Tensor:
    """(L,) positions → (L, dim) angles; channel i and i + dim/2 form one rotating pair."""
    channel = torch.arange(0, dim, 2, dtype=torch.float32, device=positions.device)
    inv_freq = base ** (-channel / dim)
    angles = positions.float()[:, None] * inv_freq[None, :]  # (L, dim/2)
    return torch.cat((angles, angles), dim=-1)


def _rotate(x: Tensor, angles: Tensor) -> Tensor:
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    return x * cos + _rotate_half(x) * sin


class Rotary1D(nn.Module):
    """RoPE over a 1D sequence; tokens after ``num_prefix_tokens`` take positions 0, 1, …"""

    def __init__(self, head_dim: int, base: float = 10000.0, num_prefix_tokens: int = 0) -> None:
        super().__init__()
        if head_dim % 2:
            raise ValueError(f"RoPE needs an even head width, got {head_dim}")
        self.head_dim, self.base, self.num_prefix_tokens = head_dim, base, num_prefix_tokens

    def angles(self, length: int, device: torch.device) -> Tensor:
        positions = torch.arange(length, device=device)
        return _rotary_angles(positions, self.head_dim, self.base)  # (L, Dh)

    def forward(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        p = self.num_prefix_tokens
        angles = self.angles(q.shape[-2] - p, q.device)
        return _rotate_tail(q, angles, p), _rotate_tail(k, angles, p)


class Rotary2D(nn.Module):
    """RoPE over an image grid in raster order: first half of Dh turns by row, second by column."""

    def __init__(
        self, head_dim: int, grid_size: tuple[int, int], base: float = 100.0,
        num_prefix_tokens: int = 0,
    ) -> None:
        super().__init__()
        if head_dim % 4:
            raise ValueError(f"2D RoPE needs a head width divisible by 4, got {head_dim}")
        self.head_dim, self.grid_size, self.base = head_dim, tuple(grid_size), base
        self.num_prefix_tokens = num_prefix_tokens

    def angles(self, device: torch.device) -> Tensor:
        row, col = grid_coordinates(self.grid_size, device)  # (N,) each
        half = self.head_dim // 2
        return torch.cat(
            (_rotary_angles(row, half, self.base), _rotary_angles(col, half, self.base)), dim=-1
        )  # (N, Dh)

    def forward(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        p = self.num_prefix_tokens
        angles = self.angles(q.device)
        if q.shape[-2] - p != angles.shape[0]:
            raise ValueError(f"expected {p} + {angles.shape[0]} tokens, got {q.shape[-2]}")
        half = self.head_dim // 2

        def rotate(x: Tensor) -> Tensor:
            head, tail = x[..., :p, :], x[..., p:, :]
            tail = torch.cat(
                (_rotate(tail[..., :half], angles[:, :half]),
                 _rotate(tail[..., half:], angles[:, half:])), dim=-1,
            )
            return torch.cat((head, tail), dim=-2)

        return rotate(q), rotate(k)


def _rotate_tail(x: Tensor, angles: Tensor, num_prefix: int) -> Tensor:
    if num_prefix == 0:
        return _rotate(x, angles)
    return torch.cat((x[..., :num_prefix, :], _rotate(x[..., num_prefix:, :], angles)), dim=-2)


class RelativePositionBias2D(nn.Module):
    """A learned (H, (2R−1)(2C−1)) table: one score bias per head per (Δrow, Δcol).

    ``forward()`` returns the (H, L, L) bias for attention over the grid in raster order;
    prefix tokens (a class token) get a zero bias.
    """

    def __init__(self, num_heads: int, grid_size: tuple[int, int], num_prefix_tokens: int = 0):
        super().__init__()
        rows, cols = grid_size
        self.num_prefix_tokens = num_prefix_tokens
        self.table = nn.Parameter(torch.zeros(num_heads, (2 * rows - 1) * (2 * cols - 1)))
        r, c = grid_coordinates(grid_size)  # (N,) each
        d_row = r[:, None] - r[None, :] + rows - 1  # (N, N) in [0, 2R-2]
        d_col = c[:, None] - c[None, :] + cols - 1
        self.register_buffer("index", d_row * (2 * cols - 1) + d_col, persistent=False)

    def forward(self) -> Tensor:
        bias = self.table[:, self.index]  # (H, N, N)
        p = self.num_prefix_tokens
        if p:
            bias = nn.functional.pad(bias, (p, 0, p, 0))
        return bias
