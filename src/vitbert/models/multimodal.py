"""The joint model: image tower → projector → image tokens, read with the words by one BERT.

    photo ─ ViT ─ pooled (P, 1, D_img) or patches (P, N, D_img) ─ projector ─ (P, N, D) ─┐
    caption ids (B, T) ─ word + position embeddings ──────────────── (B, T, D) ─────────┴─ concat
        → [image tokens; words] (B, N + T, D) → text encoder → word rows → MLM head → logits

The image is optional: without it the encoder reads the words alone. Image tokens carry no text
position, so "no image" and "image present but every image token blocked" give the same word
outputs. The photos reach the model as their **image features**, the image tower's output
(P, N, D_img) for the P distinct photos of a batch (:meth:`VitBert.image_features` runs the tower;
a frozen tower's are read from its cache), with ``image_index`` (B,), the photo each caption
sees: Flickr30k has five captions per photo, and the tower runs once per photo; gathered per
caption, logits, loss and gradients are those of passing every caption its own copy of the photo
(the gather's backward sums the captions' gradients into their photo). Logits are computed only
where they are needed: with ``target_mask`` the M masked rows are gathered *before* the V-wide
vocabulary projection. With ``config.itc_dim`` the network also embeds photos and captions apart
(:meth:`VitBert.embed_images`, :meth:`VitBert.embed_texts`; :mod:`vitbert.models.contrastive`),
for retrieval. :func:`build_network` builds the network a config describes: this one, or what its
``extension`` builds (:class:`~vitbert.models.config.NetworkExtension`).
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor, nn

from vitbert.models.bert import MLMHead, TextTower
from vitbert.models.config import VitBertConfig
from vitbert.models.contrastive import ContrastiveHeads
from vitbert.models.vit import build_image_tower, init_transformer_weights
from vitbert.nn import AttentionContext, key_padding_mask, seq2seq_mask

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

    Construction loads nothing: the weights named in ``config.image.pretrained`` are loaded when
    a fresh run starts (:func:`vitbert.io.initialize`); stored models are read and written by
    :mod:`vitbert.io` (``load_network``, ``write_exported``).
    """

    def __init__(self, config: VitBertConfig) -> None:
        super().__init__()
        self.config = config
        text = config.text
        self.image_tower = build_image_tower(config.image)
        self.projector = Projector(config.image.dim, text.dim, config.projector_norm,
                                   text.norm_eps)
        self.text = TextTower(text, config.vocab_size)
        self.mlm_head = MLMHead(text.dim, config.vocab_size, text.norm_eps)
        # The contrastive score (ITC) lives in the network, not beside it as the training heads
        # do: retrieval uses it, so export, load_model and init_from carry it like any weight.
        self.itc = (ContrastiveHeads(config.image.dim, text.dim, config.itc_dim)
                    if config.itc_dim else None)
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

    def image_features(self, images: Tensor) -> Tensor:
        """uint8 [0, 255] or float [0, 1] pixels (P, 3, S, S) → the image features, the tower's
        output before the projector (P, N, D_img): the pooled token or every patch. A frozen
        tower's are cached (`vitbert.lit.frozen`)."""
        return self._features_of(self.image_tower(self.image_tower.normalize(images)))

    def image_features_from_backbone(self, maps: Tensor) -> Tensor:
        """:meth:`image_features` from a hybrid tower's CNN output (P, C, h, w), cached when the
        CNN is frozen (stored in fp16: read in the model's dtype)."""
        maps = maps.to(self.projector.proj.weight.dtype)
        return self._features_of(self.image_tower.forward_backbone_features(maps))

    def _features_of(self, tower_output: tuple[Tensor, Tensor]) -> Tensor:
        pooled, patches = tower_output  # (P, D_img), (P, N, D_img)
        return pooled[:, None] if self.config.image_tokens == "pooled" else patches

    def image_tokens(self, image_features: Tensor, image_index: Tensor | None = None) -> Tensor:
        """The image tokens each caption reads (B, N, D): the image features projected to the
        text width, gathered per caption (``image_index``; None: caption b sees photo b), marked
        as image tokens (and dropped out per caption)."""
        features = image_features.to(self.projector.proj.weight.dtype)  # cached in fp16
        tokens = self.projector(features)  # (P, N, D)
        if image_index is not None:
            tokens = tokens[image_index]  # (B, N, D): each caption's photo
        return self.text.embeddings.image(tokens)  # dropout per caption, as without index

    @property
    def has_itc(self) -> bool:
        """Whether the network has the contrastive heads (``config.itc_dim`` > 0)."""
        return self.itc is not None

    def _require_itc(self) -> ContrastiveHeads:
        if self.itc is None:
            raise ValueError("this model has no contrastive heads (its net.itc_dim is 0): train "
                             "one with --model.net.itc_dim 128 and the contrastive objective")
        return self.itc

    def embed_images(self, images: Tensor) -> Tensor:
        """uint8 [0, 255] or float [0, 1] pixels (B, 3, S, S) → unit vectors (B, itc_dim) in the
        contrastive space (:mod:`vitbert.models.contrastive`); a caption's score is the dot
        product with :meth:`embed_texts`."""
        return self.embed_image_features(self.image_features(images))

    def embed_image_features(self, image_features: Tensor) -> Tensor:
        """Image features (B, N, D_img), computed or cached → unit vectors (B, E):
        :meth:`embed_images` without the tower pass, for training, which has run it."""
        return self._require_itc().embed_image_features(image_features)

    def embed_texts(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        """Captions (B, T) with their attention mask (B, T), read alone (no image tokens) →
        unit vectors (B, itc_dim): the [CLS] row, or the mean of the caption's rows
        (``config.itc_text_pool``), projected. Pass captions unmasked."""
        itc = self._require_itc()
        hidden, _ = self.encode(input_ids, attention_mask)  # (B, T, D), words alone
        if self.config.itc_text_pool == "cls":
            return itc.embed_text(hidden[:, 0])  # (B, E)
        keep = attention_mask[..., None].to(hidden.dtype)  # (B, T, 1)
        return itc.embed_text((hidden * keep).sum(dim=1) / keep.sum(dim=1))  # (B, E)

    def forward(self, input_ids: Tensor, attention_mask: Tensor,
                image_features: Tensor | None = None, image_index: Tensor | None = None,
                target_mask: Tensor | None = None, mode: AttentionMode = "bidirectional",
                return_attention: bool = False, image_visible: Tensor | None = None
                ) -> Tensor | tuple[Tensor, list[Tensor]]:
        """MLM logits: (M, V) at ``target_mask`` positions (B, T) True = predict here, else
        (B, T, V) at every word; with ``return_attention`` also the per-layer (B, H, L, L)
        weights, whose first N of L are the image tokens when image features are given.
        Arguments as :meth:`encode`'s."""
        hidden, attention = self.encode(input_ids, attention_mask, image_features, image_index,
                                        image_visible, mode, return_attention)
        if target_mask is not None:
            hidden = hidden[target_mask.bool()]  # (M, D)
        logits = self.mlm_head(hidden)  # (M, V) or (B, T, V)
        return (logits, attention) if return_attention else logits

    def encode(self, input_ids: Tensor, attention_mask: Tensor,
               image_features: Tensor | None = None, image_index: Tensor | None = None,
               image_visible: Tensor | None = None, mode: AttentionMode = "bidirectional",
               return_attention: bool = False) -> tuple[Tensor, list[Tensor] | None]:
        """The encoder's word rows (B, T, D), before any head, and the attention weights when
        asked (else None).

        input_ids (B, T); attention_mask (B, T) True = real token; ``image_features`` (P, N,
        D_img) the photos the captions see, or None for the words alone, caption b seeing photo
        ``image_index[b]`` (None: photo b); ``image_visible`` (B, N) the image tokens each
        caption may attend to (None: every one). ``mode="seq2seq"`` lets each word see only the
        image and the words to its left (generation); image tokens never see words in it. Row 0
        is the caption's [CLS], which has read every word and image token.
        """
        x = self.text.embeddings(input_ids)  # (B, T, D)
        keep = attention_mask.bool()  # (B, T)
        N = 0
        if image_features is not None:
            image = self.image_tokens(image_features, image_index)  # (B, N, D)
            N = image.shape[1]
            visible = image_visible if image_visible is not None else keep.new_ones(len(keep), N)
            x = torch.cat((image, x), dim=1)  # (B, L, D), L = N + T
            keep = torch.cat((visible.bool(), keep), dim=1)  # (B, L)
        mask = seq2seq_mask(N, keep) if mode == "seq2seq" else key_padding_mask(keep)  # (B,1,·,L)
        out = self.text.encoder(x, AttentionContext(mask), return_attention)
        hidden, attention = out if return_attention else (out, None)
        return hidden[:, N:], attention  # (B, T, D): the word rows only


def build_network(config: VitBertConfig) -> VitBert:
    """The network ``config`` describes: :class:`VitBert`, or what its ``extension`` builds."""
    return config.extension.build(config) if config.extension else VitBert(config)
