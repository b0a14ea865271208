"""The from-scratch pre-norm transformer encoder both towers are built from.

Shape legend, used in comments throughout the project:

    B   batch size
    N   image tokens (patches, or 1 for a pooled image token)
    T   text tokens (word pieces, padded per batch)
    L   sequence length seen by an encoder (N, T, or N + T)
    D   model width
    H   attention heads
    Dh  head width (D / H)
    V   vocabulary size
    M   masked positions in a batch (the MLM targets)

Mask convention, the only one in the project: a **boolean** tensor, ``True`` = "this query may
attend to this key", broadcastable to ``(B, H, L, L)``. A key-padding mask is ``(B, 1, 1, L)``.
Masks combine with :func:`combine_masks` ("blocked if any rule blocks" = logical AND of the
"may attend" masks). ``nn.MultiheadAttention``'s ``key_padding_mask`` uses the opposite polarity
(True = ignore); convert at that boundary with ``~mask``.
"""

from vitbert.nn.attention import (
    Attention,
    AttentionContext,
    KVCache,
    LayerCache,
    combine_masks,
    key_padding_mask,
    local_mask,
    seq2seq_mask,
)
from vitbert.nn.encoder import Block, BlockConfig, Encoder
from vitbert.nn.mlp import MLP, SwiGLU, build_mlp
from vitbert.nn.position import LearnedPosition, grid_coordinates

__all__ = [
    "MLP",
    "Attention",
    "AttentionContext",
    "Block",
    "BlockConfig",
    "Encoder",
    "KVCache",
    "LayerCache",
    "LearnedPosition",
    "SwiGLU",
    "build_mlp",
    "combine_masks",
    "grid_coordinates",
    "key_padding_mask",
    "local_mask",
    "seq2seq_mask",
]
