"""Multi-head self-attention on ``F.scaled_dot_product_attention``, and the mask helpers.

Per head: ``softmax(Q Kᵀ / √Dh + M) V``. The ``1/√Dh`` keeps the variance of a score at about 1
whatever the head width, so the softmax neither saturates for wide heads nor flattens for narrow
ones. ``M`` is 0 where attention is allowed and −∞ where it is blocked; we carry it as a boolean
"may attend" mask (see :mod:`vitbert.nn`) and let SDPA turn it into −∞, so that fused
flash / memory-efficient kernels are used where the hardware has them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vitbert.nn.position import grid_coordinates


def key_padding_mask(attention_mask: Tensor) -> Tensor:
    """(B, L) "is a real token" → (B, 1, 1, L) "may attend to this key"."""
    if attention_mask.dtype != torch.bool:
        attention_mask = attention_mask != 0
    return attention_mask[:, None, None, :]


def seq2seq_mask(num_image_tokens: int, attention_mask: Tensor) -> Tensor:
    """Unified VLP's generation mask over [image tokens; words], AND the key padding.

    Image tokens see the image tokens only; a word sees every image token and the words to its
    left and itself, never a word to its right. ``attention_mask`` (B, L) marks the real keys
    (visible image tokens and unpadded words), L = N + T. Returns (B, 1, L, L), True = may attend.
    """
    L, N = attention_mask.shape[-1], num_image_tokens
    position = torch.arange(L, device=attention_mask.device)
    query, key = position[:, None], position[None, :]  # (L, 1), (1, L)
    is_image_key = key < N
    # image rows: image keys only; word rows: image keys and words at or left of the query
    allowed = torch.where(query < N, is_image_key, is_image_key | (key <= query))  # (L, L)
    return combine_masks(allowed[None, None], key_padding_mask(attention_mask))  # (B, 1, L, L)


def local_mask(grid: tuple[int, int], radius: int, num_prefix_tokens: int = 0,
               device: torch.device | None = None) -> Tensor:
    """Neighbourhood attention over an image grid in raster order: a patch sees the patches at
    most ``radius`` rows and ``radius`` columns away, a (2·radius + 1)² window clipped at the
    edges. Prefix tokens (a class token) see every token and are seen by every token.

    Returns (1, 1, L, L), True = may attend, L = prefix + rows·cols.
    """
    row, col = grid_coordinates(grid, device)  # (N,) each
    near = (((row[:, None] - row[None, :]).abs() <= radius)
            & ((col[:, None] - col[None, :]).abs() <= radius))  # (N, N)
    L, p = num_prefix_tokens + len(row), num_prefix_tokens
    allowed = torch.ones(L, L, dtype=torch.bool, device=device)
    allowed[p:, p:] = near
    return allowed[None, None]


def combine_masks(*masks: Tensor | None) -> Tensor | None:
    """Blocked if any rule blocks: the AND of the "may attend" masks (``None`` = allow all)."""
    combined = None
    for mask in masks:
        if mask is None:
            continue
        combined = mask if combined is None else combined & mask
    return combined


class LayerCache:
    """The keys and values one attention layer has read so far: (B, H, P, Dh) each, or empty.

    Decoding under the seq2seq mask appends one word at a time; no earlier token may see a later
    one, so the keys and values of everything already read stay exact and are computed once.
    """

    def __init__(self) -> None:
        self.keys: Tensor | None = None
        self.values: Tensor | None = None

    def __len__(self) -> int:
        return 0 if self.keys is None else self.keys.shape[2]

    def extend(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Append the new tokens' (B, H, L, Dh) keys and values; return all (B, H, P + L, Dh)."""
        if self.keys is not None:
            k, v = torch.cat((self.keys, k), dim=2), torch.cat((self.values, v), dim=2)
        self.keys, self.values = k, v
        return k, v


class KVCache:
    """One :class:`LayerCache` per block of an encoder, cropped and reordered together."""

    def __init__(self, num_layers: int) -> None:
        self.layers = [LayerCache() for _ in range(num_layers)]

    def __len__(self) -> int:
        return len(self.layers[0])

    def crop(self, length: int) -> None:
        """Forget every token from position ``length`` on (a [MASK] read only to be predicted)."""
        for layer in self.layers:
            if layer.keys is not None:
                layer.keys, layer.values = layer.keys[:, :, :length], layer.values[:, :, :length]

    def select(self, index: Tensor) -> None:
        """Keep batch rows ``index`` (B',), in that order: beams that survive, or are copied."""
        for layer in self.layers:
            if layer.keys is not None:
                layer.keys, layer.values = layer.keys[index], layer.values[index]


