"""Matmul FLOPs of one training step, counted analytically from the configuration.

Convention (the one MFU figures use, PaLM appendix B / Megatron):

* a matmul (m × k) @ (k × n) costs ``2·m·n·k`` FLOPs (one multiply and one add per term);
* a convolution is a matmul over its im2col rows: ``2 · (B·H_out·W_out) · C_out · (C_in·kh·kw)``;
* attention adds its two batched matmuls per layer, ``Q Kᵀ`` and ``softmax·V``:
  ``2 · 2·B·H·L·L·Dh = 4·B·L²·D`` (dense over padding: the kernels compute it);
* one transformer block over R = B·L rows, width D, MLP ratio r:
  ``qkv 6·R·D² + proj 2·R·D² + MLP 4r·R·D² + attention 4·B·L²·D``  (= 24·R·D² + 4·B·L²·D at r = 4);
* backward costs twice the forward (grad w.r.t. the input and w.r.t. the weight, one matmul each),
  so a training step is ``3 ×`` the forward. (The first layer needs no input gradient, so this
  slightly over-counts the pixel-side conv; the convention keeps it.)

Element-wise work (LayerNorm, GELU, softmax, the optimizer, embeddings) is not counted: it moves
memory rather than doing matmul work, and it is exactly what keeps a small model off the peak.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from vitbert.models.bert import MLMHead
from vitbert.models.config import VitBertConfig

BACKWARD_FACTOR = 2  # backward = 2 × forward; a step = (1 + BACKWARD_FACTOR) × forward


def matmul_flops(m: int, n: int, k: int) -> int:
    """(m × k) @ (k × n): 2·m·n·k."""
    return 2 * m * n * k


def linear_flops(rows: int, in_features: int, out_features: int) -> int:
    """nn.Linear on ``rows`` input rows (the bias add is not a matmul)."""
    return matmul_flops(rows, out_features, in_features)


def conv2d_flops(batch: int, out_hw: tuple[int, int], in_chans: int, out_chans: int,
                 kernel: int) -> int:
    """nn.Conv2d (groups = 1) as im2col + matmul."""
    return matmul_flops(batch * out_hw[0] * out_hw[1], out_chans, in_chans * kernel * kernel)


def attention_flops(batch: int, heads: int, q_len: int, k_len: int, head_dim: int) -> int:
    """The two attention matmuls of one layer: scores Q Kᵀ and the weighted sum of V."""
    return 2 * matmul_flops(batch * heads * q_len, k_len, head_dim)


def block_flops(batch: int, length: int, dim: int, heads: int, mlp_ratio: float = 4.0) -> int:
    """One pre-norm block (fused qkv, output proj, MLP D → rD → D) over (batch, length) tokens."""
    rows, hidden = batch * length, int(dim * mlp_ratio)
    return (linear_flops(rows, dim, 3 * dim) + attention_flops(batch, heads, length, length,
                                                                 dim // heads)
            + linear_flops(rows, dim, dim) + linear_flops(rows, dim, hidden)
            + linear_flops(rows, hidden, dim))


def encoder_flops(batch: int, length: int, dim: int, heads: int, depth: int,
                  mlp_ratio: float = 4.0) -> int:
    return depth * block_flops(batch, length, dim, heads, mlp_ratio)


@dataclass
class StepFlops:
    """Forward matmul FLOPs by part, and the step total (forward + backward)."""

    forward: dict[str, int] = field(default_factory=dict)

    @property
    def forward_total(self) -> int:
        return sum(self.forward.values())

    @property
    def step_total(self) -> int:
        return (1 + BACKWARD_FACTOR) * self.forward_total


def image_tower_flops(config: VitBertConfig, batch: int) -> dict[str, int]:
    """Patch embedding and encoder of the ViT (kinds ``vit`` and ``conv_stem``)."""
    img = config.image
    S, P, D = img.image_size, img.patch_size, img.dim
    grid = (S // P, S // P)
    n = grid[0] * grid[1]
    out: dict[str, int] = {}
    hue = getattr(config.extension, "hue_dim", 0)  # the shapes data's hue-apart tower
    if img.kind == "vit":
        out["patch_embed"] = conv2d_flops(batch, grid, img.in_chans, D, P)
    elif img.kind == "conv_stem":
        h = img.stem_hidden_dim
        out["patch_embed"] = (conv2d_flops(batch, (S, S), 1 if hue else img.in_chans, h, 3)
                              + conv2d_flops(batch, (S, S), h, h, 3)
                              + conv2d_flops(batch, grid, h, D, P))
        if hue:  # its PatchChroma: two 1×1 convs per pixel, one per patch
            from vitbert.shapes.model import PatchChroma

            c = PatchChroma.HIDDEN
            out["patch_embed"] += (conv2d_flops(batch, (S, S), img.in_chans, c, 1)
                                   + conv2d_flops(batch, (S, S), c, c, 1)
                                   + conv2d_flops(batch, grid, c, hue, 1))
    else:
        raise NotImplementedError(f"no analytic FLOP count for image tower kind {img.kind!r}")
    length = n + int(img.class_token)
    out["image_encoder"] = encoder_flops(batch, length, D, img.num_heads, img.depth,
                                         img.mlp_ratio)
    return out


def num_image_tokens(config: VitBertConfig) -> int:
    img = config.image
    return 1 if config.image_tokens == "pooled" else (img.image_size // img.patch_size) ** 2


def vitbert_step_flops(config: VitBertConfig, batch: int, text_len: int, targets: int | None,
                       with_image: bool = True, photos: int | None = None) -> StepFlops:
    """Our model: image tower → projector → text encoder over N + T → MLM head on ``targets``
    rows (the masked positions), or on every word row (B·T) when ``targets`` is None. The tower
    and projector run on ``photos`` pictures: the batch's distinct ones (``image_index``), one
    per caption when None."""
    text, V = config.text, config.vocab_size
    D = text.dim
    f = StepFlops()
    n = 0
    if with_image:
        photos = batch if photos is None else photos
        f.forward.update(image_tower_flops(config, photos))
        n = num_image_tokens(config)
        f.forward["projector"] = linear_flops(photos * n, config.image.dim, D)
    f.forward["text_encoder"] = encoder_flops(batch, n + text_len, D, text.num_heads, text.depth,
                                              text.mlp_ratio)
    if with_image and getattr(config.extension, "lookup_heads", 0):
        # The shapes network's reader, after the encoder: it projects the image tokens again.
        f.forward["lookup"] = lookup_flops(config, batch, text_len, n) + f.forward["projector"]
    pad = MLMHead.ROW_MULTIPLE  # the head computes the masked rows padded to a multiple of this
    rows = batch * text_len if targets is None else -(-targets // pad) * pad
    f.forward["mlm_head"] = linear_flops(rows, D, D) + linear_flops(rows, D, V)
    return f


def lookup_flops(config: VitBertConfig, batch: int, text_len: int, image_tokens: int) -> int:
    """The neighbour lookup (:mod:`vitbert.shapes.model`) over every word row: its query from
    two neighbours (and, over a tower that keeps hue apart, the word's hidden state), keys and
    values per caption's image tokens, one attention, the output projection."""
    D, rows = config.text.dim, batch * text_len
    tokens = batch * image_tokens  # read per caption: its photo's tokens, gathered
    C = config.extension.hue_dim
    total = linear_flops(rows, 2 * D, D) + linear_flops(rows, D, D)  # query, out
    if C:  # hue → half the keys and values, form → the other halves; the hidden state's query
        total += (linear_flops(tokens, C, D) + linear_flops(tokens, config.image.dim - C, D)
                  + linear_flops(rows, D, D))
    else:
        total += linear_flops(tokens, D, 2 * D)
    H = config.extension.lookup_heads
    return total + attention_flops(batch, H, text_len, image_tokens, D // H)


def reference_step_flops(config: VitBertConfig, batch: int, text_len: int) -> StepFlops:
    """The timm + transformers reference: same towers, BERT's MLM head on all B·(N + T) rows
    (``BertForMaskedLM`` scores every position it is given, image positions included)."""
    f = vitbert_step_flops(config, batch, text_len, targets=0)
    rows = batch * (num_image_tokens(config) + text_len)
    f.forward["mlm_head"] = (linear_flops(rows, config.text.dim, config.text.dim)
                             + linear_flops(rows, config.text.dim, config.vocab_size))
    return f
