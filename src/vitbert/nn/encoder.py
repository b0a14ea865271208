"""The transformer block and the encoder stack, shared by the image and the text tower.

Pre-norm (ViT, ModernBERT): ``x = x + Attn(LN(x)); x = x + MLP(LN(x))``, and a final LayerNorm
after the stack. The residual path from input to output is never normalised, so gradients reach
the first block undiminished and deep stacks train without a warm-up crutch. Post-norm
(``LN(x + Attn(x))``, the original Transformer and BERT) is the layout of a pretrained BERT's
weights, which the text tower loads in that layout (``TextTowerConfig.layout``).
"""

from __future__ import annotations

from dataclasses import dataclass

from timm.layers import DropPath
from torch import Tensor, nn

from vitbert.nn.attention import NO_CONTEXT, Attention, AttentionContext, KVCache, LayerCache
from vitbert.nn.mlp import MLPKind, build_mlp


@dataclass(frozen=True)
class BlockConfig:
    """The settings every block of one encoder shares (nanoGPT's ``GPTConfig``, for one stack)."""

    dim: int
    """Token width D."""
    num_heads: int
    """Attention heads H; the head width D / H must be whole."""
    mlp_ratio: float = 4.0
    """Hidden width of the feed-forward network as a multiple of D."""
    mlp: MLPKind = "gelu"
    """Feed-forward kind: ``gelu`` (BERT, ViT), ``relu`` (2017) or ``swiglu`` (gated)."""
    qkv_bias: bool = True
    """Whether the fused q/k/v projection has a bias."""
    drop: float = 0.0
    """Dropout after the attention output projection and in the feed-forward network."""
    attn_drop: float = 0.0
    """Dropout on the attention weights."""
    drop_path: float = 0.0
    """Stochastic depth: the largest rate, reached at the last block of an :class:`Encoder`."""
    norm_first: bool = True
    """Pre-norm (ViT, ModernBERT) when true; post-norm (original Transformer, BERT) when false."""
    scale: bool = True
    """Scale attention scores by 1/sqrt(Dh); false only for the scaling experiment."""
    norm_eps: float = 1e-6
    """LayerNorm epsilon (timm's ViT: 1e-6; torch's default: 1e-5)."""


class Block(nn.Module):
    """One encoder block, with timm's names (``norm1``, ``attn``, ``norm2``, ``mlp``).

    ``drop_path`` overrides ``config.drop_path`` for this block (the encoder ramps it by depth).
    """

    def __init__(self, config: BlockConfig, drop_path: float | None = None) -> None:
        super().__init__()
        c = config
        self.norm_first = c.norm_first
        self.norm1 = nn.LayerNorm(c.dim, eps=c.norm_eps)
        self.attn = Attention(c.dim, c.num_heads, c.qkv_bias, c.attn_drop, c.drop, c.scale)
        self.norm2 = nn.LayerNorm(c.dim, eps=c.norm_eps)
        self.mlp = build_mlp(c.mlp, c.dim, c.mlp_ratio, c.drop)
        rate = c.drop_path if drop_path is None else drop_path
        self.drop_path = DropPath(rate) if rate > 0 else nn.Identity()

    def forward(self, x: Tensor, context: AttentionContext = NO_CONTEXT,
                need_weights: bool = False, cache: LayerCache | None = None
                ) -> tuple[Tensor, Tensor | None]:
        if self.norm_first:
            attended, weights = self.attn(self.norm1(x), context, need_weights, cache)
            x = x + self.drop_path(attended)
            x = x + self.drop_path(self.mlp(self.norm2(x)))
        else:
            attended, weights = self.attn(x, context, need_weights, cache)
            x = self.norm1(x + self.drop_path(attended))
            x = self.norm2(x + self.drop_path(self.mlp(x)))
        return x, weights


class Encoder(nn.Module):
    """``depth`` blocks and a final LayerNorm (identity for post-norm, which normalises inside).

    Stochastic depth rises linearly from 0 at the first block to ``config.drop_path`` at the last.
    """

    def __init__(self, config: BlockConfig, depth: int) -> None:
        super().__init__()
        rates = [config.drop_path * i / max(depth - 1, 1) for i in range(depth)]
        self.blocks = nn.ModuleList(Block(config, drop_path=rate) for rate in rates)
        final_norm = config.norm_first  # post-norm blocks already end in a LayerNorm
        self.norm = nn.LayerNorm(config.dim, eps=config.norm_eps) if final_norm else nn.Identity()

    def forward(self, x: Tensor, context: AttentionContext = NO_CONTEXT,
                return_attention: bool = False, cache: KVCache | None = None
                ) -> Tensor | tuple[Tensor, list[Tensor]]:
        """x: (B, L, D) → (B, L, D); every block reads the same ``context`` (mask, positions).

        With a ``cache`` of P earlier tokens, x holds the L new ones and ``context.mask`` is
        (B, 1, L, P + L).
        """
        attention = []
        layers = cache.layers if cache is not None else [None] * len(self.blocks)
        for block, layer in zip(self.blocks, layers, strict=True):
            x, weights = block(x, context, need_weights=return_attention, cache=layer)
            attention.append(weights)
        x = self.norm(x)
        return (x, attention) if return_attention else x
