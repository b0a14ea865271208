"""The joint model: image tower → projector → image tokens, read with the words by one BERT.

    photo ─ ViT ─ pooled (B, D_img) or patches (B, N, D_img) ─ projector ─ (B, N, D) ─┐
    caption ids (B, T) ─ word + position embeddings ─────────────── (B, T, D) ────────┴─ concat
        → [image tokens; words] (B, N + T, D) → text encoder → word rows → MLM head → logits

The image is optional: without it the encoder reads the words alone. Image tokens carry no text
position, so "no image" and "image present but every image token blocked by ``image_mask``" give
the same word outputs. Logits are computed only where they are needed: with ``target_mask`` the
M masked rows are gathered *before* the V-wide vocabulary projection.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

import torch
from torch import Tensor, nn

from vitbert.models.bert import MLMHead, TextTower
from vitbert.models.config import VitBertConfig
from vitbert.models.vit import build_image_tower, init_transformer_weights
from vitbert.nn import key_padding_mask, seq2seq_mask

WEIGHTS_NAME, CONFIG_NAME = "model.safetensors", "config.json"
TIED_KEY, TIED_SOURCE = "mlm_head.decoder.weight", "text.embeddings.word.weight"
# Bidirectional: every token sees every token (MLM). Seq2seq: a word sees the image and the words
# to its left (generation, Unified VLP); image tokens never see words in either.
AttentionMode = Literal["bidirectional", "seq2seq"]


def _retie(module: VitBert, _incompatible_keys) -> None:
    module.tie_weights()  # a named function, not a lambda: the model stays picklable


class Projector(nn.Module):
    """Linear from the image width to the text width, optionally LayerNorm'd after.

    The norm puts image tokens on the same scale as word embeddings, which helps when many
    patch tokens join a few words.
    """

    def __init__(self, in_dim: int, out_dim: int, norm: bool = False, norm_eps: float = 1e-6):
        super().__init__()
        self.proj = nn.Linear(in_dim, out_dim)
        self.norm = nn.LayerNorm(out_dim, eps=norm_eps) if norm else nn.Identity()

    def forward(self, x: Tensor) -> Tensor:
        return self.norm(self.proj(x))  # (B, N, D_img) -> (B, N, D)


class VitBert(nn.Module):
    """A masked-language model over a caption that can look at its photo.

    ``load_pretrained=False`` skips the timm weights named in ``config.image.pretrained`` (use it
    when our own checkpoint will be loaded over the fresh model; :meth:`from_pretrained` does).
    """

    def __init__(self, config: VitBertConfig, load_pretrained: bool = True) -> None:
        super().__init__()
        self.config = config
        text = config.text
        self.image_tower = build_image_tower(config.image, load_pretrained)
        self.projector = Projector(config.image.dim, text.dim, config.projector_norm,
                                   text.norm_eps)
        self.text = TextTower(text, config.vocab_size)
        self.mlm_head = MLMHead(text.dim, config.vocab_size, text.norm_eps)
        for module in (self.projector, self.text, self.mlm_head):
            init_transformer_weights(module)
        self.tie_weights()
        # Any load_state_dict over this module (or a parent, e.g. a LightningModule) re-ties.
        self.register_load_state_dict_post_hook(_retie)

    def tie_weights(self) -> None:
        """decoder.weight = word-embedding Parameter (identity, not a copy)."""
        self.mlm_head.decoder.weight = self.text.embeddings.word.weight

    @property
    def num_image_tokens(self) -> int:
        return 1 if self.config.image_tokens == "pooled" else self.image_tower.num_patches

    def encode_image(self, images: Tensor) -> Tensor:
        """uint8 [0, 255] or float [0, 1] pixels (B, 3, S, S) → projected image tokens (B, N, D)."""
        pooled, patches = self.image_tower(self.image_tower.normalize(images))
        tokens = pooled[:, None] if self.config.image_tokens == "pooled" else patches
        return self.projector(tokens)  # (B, N, D)

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor,
        images: Tensor | None = None,
        image_mask: Tensor | None = None,
        target_mask: Tensor | None = None,
        return_attention: bool = False,
        attention_mode: AttentionMode = "bidirectional",
    ) -> Tensor | tuple[Tensor, list[Tensor]]:
        """MLM logits: (M, V) at ``target_mask`` positions, else (B, T, V) at every word.

        input_ids (B, T); attention_mask (B, T) True = real token; images (B, 3, S, S) or None;
        image_mask (B, N) True = visible; target_mask (B, T) True = predict here. With
        ``return_attention`` also the per-layer (B, H, L, L) weights; the first N of L are the
        image tokens when an image is given. ``attention_mode="seq2seq"`` lets each word see only
        the image and the words to its left (generation); image tokens never see words in it.
        """
        words = self.text.embeddings(input_ids)  # (B, T, D)
        keep = attention_mask.bool()  # (B, T)
        N = 0
        if images is not None:
            image = self.text.embeddings.image(self.encode_image(images))  # (B, N, D)
            N = image.shape[1]
            if image_mask is None:
                image_mask = keep.new_ones(keep.shape[0], N)
            words = torch.cat((image, words), dim=1)  # (B, L, D), L = N + T
            keep = torch.cat((image_mask.bool(), keep), dim=1)  # (B, L)
        seq2seq = attention_mode == "seq2seq"
        mask = seq2seq_mask(N, keep) if seq2seq else key_padding_mask(keep)  # (B, 1, L|1, L)
        out = self.text.encoder(words, mask, return_attention=return_attention)
        hidden, attention = out if return_attention else (out, None)
        hidden = hidden[:, N:]  # (B, T, D): word rows only
        if target_mask is not None:
            hidden = hidden[target_mask.bool()]  # (M, D)
        logits = self.mlm_head(hidden)  # (M, V) or (B, T, V)
        return (logits, attention) if return_attention else logits

    def save_pretrained(self, folder: str | Path) -> None:
        """``model.safetensors`` + ``config.json``. The tied matrix is stored once."""
        from safetensors.torch import save_file

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        state = {k: v.detach().contiguous() for k, v in self.state_dict().items() if k != TIED_KEY}
        save_file(state, folder / WEIGHTS_NAME, metadata={"format": "pt"})
        (folder / CONFIG_NAME).write_text(json.dumps(self.config.to_dict(), indent=2) + "\n")

    @classmethod
    def from_pretrained(cls, folder: str | Path, map_location: str | torch.device = "cpu"
                        ) -> VitBert:
        """Inverse of :meth:`save_pretrained`; never downloads the timm weights in the config."""
        from safetensors.torch import load_file

        folder = Path(folder)
        config = VitBertConfig.from_dict(json.loads((folder / CONFIG_NAME).read_text()))
        model = cls(config, load_pretrained=False)
        state = load_file(str(folder / WEIGHTS_NAME), device=str(map_location))
        state.setdefault(TIED_KEY, state[TIED_SOURCE])
        model.load_state_dict(state)  # the post-hook re-ties
        return model.to(map_location)
