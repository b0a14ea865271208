"""The joint model: image tower → projector → image tokens, read with the words by one BERT.

    photo ─ ViT ─ pooled (B, D_img) or patches (B, N, D_img) ─ projector ─ (B, N, D) ─┐
    caption ids (B, T) ─ word + position embeddings ─────────────── (B, T, D) ────────┴─ concat
        → [image tokens; words] (B, N + T, D) → text encoder → word rows → MLM head → logits

The image is optional: without it the encoder reads the words alone. Image tokens carry no text
position, so "no image" and "image present but every image token blocked by ``image_mask``" give
the same word outputs. Logits are computed only where they are needed: with ``target_mask`` the
M masked rows are gathered *before* the V-wide vocabulary projection. With ``config.itc_dim``
the network also embeds photos and captions apart (:meth:`VitBert.embed_images`,
:meth:`VitBert.embed_texts`; :mod:`vitbert.models.contrastive`), for retrieval.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import torch
from torch import Tensor, nn

from vitbert.models.bert import MLMHead, TextTower
from vitbert.models.config import VitBertConfig
from vitbert.models.contrastive import ContrastiveHeads
from vitbert.models.lookup import NeighbourLookup, ReadSharing
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
    a fresh run starts (:func:`vitbert.io.initialize`); stored models load through
    :mod:`vitbert.io` (:meth:`from_pretrained` is a shortcut).
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
        # Each word's neighbours read the photo in one step (binding; off when 0 heads).
        # With a tower that keeps hue apart (image.chroma_dim) it reads the tower's tokens.
        self.lookup = (NeighbourLookup(text.dim, config.neighbour_lookup_heads, config.image.dim,
                                       config.image.chroma_dim, config.lookup_place)
                       if config.neighbour_lookup_heads else None)
        # What the words near a word read, heard by it too (relations; off when 0).
        self.read_sharing = (ReadSharing(text.dim, config.lookup_share_window)
                             if config.lookup_share_window else None)
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

    def tower_tokens(self, images: Tensor) -> Tensor:
        """Pixels (B, 3, S, S) → the tower's output tokens before the projector (B, N, D_img):
        the pooled one or every patch. A frozen tower's are cached (`vitbert.data.features`)."""
        pooled, patches = self.image_tower(self.image_tower.normalize(images))
        return pooled[:, None] if self.config.image_tokens == "pooled" else patches

    def encode_image(self, images: Tensor | None = None,
                     image_features: Tensor | None = None) -> Tensor:
        """uint8 [0, 255] or float [0, 1] pixels (B, 3, S, S), or the tower's cached output
        ``image_features`` (B, N, D_img) → projected image tokens (B, N, D)."""
        return self.projector(self.tower_output(images, image_features))  # (B, N, D)

    def tower_output(self, images: Tensor | None = None,
                     image_features: Tensor | None = None) -> Tensor:
        """:meth:`tower_tokens` of ``images``, or the cached ``image_features`` (B, N, D_img)
        as they are, read in the model's dtype."""
        if (images is None) == (image_features is None):
            raise ValueError("pass exactly one of images= and image_features=")
        if image_features is None:
            return self.tower_tokens(images)
        # Stored in fp16: read in the projector's dtype, as normalize() reads uint8 pixels.
        return image_features.to(self.projector.proj.weight.dtype)

    def lookup_source(self, tower: Tensor, image: Tensor, image_index: Tensor | None = None
                      ) -> Tensor:
        """What the neighbour lookup reads: the tower's tokens (B, N, D_img) when the tower keeps
        hue apart (``image.chroma_dim``; ``tower`` holds the P distinct photos, gathered here by
        ``image_index``), else the image tokens as the words see them (B, N, D)."""
        if not self.config.image.chroma_dim:
            return image
        return tower if image_index is None else tower[image_index]

    @property
    def has_itc(self) -> bool:
        """Whether the network has the contrastive heads (``config.itc_dim`` > 0)."""
        return self.itc is not None

    def _require_itc(self) -> ContrastiveHeads:
        if self.itc is None:
            raise ValueError("this model has no contrastive heads (its net.itc_dim is 0): train "
                             "one with --model.net.itc_dim 128 --model.itc_weight 1.0")
        return self.itc

    def embed_images(self, images: Tensor) -> Tensor:
        """uint8 [0, 255] or float [0, 1] pixels (B, 3, S, S) → unit vectors (B, itc_dim) in the
        contrastive space (:mod:`vitbert.models.contrastive`); a caption's score is the dot
        product with :meth:`embed_texts`."""
        return self.embed_image_tokens(self.tower_tokens(images))

    def embed_image_tokens(self, tokens: Tensor) -> Tensor:
        """The image tower's output (B, N, D_img), computed or cached → unit vectors (B, E):
        :meth:`embed_images` without the tower pass, for training, which has run it."""
        return self._require_itc().embed_image_tokens(tokens)

    def embed_texts(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        """Captions (B, T) with their attention mask (B, T), read alone (no image tokens) →
        unit vectors (B, itc_dim): the [CLS] row, projected. Pass captions unmasked."""
        itc = self._require_itc()
        hidden, _ = self.encode(input_ids, attention_mask)  # (B, T, D), words alone
        return itc.embed_text_cls(hidden[:, 0])  # (B, E)

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor,
        images: Tensor | None = None,
        image_mask: Tensor | None = None,
        target_mask: Tensor | None = None,
        return_attention: bool = False,
        image_features: Tensor | None = None,
        attention_mode: AttentionMode = "bidirectional",
        image_index: Tensor | None = None,
        encoder_grad: bool = True,
    ) -> Tensor | tuple[Tensor, list[Tensor]]:
        """MLM logits: (M, V) at ``target_mask`` positions, else (B, T, V) at every word.

        input_ids (B, T); attention_mask (B, T) True = real token; images (B, 3, S, S) or None;
        image_mask (B, N) True = visible; target_mask (B, T) True = predict here. With
        ``return_attention`` also the per-layer (B, H, L, L) weights; the first N of L are the
        image tokens when an image is given. ``image_features`` (B, N, D_img), the image tower's
        cached output, replaces ``images`` when the tower is frozen. ``attention_mode="seq2seq"``
        lets each word see only the image and the words to its left (generation); image tokens
        never see words in it.

        ``image_index`` (B,) long: caption b sees photo ``image_index[b]``; ``images`` (or
        ``image_features``) then hold the batch's P distinct photos (P, ...), not one per caption.
        Flickr30k has five captions per photo: the tower runs once per photo and its tokens are
        gathered per caption, so logits, loss and gradients are those of passing every caption
        its own copy of the photo (the gather's backward sums the captions' gradients into their
        photo). Only stochastic layers differ, and only in the draw: in training, the image
        tower's drop_path draws once per photo rather than once per caption.

        ``encoder_grad=False`` runs the joint encoder without gradient: a loss on these logits
        then trains the neighbour lookup, the tower and the head, not the encoder (the twin
        contrast, :mod:`vitbert.lit.twins`).
        """
        hidden, attention = self.encode(input_ids, attention_mask, images, image_mask,
                                        return_attention, image_features, attention_mode,
                                        image_index, encoder_grad)
        if target_mask is not None:
            hidden = hidden[target_mask.bool()]  # (M, D)
        logits = self.mlm_head(hidden)  # (M, V) or (B, T, V)
        return (logits, attention) if return_attention else logits

    def encode(self, input_ids: Tensor, attention_mask: Tensor, images: Tensor | None = None,
               image_mask: Tensor | None = None, return_attention: bool = False,
               image_features: Tensor | None = None,
               attention_mode: AttentionMode = "bidirectional", image_index: Tensor | None = None,
               encoder_grad: bool = True) -> tuple[Tensor, list[Tensor] | None]:
        """The encoder's word rows (B, T, D), before any head, and the attention weights when
        asked (else None); arguments as :meth:`forward`'s. Row 0 is the caption's [CLS], which
        has read every word and image token: the image-text matching head's input
        (:mod:`vitbert.lit.objectives`). With ``config.neighbour_lookup_heads`` each word's row
        also holds what its neighbours read from the image (:mod:`vitbert.models.lookup`), and with
        ``config.lookup_share_window`` what the words near it read."""
        words = embedded = self.text.embeddings(input_ids)  # (B, T, D)
        keep = attention_mask.bool()  # (B, T)
        if image_index is not None and images is None and image_features is None:
            raise ValueError("image_index says which photo each caption sees: pass the photos "
                             "too (images= or image_features=)")
        N = 0
        if images is not None or image_features is not None:
            tower = self.tower_output(images, image_features)  # (P, N, D_img), P = B w/o index
            image = self.projector(tower)  # (P, N, D)
            if image_index is not None:
                image = image[image_index]  # (B, N, D): each caption's photo
            image = self.text.embeddings.image(image)  # dropout per caption, as without index
            N = image.shape[1]
            if image_mask is None:
                image_mask = keep.new_ones(keep.shape[0], N)
            words = torch.cat((image, words), dim=1)  # (B, L, D), L = N + T
            keep = torch.cat((image_mask.bool(), keep), dim=1)  # (B, L)
        seq2seq = attention_mode == "seq2seq"
        mask = seq2seq_mask(N, keep) if seq2seq else key_padding_mask(keep)  # (B, 1, L|1, L)
        with torch.set_grad_enabled(encoder_grad and torch.is_grad_enabled()):
            out = self.text.encoder(words, AttentionContext(mask), return_attention)
        hidden, attention = out if return_attention else (out, None)
        hidden = hidden[:, N:]  # (B, T, D): word rows only
        if self.lookup is not None and N:
            source = self.lookup_source(tower, image, image_index)  # (B, N, ·)
            reads = self.lookup(embedded, source, image_mask, right_context=not seq2seq,
                                hidden=hidden)  # (B, T, D)
            hidden = hidden + self.shared_reads(reads, causal=seq2seq)
        return hidden, attention

    def shared_reads(self, reads: Tensor, causal: bool) -> Tensor:
        """The lookup's reads (B, T, D), each word's with what its near words read added when
        the model shares them (``config.lookup_share_window``)."""
        if self.read_sharing is None:
            return reads
        return reads + self.read_sharing(reads, causal=causal)

    def save_pretrained(self, folder: str | Path) -> None:
        """``model.safetensors`` + ``config.json``, the tied matrix once (:mod:`vitbert.io`)."""
        from vitbert.io.files import write_exported

        write_exported(self, folder)

    @classmethod
    def from_pretrained(cls, folder: str | Path, map_location: str | torch.device = "cpu"
                        ) -> VitBert:
        """Inverse of :meth:`save_pretrained`; never loads the timm weights in the config."""
        from vitbert.io.files import build_model, read_checkpoint

        return build_model(cls, read_checkpoint(folder), map_location)
