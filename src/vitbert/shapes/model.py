"""The shapes data's binding levers in the network: a tower that keeps hue apart from form, and
a neighbour lookup that reads the photo again for each word. :class:`BindingLevers`, a
:class:`~vitbert.models.config.NetworkExtension` a config names, builds :class:`BindingVitBert`,
the core's :class:`~vitbert.models.VitBert` with that tower and that reader; no core module knows
them.

**The tower** (:class:`HueFormViT`): the conv stem reads luminance (:class:`LuminanceStem`), and
the last ``hue_dim`` channels of each output token hold the patch's hue instead, from 1×1 convs
over its pixels, averaged (:class:`PatchChroma`), so a form's features cannot depend on its hue
and a reader can take either without the other. With ``places``, the last two of those channels
hold the patch's column and row.

**The neighbour lookup** (:class:`NeighbourLookup`): each word asks the photo about the words
beside it, in one step. Why: to fill "a small [MASK] circle left of a large blue square" by
*binding*, the hidden word must find the object its neighbour names ("circle") and read that
object's colour. In the joint encoder that is two steps, one per layer: gather the neighbour's
word into the [MASK] row, then attend from there to the object. A 2-block encoder trained by
masked-language modelling rarely finds that circuit: it fills by elimination instead (the colour
the caption has not named yet, docs/binding.md). The lookup gives each word the second step
directly. Its query is made from the embeddings of the words to its left and right; its keys and
values from the image tokens; what it reads is added to the word's final hidden state, before
the MLM head. No word list: which neighbours matter, and what to read, is learnt. Under the
seq2seq mask (writing left to right) the right neighbour is not yet written, so only the left
one forms the query.

With the hue-apart tower, half the lookup's heads find a patch by its hue and read its form, the
other half find it by its form and read its hue: a reading that carries what it was found by
lets the MLM head, fitted on the (hue, form) pairs of training, answer from the pair ("a purple
[MASK]" is never a circle in training). Its query also holds the word's own final hidden state,
so a word can ask for more than its neighbours name. With ``lookup_place`` the lookup also says
*where* it looked (each head's attention-weighted mean of the patches' column and row, in
channels of its own), and :class:`ReadSharing` lets each word hear what the words near it read:
a relation word ("left") then hears where the two objects its caption names are.

The twin contrast (:mod:`vitbert.shapes.twins`) and focused copies (:mod:`vitbert.shapes.focus`)
train these parts; what each lever bought is measured in docs/binding.md.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vitbert.models import (
    ConfigError,
    ConvStem,
    ImageTowerConfig,
    ViT,
    VitBert,
    VitBertConfig,
)
from vitbert.models.config import NetworkExtension
from vitbert.models.vit import init_transformer_weights

PLACE_DIM = 2  # column, row
# Files written before the network took extensions held these levers as settings of the core's
# config (old name: today's) and their weights at the network's top level (old prefix: today's).
PRE_EXTENSION_FIELDS = {"chroma_dim": "hue_dim", "chroma_place": "places",
                        "neighbour_lookup_heads": "lookup_heads",
                        "lookup_share_window": "share_window", "lookup_place": "lookup_place"}
PRE_EXTENSION_WEIGHTS = {"lookup.": "reader.lookup.", "read_sharing.": "reader.sharing."}


class BindingLevers(NetworkExtension):
    """The network side of the shapes data's binding levers (module doc), as a config names it:

        model:
          net:
            extension:
              class_path: vitbert.shapes.BindingLevers
              init_args: {hue_dim: 32, places: true, lookup_heads: 4, share_window: 6,
                          lookup_place: true}

    Args:
        hue_dim: channels of each image token that hold its patch's hue (the tower's stem reads
            luminance); 0 = the core's tower, unchanged. Needs ``image.kind: conv_stem``.
        places: the last two of those channels hold the patch's column and row, in [-1, 1].
        lookup_heads: heads of the neighbour lookup; 0 = no lookup (and no reader).
        share_window: each word also hears what the lookup read for the words up to this many
            pieces away (only those to its left when writing); 0 = off.
        lookup_place: the lookup's read also says where it looked; needs ``places``.
    """

    def __init__(self, hue_dim: int = 32, places: bool = True, lookup_heads: int = 4,
                 share_window: int = 6, lookup_place: bool = True) -> None:
        if hue_dim < 0 or (places and hue_dim < PLACE_DIM + 1):
            raise ConfigError(f"hue_dim={hue_dim}: use 0 (off), or with places at least "
                              f"{PLACE_DIM + 1} (two channels for the place, the rest for the hue)")
        if lookup_heads < 0 or share_window < 0:
            raise ConfigError("lookup_heads and share_window count heads and pieces: use 0 (off) "
                              "or more")
        if share_window and not lookup_heads:
            raise ConfigError(f"share_window={share_window} shares what the lookup reads: set "
                              f"lookup_heads (e.g. 4), or share_window: 0")
        if lookup_place and not (lookup_heads and places and hue_dim):
            raise ConfigError("lookup_place reads the patch places the tower keeps beside the hue: "
                              "set lookup_heads (e.g. 4), hue_dim (e.g. 32) and places: true, or "
                              "lookup_place: false")
        self.hue_dim, self.places = hue_dim, places
        self.lookup_heads, self.share_window = lookup_heads, share_window
        self.lookup_place = lookup_place

    def build(self, config: VitBertConfig) -> BindingVitBert:
        return BindingVitBert(config, self)

    def image_tower(self, config: ImageTowerConfig) -> ViT | None:
        """The hue-apart tower, or None (``hue_dim`` 0: the core's)."""
        if not self.hue_dim:
            return None
        if config.kind != "conv_stem" or not self.hue_dim < config.dim:
            raise ConfigError(f"the hue-apart tower (hue_dim {self.hue_dim}) is a conv_stem tower "
                              f"of more than {self.hue_dim} channels; set image.kind: conv_stem "
                              f"and image.dim above it (it is {config.kind}, {config.dim})")
        stem = LuminanceStem(config.image_size, config.patch_size, config.in_chans, config.dim,
                             config.stem_hidden_dim)
        chroma = PatchChroma(config.patch_size, config.in_chans, self.hue_dim, place=self.places)
        return HueFormViT(stem, config.dim, config.depth, config.num_heads, config.mlp_ratio,
                          config.class_token, config.pool, config.drop_path, config.norm_eps,
                          config.mean, config.std, config.attention_radius, chroma=chroma)

    def reader(self, config: VitBertConfig) -> BindingReader | None:
        """The neighbour lookup (and its read sharing), or None (``lookup_heads`` 0)."""
        if not self.lookup_heads:
            return None
        return BindingReader(config.text.dim, self.lookup_heads, config.image.dim, self.hue_dim,
                             self.lookup_place, self.share_window)


class BindingVitBert(VitBert):
    """The core's network with the levers: the hue-apart tower in place of the core's, and each
    word's row read again by :class:`BindingReader` after the joint encoder. Built by
    :meth:`BindingLevers.build`; written and read back like any network (its config names the
    levers), so a checkpoint of it predicts, writes and fine-tunes as one of the core's does."""

    def __init__(self, config: VitBertConfig, levers: BindingLevers) -> None:
        super().__init__(config)
        self.image_tower = levers.image_tower(config.image) or self.image_tower
        self.reader = levers.reader(config)

    def encode(self, input_ids: Tensor, attention_mask: Tensor,
               image_features: Tensor | None = None, image_index: Tensor | None = None,
               image_visible: Tensor | None = None, mode: str = "bidirectional",
               return_attention: bool = False) -> tuple[Tensor, list[Tensor] | None]:
        """The core's word rows, each then what the reader makes of it (module doc)."""
        hidden, attention = super().encode(input_ids, attention_mask, image_features,
                                           image_index, image_visible, mode, return_attention)
        if self.reader is None or image_features is None:
            return hidden, attention
        image = self.image_tokens(image_features, image_index)  # (B, N, D): as the words saw them
        visible = image_visible
        if visible is None:
            visible = attention_mask.new_ones(image.shape[:2], dtype=torch.bool)
        hidden = self.reader(words=self.text.embeddings(input_ids), hidden=hidden, image=image,
                             tower=image_features.to(image.dtype), index=image_index,
                             visible=visible, causal=mode == "seq2seq")
        return hidden, attention


def read_pre_extension_levers(config: dict[str, Any], state_dict: dict[str, Tensor]
                              ) -> tuple[dict[str, Any], dict[str, Tensor]]:
    """A stored network's config (plain values) and weights, the levers of a file from before
    extensions read as :class:`BindingLevers` (:data:`PRE_EXTENSION_FIELDS`, ``_WEIGHTS``);
    anything else unchanged. ``scripts/upgrade_checkpoint.py`` writes such a file anew through
    it, and the new file predicts, writes and fine-tunes as the old one did.
    """
    config, image = dict(config), dict(config.get("image", {}))
    levers = {new: source.pop(old) for old, new in PRE_EXTENSION_FIELDS.items()
              for source in (image, config) if old in source}
    config["image"] = image
    if not any(levers.values()):
        return config, state_dict
    config["extension"] = {"class_path": "vitbert.shapes.BindingLevers", "init_args": levers}
    return config, {next((new + key[len(old):] for old, new in PRE_EXTENSION_WEIGHTS.items()
                          if key.startswith(old)), key): value
                    for key, value in state_dict.items()}


class LuminanceStem(ConvStem):
    """The core's conv stem reading the mean of the colour channels: every feature it builds is
    blind to hue (:class:`PatchChroma` carries the hue past the tower's blocks)."""

    def __init__(self, img_size: int = 32, patch_size: int = 4, in_chans: int = 3,
                 embed_dim: int = 64, hidden_dim: int = 32) -> None:
        super().__init__(img_size, patch_size, 1, embed_dim, hidden_dim)

    def forward(self, x: Tensor) -> Tensor:
        return super().forward(x.mean(dim=1, keepdim=True))  # (B, 1, H, W) → (B, N, D)


class PatchChroma(nn.Module):
    """Each patch's hue, blind to where in the patch a pixel is: (B, C, H, W) → (B, N, dim).

    A per-pixel MLP (1×1 convs), averaged over the patch, then projected. No filter here spans
    two pixels, so nothing it computes can code a form. :class:`HueFormViT` puts it in the last
    ``dim`` channels of its patch tokens after its blocks, so inside the tower hue never meets
    form. ``place``: the last two of the ``dim`` channels are the patch's column and row, scaled
    to [-1, 1] across the grid of the input at hand, so a reader that takes the hue takes where
    it is too.
    """

    HIDDEN = 32  # channels of the per-pixel MLP

    def __init__(self, patch_size: int, in_chans: int = 3, dim: int = 32,
                 hidden_dim: int = HIDDEN, place: bool = False) -> None:
        super().__init__()
        self.dim, self.place = dim, place
        self.pixel = nn.Sequential(
            nn.Conv2d(in_chans, hidden_dim, 1), nn.ReLU(inplace=True),
            nn.Conv2d(hidden_dim, hidden_dim, 1), nn.ReLU(inplace=True),
        )
        self.pool = nn.AvgPool2d(patch_size)
        self.proj = nn.Conv2d(hidden_dim, dim - PLACE_DIM * place, 1)

    def forward(self, x: Tensor) -> Tensor:
        x = self.proj(self.pool(self.pixel(x)))  # (B, dim or dim - 2, rows, cols)
        if self.place:
            x = torch.cat((x, patch_places(x)), dim=1)  # (B, dim, rows, cols)
        return x.flatten(2).transpose(1, 2)  # (B, N, dim)


def patch_places(grid: Tensor) -> Tensor:
    """(B, C, rows, cols) → (B, 2, rows, cols): each cell's column and row, -1 at the left and
    top edge, 1 at the right and bottom (0 for a grid one cell wide)."""
    B, _, rows, cols = grid.shape
    row, col = (torch.linspace(-1, 1, n, device=grid.device, dtype=grid.dtype) if n > 1
                else grid.new_zeros(1) for n in (rows, cols))
    places = torch.stack(torch.meshgrid(col, row, indexing="xy"))  # (2, rows, cols)
    return places.expand(B, -1, -1, -1)


class HueFormViT(ViT):
    """The core's ViT, with its tokens' last ``chroma.dim`` channels replaced, after the blocks,
    by each patch's hue (:class:`PatchChroma`): the blocks' form code, then the hue."""

    def __init__(self, *args: Any, chroma: PatchChroma, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.chroma = chroma

    def forward(self, images: Tensor) -> tuple[Tensor, Tensor]:
        x = self.features(images)  # (B, prefix + N, D)
        tokens = x[:, self.num_prefix_tokens:]  # (B, N, D)
        form = tokens[..., :self.dim - self.chroma.dim]  # (B, N, D - C)
        tokens = torch.cat((form, self.chroma(images)), dim=-1)  # (B, N, D)
        pooled = x[:, 0] if self.pool == "cls" else tokens.mean(dim=1)  # (B, D)
        return pooled, tokens


class BindingReader(nn.Module):
    """The reader :class:`BindingLevers` adds to the network: each word's row plus what the
    lookup read for it (and, with ``share_window``, for the words near it)."""

    def __init__(self, dim: int, heads: int, image_dim: int, hue_dim: int, place: bool,
                 share_window: int) -> None:
        super().__init__()
        self.lookup = NeighbourLookup(dim, heads, image_dim, hue_dim, place)
        self.sharing = ReadSharing(dim, share_window) if share_window else None

    def forward(self, words: Tensor, hidden: Tensor, image: Tensor, tower: Tensor,
                index: Tensor | None, visible: Tensor, causal: bool) -> Tensor:
        """(B, T, D) word rows with the reads added; arguments as ``VitBert.encode`` names them.
        The lookup reads the tower's own tokens when they keep hue apart, else the image tokens
        as the words saw them."""
        if self.lookup.hue_dim:
            image = tower if index is None else tower[index]  # (B, N, D_img)
        reads = self.lookup(words, image, visible, right_context=not causal,
                            hidden=hidden)  # (B, T, D)
        if self.sharing is not None:
            reads = reads + self.sharing(reads, causal=causal)
        return hidden + reads


class NeighbourLookup(nn.Module):
    """Cross-attention from (left, right) neighbour embeddings to the image tokens.

    The output projection starts at zero, so a model with the lookup starts as the model without
    it and a checkpoint loads into either (missing weights then train from "no effect").

    ``hue_dim`` > 0: the image tokens are the tower's own (width ``image_dim``), their last
    ``hue_dim`` channels the patch's hue and the rest its form (module doc); else the projected
    image tokens (width ``dim``), keys and values from the whole token.

    ``place``: the image tokens' last two channels are the patch's column and row
    (``BindingLevers.places``), and each head's read also holds the mean place it
    attended to (module doc). Its projection starts small and random, not at zero: a zero one
    would carry nothing to the words that hear the read, and so receive no gradient from them.
    """

    PLACE_DIM = PLACE_DIM  # column, row: the tower's last channels that say where

    def __init__(self, dim: int, num_heads: int, image_dim: int | None = None,
                 hue_dim: int = 0, place: bool = False) -> None:
        super().__init__()
        if dim % num_heads:
            raise ValueError(f"neighbour lookup: width {dim} does not divide by {num_heads} heads")
        if hue_dim and num_heads % 2:
            raise ValueError(f"neighbour lookup: {num_heads} heads do not halve into heads that "
                             f"find by hue and heads that find by form; use an even number")
        self.num_heads, self.hue_dim = num_heads, hue_dim
        self.query = nn.Linear(2 * dim, dim)
        if hue_dim:  # each gives half the heads' keys and the other half's values
            self.hue = nn.Linear(hue_dim, dim)
            self.form = nn.Linear((image_dim or dim) - hue_dim, dim)
            self.context = nn.Linear(dim, dim)  # the word's hidden state, into its query
        else:
            self.key_value = nn.Linear(dim, 2 * dim)
            self.context = None
        if place and not hue_dim:
            raise ValueError("neighbour lookup: place reads the patch places in the tower's hue "
                             "channels; it needs hue_dim (BindingLevers.places)")
        self.out = nn.Linear(dim, dim)
        self.place = nn.Linear(self.PLACE_DIM * num_heads, dim, bias=False) if place else None
        init_transformer_weights(self)
        nn.init.zeros_(self.out.weight)

    def forward(self, words: Tensor, image: Tensor, image_keep: Tensor | None = None,
                right_context: bool = True, hidden: Tensor | None = None) -> Tensor:
        """What each word reads from the photo, to add to its hidden state: (B, T, D).

        words (B, T, D): the input embeddings of the caption's pieces; image (B, N, D): the
        projected image tokens (with ``hue_dim``, the tower's: (B, N, image_dim)); image_keep
        (B, N) True = visible (a word with no visible image token reads zero, so a blocked image
        equals no image); ``right_context`` False leaves the right neighbour out (seq2seq);
        hidden (B, T, D): the encoder's word rows, which the query reads with ``hue_dim``.
        """
        D = words.shape[-1]
        left = F.pad(words[:, :-1], (0, 0, 1, 0))  # (B, T, D): the piece before, 0 at [CLS]
        right = F.pad(words[:, 1:], (0, 0, 0, 1))  # (B, T, D): the piece after
        if not right_context:
            right = torch.zeros_like(right)
        H = self.num_heads
        q = self.query(torch.cat((left, right), dim=-1))  # (B, T, D)
        if self.context is not None:
            if hidden is None:
                raise ValueError("this neighbour lookup's query reads each word's hidden state: "
                                 "pass hidden=")
            q = q + self.context(hidden)
        k, v = self.keys_and_values(image)  # (B, N, D) each
        q, k, v = (x.unflatten(-1, (H, D // H)).transpose(1, 2) for x in (q, k, v))  # (B, H, ·, Dh)
        if image_keep is None:
            image_keep = image.new_ones(image.shape[:2], dtype=torch.bool)
        keep = image_keep.bool()  # (B, N)
        has_image = keep.any(dim=1)  # (B,)
        # A caption with every image token blocked reads zero; its softmax runs over every token
        # (not over none, which is NaN in the forward and the backward) and is then discarded.
        mask = (keep | ~has_image[:, None])[:, None, None, :]  # (B, 1, 1, N)
        if self.place is not None:  # each head also reads the places: values (B, H, N, Dh + 2)
            places = image[:, None, :, -self.PLACE_DIM:].expand(-1, H, -1, -1)
            v = torch.cat((v, places.to(v.dtype)), dim=-1)
        read = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # (B, H, T, Dh [+ 2])
        if self.place is None:
            out = self.out(read.transpose(1, 2).flatten(2))  # (B, T, D)
        else:
            read, looked = read.split((D // H, self.PLACE_DIM), dim=-1)
            out = (self.out(read.transpose(1, 2).flatten(2))  # (B, T, D)
                   + self.place(looked.transpose(1, 2).flatten(2)))  # from (B, T, 2H)
        return out * has_image[:, None, None]

    def keys_and_values(self, image: Tensor) -> tuple[Tensor, Tensor]:
        """(B, N, ·) image tokens → keys, values (B, N, D); with ``hue_dim`` the first half of
        the heads is keyed by hue and reads form, the second keyed by form and reads hue."""
        if not self.hue_dim:
            return self.key_value(image).chunk(2, dim=-1)
        hue_key, hue_value = self.hue(image[..., -self.hue_dim:]).chunk(2, dim=-1)  # (B, N, D/2)
        form_key, form_value = self.form(image[..., :-self.hue_dim]).chunk(2, dim=-1)
        return (torch.cat((hue_key, form_key), dim=-1),  # (B, N, D)
                torch.cat((form_value, hue_value), dim=-1))


class ReadSharing(nn.Module):
    """Each word also hears what the lookup read for the words near it: a 1D convolution over
    the reads, (B, T, D) → (B, T, D), to add to them.

    Why: a relation word's neighbours name nothing to look up ("is to the [MASK] of"), while
    the words that name its objects have read them already: with ``BindingLevers.places``
    the colour word of "a small red circle", asking about "circle", reads the circle's hue and
    where it is. Moving those reads to the relation word by attention over the words starts
    from a uniform mix, which neither the masked-language loss nor a loss on the relation word
    alone got out of (docs/binding.md); a convolution with a matrix per offset learns "what the
    reading two pieces back says about where its object is" directly. One weight per channel
    and offset (depthwise) did not learn it in the same steps.

    Zero-initialised: a model with it starts as the model without it, and a checkpoint without
    it loads (its weights then train from "no effect"). When writing (``causal``), a word hears
    only the reads at and left of it: the words to its right are not written yet.
    """

    def __init__(self, dim: int, window: int) -> None:
        super().__init__()
        if window < 1:
            raise ValueError(f"read sharing needs a window of 1 or more pieces, got {window}")
        self.window = window
        # No bias: a word with no image to read (every read zero) must hear nothing.
        self.mix = nn.Conv1d(dim, dim, 2 * window + 1, padding=window, bias=False)
        nn.init.zeros_(self.mix.weight)

    def forward(self, reads: Tensor, causal: bool = False) -> Tensor:
        weight = self.mix.weight  # (D_out, D_in, 2w + 1); tap j reads the word j - w pieces away
        if causal:
            offsets = torch.arange(weight.shape[-1], device=weight.device) - self.window
            weight = weight * (offsets <= 0).to(weight.dtype)
        shared = F.conv1d(reads.transpose(1, 2), weight, padding=self.window)  # (B, D, T)
        return shared.transpose(1, 2)  # (B, T, D)
