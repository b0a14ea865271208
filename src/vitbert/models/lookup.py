"""Neighbour lookup: each word asks the photo about the words beside it, in one step.

Why: to fill "a small [MASK] circle left of a large blue square" by *binding*, the hidden word
must find the object its neighbour names ("circle") and read that object's colour. In the joint
encoder that is two steps, one per layer: gather the neighbour's word into the [MASK] row, then
attend from there to the object. A 2-block encoder trained by masked-language modelling rarely
finds that circuit: it fills by elimination instead (the colour the caption has not named yet,
docs/binding.md). This module gives each word the second step directly. Its query is made from
the embeddings of the words to its left and right; its keys and values from the image tokens;
what it reads is added to the word's final hidden state, before the MLM head. No word list: which
neighbours matter, and what to read, is learnt.

Measured on the twin contrast (:mod:`vitbert.lit.twins`: the same masked caption with its own
photo against a photo whose two objects' words are exchanged), a checkpoint fine-tuned on that
contrast alone stays at chance (loss ln 2) without this module and learns it with it
(docs/binding.md).

Under the seq2seq mask (writing left to right) the right neighbour is not yet written, so only
the left one forms the query.

With a tower that keeps hue apart from form (``ImageTowerConfig.chroma_dim``), the lookup reads
the tower's tokens, and half its heads find a patch by its hue and read its form, the other half
find it by its form and read its hue. Why: a reading that carries what it was found by lets the
MLM head, fitted on the (hue, form) pairs of training, answer from the pair: "a purple [MASK]"
is never a circle in training, so a read that holds the purple says "not a circle" even where
the patch shows one. A read that holds only the form cannot (docs/binding.md: with it, forms
bind as colours do). Its query also holds the word's own final hidden state, what the encoder
made of the whole sentence, so a word can ask for more than its neighbours name.

With places in the tower (``ImageTowerConfig.chroma_place``) the lookup can also say *where* it
looked (``VitBertConfig.lookup_place``): each head's attention-weighted mean of the patches'
column and row, projected into the read. Why: a relation word needs where the object named
before it is, and the colour word before it looks at that object already. The place channels
are in the values, but the output projection, trained to fill colours and forms, passes them on
weakly (relations stayed at chance); in channels of their own the place reaches the words that
hear the read (:class:`ReadSharing`), and relations left chance (docs/binding.md).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vitbert.models.patch_embed import PatchChroma
from vitbert.models.vit import init_transformer_weights


class NeighbourLookup(nn.Module):
    """Cross-attention from (left, right) neighbour embeddings to the image tokens.

    The output projection starts at zero, so a model with the lookup starts as the model without
    it and a checkpoint loads into either (missing weights then train from "no effect").

    ``hue_dim`` > 0: the image tokens are the tower's own (width ``image_dim``), their last
    ``hue_dim`` channels the patch's hue and the rest its form (module doc); else the projected
    image tokens (width ``dim``), keys and values from the whole token.

    ``place``: the image tokens' last two channels are the patch's column and row
    (``ImageTowerConfig.chroma_place``), and each head's read also holds the mean place it
    attended to (module doc). Its projection starts small and random, not at zero: a zero one
    would carry nothing to the words that hear the read, and so receive no gradient from them.
    """

    PLACE_DIM = PatchChroma.PLACE_DIM  # column, row: the tower's last channels that say where

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
                             "channels; it needs hue_dim (ImageTowerConfig.chroma_place)")
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
    the words that name its objects have read them already: with ``ImageTowerConfig.chroma_place``
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
