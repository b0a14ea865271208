"""The BERT text tower: embeddings, the shared pre-norm encoder, the tied MLM head.

Weight tying: one matrix E (V × D) embeds ids at the bottom and, transposed, scores the
vocabulary at the top (``logits = h Eᵀ + b``). Every row of E then gets a gradient every step
(through the softmax's normaliser), not only the rows of the words present in the batch, and the
model has V·D fewer parameters. The tie is by Parameter identity: ``decoder.weight`` IS
``embeddings.word.weight``; anything that replaces Parameters (``load_state_dict(assign=True)``,
``to_empty`` after the meta device) breaks it, so the owner re-ties after every load.

Two layouts (``TextTowerConfig.layout``): ``pre-norm``, the project's own, trained from scratch;
and ``bert``, BERT's, so a pretrained BERT's weights load one to one (:mod:`vitbert.io.bert`):
post-norm blocks, and a LayerNorm over word + position + token type. The modality embedding is
BERT's token-type table: words are segment A, image tokens segment B.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from vitbert.models.config import TextTowerConfig
from vitbert.nn import BlockConfig, Encoder

IMAGE, WORD = 0, 1  # rows of the modality embedding


class TextEmbeddings(nn.Module):
    """Word + learned position + modality ("this is a word" / "this is an image token").

    Image tokens take the modality row only, no text position: the words are numbered from 0
    whether or not an image precedes them, so a caption reads the same with the image blocked
    as with no image at all. With ``norm`` (BERT's layout) the sum is LayerNorm'd, image tokens
    too: they join the sequence as tokens of the second segment."""

    def __init__(self, vocab_size: int, dim: int, max_len: int, dropout: float = 0.0,
                 norm: bool = False, norm_eps: float = 1e-12) -> None:
        super().__init__()
        # No ``padding_idx``: padded keys are masked out, and the tied decoder trains every row.
        self.word = nn.Embedding(vocab_size, dim)
        self.position = nn.Embedding(max_len, dim)
        self.modality = nn.Embedding(2, dim)
        self.norm = nn.LayerNorm(dim, eps=norm_eps) if norm else nn.Identity()
        self.drop = nn.Dropout(dropout)

    def forward(self, input_ids: Tensor, start: int = 0) -> Tensor:
        """(B, T) ids → word embeddings (B, T, D), numbered from ``start`` (> 0: words that
        continue a caption already read, in cached decoding)."""
        T = start + input_ids.shape[1]
        if T > self.position.num_embeddings:
            raise ValueError(f"{T} tokens exceed max_len={self.position.num_embeddings}")
        positions = torch.arange(start, T, device=input_ids.device)
        x = self.word(input_ids) + self.position(positions) + self.modality.weight[WORD]
        return self.drop(self.norm(x))  # (B, T, D)

    def image(self, tokens: Tensor) -> Tensor:
        """(B, N, D) projected image tokens → the same, marked as image tokens."""
        return self.drop(self.norm(tokens + self.modality.weight[IMAGE]))


class TextTower(nn.Module):
    """Embeddings and the encoder; the joint model feeds it [image tokens; words]."""

    def __init__(self, cfg: TextTowerConfig, vocab_size: int) -> None:
        super().__init__()
        bert = cfg.layout == "bert"
        self.embeddings = TextEmbeddings(vocab_size, cfg.dim, cfg.max_len, cfg.dropout,
                                         norm=bert, norm_eps=cfg.norm_eps)
        block = BlockConfig(cfg.dim, cfg.num_heads, cfg.mlp_ratio, drop=cfg.dropout,
                            attn_drop=cfg.dropout, drop_path=cfg.drop_path, norm_first=not bert,
                            norm_eps=cfg.norm_eps)
        self.encoder = Encoder(block, cfg.depth)


class MLMHead(nn.Module):
    """dense D→D, GELU, LayerNorm, then the vocabulary projection with the tied matrix + a bias.
    The M masked rows go in padded to a multiple of 64: bf16 matmuls on a CPU (oneDNN) cache
    kernels per shape, so a new M each step grew a fit's memory by 13 MB a step, to 8 GB."""

    ROW_MULTIPLE = 64

    def __init__(self, dim: int, vocab_size: int, norm_eps: float = 1e-6) -> None:
        super().__init__()
        self.dense = nn.Linear(dim, dim)
        self.act = nn.GELU()
        self.norm = nn.LayerNorm(dim, eps=norm_eps)
        self.decoder = nn.Linear(dim, vocab_size)  # weight replaced by the tie

    def forward(self, h: Tensor) -> Tensor:
        """(…, D) hidden states → (…, V) logits; run it on the M masked rows only."""
        rows, pad = h.shape[0], -h.shape[0] % self.ROW_MULTIPLE if h.dim() == 2 else 0
        h = nn.functional.pad(h, (0, 0, 0, pad)) if pad else h  # (M, D) → (M', D); no copy
        logits = self.decoder(self.norm(self.act(self.dense(h))))
        return logits[:rows] if pad else logits
