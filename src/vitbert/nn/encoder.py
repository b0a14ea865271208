"""The transformer block and the encoder stack, shared by the image and the text tower.

Pre-norm (ViT, ModernBERT): ``x = x + Attn(LN(x)); x = x + MLP(LN(x))``, and a final LayerNorm
after the stack. The residual path from input to output is never normalised, so gradients reach
the first block undiminished and deep stacks train without a warm-up crutch. Post-norm
(``LN(x + Attn(x))``, the original Transformer and BERT) is kept only for comparison experiments.
"""

from __future__ import annotations

from torch import Tensor, nn

from vitbert.nn.attention import Attention, QueryKeyTransform
from vitbert.nn.mlp import MLPKind, build_mlp


class DropPath(nn.Module):
    """Stochastic depth: in training, drop a whole residual branch per sample, rescale the rest."""

    def __init__(self, p: float = 0.0) -> None:
        super().__init__()
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        if self.p == 0.0 or not self.training:
            return x
        keep = x.new_empty(x.shape[0], *([1] * (x.ndim - 1))).bernoulli_(1.0 - self.p)
        return x * keep / (1.0 - self.p)


class Block(nn.Module):
    """One encoder block, with timm's names (``norm1``, ``attn``, ``norm2``, ``mlp``)."""

    def __init__(
        self,
        dim: int,
        num_heads: int,
        mlp_ratio: float = 4.0,
        mlp: MLPKind = "gelu",
        qkv_bias: bool = True,
        drop: float = 0.0,
        attn_drop: float = 0.0,
        drop_path: float = 0.0,
        norm_first: bool = True,
        scale: bool = True,
        norm_eps: float = 1e-6,
    ) -> None:
        super().__init__()
        self.norm_first = norm_first
        self.norm1 = nn.LayerNorm(dim, eps=norm_eps)
        self.attn = Attention(dim, num_heads, qkv_bias, attn_drop, drop, scale)
        self.norm2 = nn.LayerNorm(dim, eps=norm_eps)
        self.mlp = build_mlp(mlp, dim, mlp_ratio, drop)
        self.drop_path = DropPath(drop_path)

    def forward(
        self,
        x: Tensor,
        mask: Tensor | None = None,
        rotary: QueryKeyTransform | None = None,
        bias: Tensor | None = None,
        need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        if self.norm_first:
            attended, weights = self.attn(self.norm1(x), mask, rotary, bias, need_weights)
            x = x + self.drop_path(attended)
            x = x + self.drop_path(self.mlp(self.norm2(x)))
        else:
            attended, weights = self.attn(x, mask, rotary, bias, need_weights)
            x = self.norm1(x + self.drop_path(attended))
            x = self.norm2(x + self.drop_path(self.mlp(x)))
        return x, weights


class Encoder(nn.Module):
    """``depth`` blocks and a final LayerNorm (identity for post-norm, which normalises inside).

    Stochastic depth rises linearly from 0 at the first block to ``drop_path`` at the last.
    """

    def __init__(
        self,
        dim: int,
        depth: int,
        num_heads: int,
        mlp_ratio: float = 4.0,
        mlp: MLPKind = "gelu",
        qkv_bias: bool = True,
        drop: float = 0.0,
        attn_drop: float = 0.0,
        drop_path: float = 0.0,
        norm_first: bool = True,
        scale: bool = True,
        norm_eps: float = 1e-6,
    ) -> None:
        super().__init__()
        rates = [drop_path * i / max(depth - 1, 1) for i in range(depth)]
        self.blocks = nn.ModuleList(
            Block(dim, num_heads, mlp_ratio, mlp, qkv_bias, drop, attn_drop, rate, norm_first,
                  scale, norm_eps)
            for rate in rates
        )
        self.norm = nn.LayerNorm(dim, eps=norm_eps) if norm_first else nn.Identity()

    def forward(
        self,
        x: Tensor,
        mask: Tensor | None = None,
        rotary: QueryKeyTransform | None = None,
        bias: Tensor | None = None,
        return_attention: bool = False,
    ) -> Tensor | tuple[Tensor, list[Tensor]]:
        """x: (B, L, D); mask: boolean, broadcastable to (B, H, L, L). Returns (B, L, D)."""
        attention = []
        for block in self.blocks:
            x, weights = block(x, mask, rotary, bias, need_weights=return_attention)
            attention.append(weights)
        x = self.norm(x)
        return (x, attention) if return_attention else x