class QueryKeyTransform(Protocol):
    """A position scheme that rotates queries and keys (RoPE); never applied to values."""

    def __call__(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]: ...


@dataclass(frozen=True, eq=False)
class AttentionContext:
    """What attention needs besides the tokens: who may see whom, and where they stand.

    One value an encoder hands unchanged to every block, and each block to its attention; it is
    the same for every layer of one forward pass. ``mask``: boolean, True = may attend,
    broadcastable to (B, H, L, S) (see :mod:`vitbert.nn`). ``rotary``: a transform of q and k
    (RoPE). ``bias``: added to the scores, (H, L, S) or (B, H, L, S) (the learned
    relative-offset bias). ``None`` everywhere = every token sees every token, no position.
    """

    mask: Tensor | None = None
    rotary: QueryKeyTransform | None = None
    bias: Tensor | None = None


NO_CONTEXT = AttentionContext()


class Attention(nn.Module):
    """Multi-head self-attention with a fused QKV projection (timm names: ``qkv``, ``proj``).

    A query row whose keys are all blocked would be ``softmax(-inf, ..., -inf) = NaN``; such
    rows are let attend everywhere and their output is zeroed, so a fully padded sequence gives
    finite zeros in every precision.
    """

    def __init__(
        self,
        dim: int,
        num_heads: int,
        qkv_bias: bool = True,
        attn_drop: float = 0.0,
        proj_drop: float = 0.0,
        scale: bool = True,
    ) -> None:
        super().__init__()
        if dim % num_heads != 0:
            raise ValueError(f"width {dim} is not divisible by {num_heads} heads")
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        # ``scale=False`` exists only for the √d experiment; SDPA takes the factor explicitly.
        self.scale = 1.0 / math.sqrt(self.head_dim) if scale else 1.0
        self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias)
        self.attn_drop = attn_drop
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)

    def forward(self, x: Tensor, context: AttentionContext = NO_CONTEXT,
                need_weights: bool = False, cache: LayerCache | None = None
                ) -> tuple[Tensor, Tensor | None]:
        """Return the attended output (B, L, D) and, when asked, the weights (B, H, L, S).

        With a ``cache`` holding P earlier tokens, ``x`` holds only the L new ones: their keys
        and values join the cache and they attend over all S = P + L (``context.mask`` is then
        (B, 1|H, L, S)). Without one, S = L.
        """
        B, L, D = x.shape
        qkv = self.qkv(x).view(B, L, 3, self.num_heads, self.head_dim)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # each (B, H, L, Dh)
        if context.rotary is not None:
            q, k = context.rotary(q, k)
        if cache is not None:
            k, v = cache.extend(k, v)  # (B, H, S, Dh)
        S = k.shape[2]

        mask, bias, row_is_live = context.mask, context.bias, None
        if mask is not None:
            mask = mask.expand(B, -1, L, S) if mask.shape[-2] == 1 else mask
            row_is_live = mask.any(dim=-1, keepdim=True)  # (B, H|1, L, 1)
            mask = mask | ~row_is_live  # a dead row may attend anywhere; zeroed below
        attn_mask = mask
        if bias is not None:
            bias = bias.to(q.dtype)
            attn_mask = bias if mask is None else bias.masked_fill(~mask, float("-inf"))

        dropout = self.attn_drop if self.training else 0.0
        if need_weights:
            out, weights = _reference_attention(q, k, v, attn_mask, self.scale, dropout)
        else:
            out = F.scaled_dot_product_attention(
                q, k, v, attn_mask=attn_mask, dropout_p=dropout, scale=self.scale
            )
            weights = None
        if row_is_live is not None:
            out = out * row_is_live.to(out.dtype)
            if weights is not None:
                weights = weights * row_is_live.to(weights.dtype)

        out = out.transpose(1, 2).reshape(B, L, D)  # (B, H, L, Dh) -> (B, L, D)
        return self.proj_drop(self.proj(out)), weights


def _reference_attention(
    q: Tensor, k: Tensor, v: Tensor, attn_mask: Tensor | None, scale: float, dropout: float
) -> tuple[Tensor, Tensor]:
    """The textbook computation, used when the attention weights themselves are wanted."""
    scores = (q @ k.transpose(-2, -1)) * scale  # (B, H, L, L)
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attn_mask, float("-inf"))
        else:
            scores = scores + attn_mask
    weights = scores.float().softmax(dim=-1).to(q.dtype)
    return F.dropout(weights, dropout) @ v, weights
