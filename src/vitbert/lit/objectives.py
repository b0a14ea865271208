"""The objectives beside masked-language modelling: caption generation, image-text matching and
word detection.

The generation objective turns an MLM batch into a seq2seq batch (Unified VLP, Zhou et al.); one
model learns both: a bidirectional batch (every word sees every word; 15-30% of the pieces
hidden) teaches it to fill a [MASK], a seq2seq batch (a word sees the image and the words to its
left) teaches it to write left to right. In a seq2seq batch each caption is hidden at its own
rate, drawn uniformly from (0, 1], so the model meets every amount of known left context, from
almost the whole caption down to none. The positions hidden are the caption's pieces and its
closing [SEP] (so the model learns where a caption ends), never the [CLS] that starts it (the
prompt decoding begins from) nor padding. Hidden pieces are always [MASK]: decoding predicts the
next word from a [MASK] placed after the words written so far, exactly what training shows.

The image-text matching objective (ALBEF, Li et al. 2021; ViLT): beside every training batch's
MLM or seq2seq loss, a binary "is this the caption's photo?" loss on the caption's [CLS] row
(:class:`vitbert.models.ITMHead`), over each caption with its own photo and with the photo of a
*different* image (:func:`vitbert.lit.conditions.another_photo`: never its own, whichever of an
image's five captions it is). A caption cannot be told from its negative by its words, only by
whether they fit the photo, so the loss pushes both towers towards what the words say is in the
picture.

The word detection objective (:func:`word_detection_loss`) asks the image tower alone which
content words the photo's captions use: a direct signal to the tower, which the MLM reaches only
through the words' attention. The contrastive objective (photos and captions embedded apart,
for retrieval) is :mod:`vitbert.lit.contrastive`, the twin contrast (a hidden word likelier
under its own photo than under a twin's, for binding) :mod:`vitbert.lit.twins`.
:func:`training_loss` puts them together.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vitbert.data.features import (
    FEATURES_KEY,
    IMAGE_INDEX,
    batch_image,
    caption_photos,
    image_argument,
)
from vitbert.data.masking import IGNORE_INDEX
from vitbert.lit.conditions import another_photo
from vitbert.lit.contrastive import itc_loss
from vitbert.lit.loss import masked_lm_loss, masked_lm_losses
from vitbert.lit.negatives import SwapNegatives
from vitbert.lit.twins import twin_contrast_loss
from vitbert.models.multimodal import AttentionMode

if TYPE_CHECKING:
    from vitbert.lit.focus import PieceDifficulty

Batch = dict[str, Tensor]


def choose_objective(batch: Batch, generation_probability: float, mask_token_id: int
                     ) -> tuple[Batch, AttentionMode]:
    """MLM as it comes (bidirectional), or with ``generation_probability`` a seq2seq batch.

    At 0 nothing is drawn from the RNG, so a run that trains MLM alone is the run it always was.
    """
    if generation_probability and torch.rand(()) < generation_probability:
        return seq2seq_batch(batch, mask_token_id), "seq2seq"
    return batch, "bidirectional"


def seq2seq_batch(batch: dict[str, Tensor], mask_token_id: int,
                  generator: torch.Generator | None = None) -> dict[str, Tensor]:
    """A copy of ``batch`` with its captions re-masked for generation (see the module doc).

    Reads the original pieces back from the MLM batch (``labels`` where a piece was a target,
    ``input_ids`` elsewhere); returns new ``input_ids`` and ``labels`` (B, T), at least one target
    per caption, the other keys unchanged.
    """
    caption = original_caption(batch)  # (B, T)
    can_hide = batch["attention_mask"].bool().clone()  # (B, T)
    can_hide[:, 0] = False  # [CLS]: the prompt
    B, T = caption.shape
    device = caption.device
    rate = 1.0 - torch.rand(B, 1, generator=generator, device=device)  # (B, 1) in (0, 1]
    draw = torch.rand(B, T, generator=generator, device=device)
    hidden = (draw < rate) & can_hide
    # At least one target: the eligible position with the smallest draw.
    first = draw.masked_fill(~can_hide, 2.0).argmin(dim=1)  # (B,)
    hidden[torch.arange(B, device=device), first] |= can_hide.any(dim=1)
    return {
        **batch,
        "input_ids": caption.masked_fill(hidden, mask_token_id),
        "labels": caption.masked_fill(~hidden, IGNORE_INDEX),
    }


def original_caption(batch: Batch) -> Tensor:
    """The caption's pieces before masking (B, T): ``labels`` at the targets (whatever BERT's
    80/10/10 put in their place), ``input_ids`` elsewhere."""
    labels = batch["labels"]
    return torch.where(labels == IGNORE_INDEX, batch["input_ids"], labels)


def training_loss(net: nn.Module, batch: Batch, generation_probability: float,
                  mask_token_id: int, itm_head: nn.Module | None = None, itm_weight: float = 0.0,
                  word_head: nn.Module | None = None, word_weight: float = 0.0,
                  swaps: SwapNegatives | None = None, itc_weight: float = 0.0,
                  twin_weight: float = 0.0, difficulty: PieceDifficulty | None = None,
                  focus_weight: float = 0.0, focus_fraction: float = 1.0
                  ) -> tuple[Tensor, dict[str, Tensor]]:
    """A training batch's loss to minimise, and its parts by log name.

    The MLM (or, with ``generation_probability``, seq2seq) loss, plus ``itm_weight`` times the
    image-text matching loss when ``itm_head`` is given (with ``swaps``, also against swapped-word
    copies of the captions), plus ``word_weight`` times the word
    detection loss when ``word_head`` is, plus ``itc_weight`` times the contrastive loss
    (:mod:`vitbert.lit.contrastive`; the network's own heads), plus, in MLM batches,
    ``twin_weight`` times the twin contrast (:mod:`vitbert.lit.twins`): one term each, over one
    tower pass (and one over the twins' photos). With ``difficulty`` an MLM batch's losses
    update the running difficulty, and with ``focus_weight`` its captions are trained a second
    time, focused (one hard content piece hidden, the rest shown: :mod:`vitbert.lit.focus`),
    that weight times the focused loss (``focus_fraction``: of the first part of the batch's
    captions only). Without them the loss is exactly the MLM loss as it
    always was: nothing else runs and no random number is drawn.
    """
    parts, extra = {}, []
    if (itm_head is not None or word_head is not None or itc_weight or twin_weight
            or difficulty is not None):
        batch = with_tower_output(net, batch)
    if itc_weight:
        parts["train/itc_loss"] = itc_loss(net, batch, original_caption(batch))
        extra.append(itc_weight * parts["train/itc_loss"])
    if itm_head is not None:
        parts["train/itm_loss"], _ = itm_loss(net, itm_head, batch, swaps)
        extra.append(itm_weight * parts["train/itm_loss"])
    if word_head is not None:
        parts["train/word_loss"] = word_detection_loss(word_head, batch)
        extra.append(word_weight * parts["train/word_loss"])
    batch, mode = choose_objective(batch, generation_probability, mask_token_id)
    name = "train/generation_loss" if mode == "seq2seq" else "train/loss"
    if difficulty is not None and mode == "bidirectional":
        losses, pieces = masked_lm_losses(net, batch, mode)  # (M,) each
        parts[name] = loss = losses.mean()
        if focus_weight:
            focused = difficulty.focus(batch, mask_token_id, fraction=focus_fraction)
            focused_losses, focused_pieces = masked_lm_losses(net, focused, mode)  # (F,) each
            if len(focused_losses):  # a batch with no content piece has nothing to focus
                parts["train/focus_loss"] = focused_losses.mean()
                extra.append(focus_weight * parts["train/focus_loss"])
            losses = torch.cat((losses, focused_losses))
            pieces = torch.cat((pieces, focused_pieces))
        difficulty.update(pieces, losses.detach())
    else:
        parts[name] = loss = masked_lm_loss(net, batch, mode)
    if twin_weight and mode == "bidirectional":  # in seq2seq batches too, it bound less
        # Under the random mask, not the focused one: focusing seldom hides the exchanged
        # words once they are learnt, and the contrast would stop.
        parts["train/twin_loss"] = twin_contrast_loss(net, batch)
        extra.append(twin_weight * parts["train/twin_loss"])
    return loss + sum(extra), parts


def with_tower_output(net: nn.Module, batch: Batch) -> Batch:
    """``batch`` with its pixels replaced by the image tower's output (P, N, D_img), run once
    (P: the batch's distinct photos, or one per caption; its ``image_index`` is kept).

    The MLM reading and the matching pairs (the same photos, shown to other captions) then share
    one tower pass, and the tower's gradient comes from both: on this CPU the tower is a large part
    of a step. A batch that already carries a frozen tower's cached output is returned as is.
    """
    if FEATURES_KEY in batch:
        return batch
    rest = {key: value for key, value in batch.items() if key != "images"}
    return {**rest, FEATURES_KEY: net.tower_tokens(batch["images"])}


def itm_pairs(image_ids: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """The pairs image-text matching is trained on, for a batch's captions of ``image_ids`` (B,).

    Every caption with its own photo (matched), then every caption that has another image in the
    batch with that image's photo (:func:`another_photo`: never its own image, whichever of an
    image's five captions it is; not matched): B + K pairs, K = B unless the whole batch shows
    one image. Balanced, as in ViLT; the negatives are the batch's, not mined (ALBEF picks hard
    ones by the contrastive similarity, :mod:`vitbert.lit.contrastive`; not done here).

    Returns:
        text: (B + K,) the batch row of each pair's caption;
        photo: (B + K,) the batch row of each pair's photo;
        matched: (B + K,) float, 1 for the first B pairs, 0 for the rest.
    """
    B = len(image_ids)
    rows = torch.arange(B, device=image_ids.device)
    source, has_other = another_photo(image_ids)
    text = torch.cat((rows, rows[has_other]))
    photo = torch.cat((rows, source[has_other]))
    matched = (torch.arange(len(text), device=image_ids.device) < B).float()
    return text, photo, matched


def itm_loss(net: nn.Module, head: nn.Module, batch: Batch, swaps: SwapNegatives | None = None
             ) -> tuple[Tensor, Tensor]:
    """Binary cross-entropy of matched / not matched over :func:`itm_pairs`, and the share of
    pairs judged right.

    Each pair reads the *unmasked* caption (:func:`original_caption`), as ALBEF does: the [CLS]
    then compares the whole caption with the photo, and the pass is the same whichever objective
    the batch trains (a seq2seq batch's [CLS] would see no words at all). A masked caption would
    save one pass (its positive is the MLM pass) but hide the content words, 3x likelier to be
    masked in the recipe, that tell a photo from another. The cost is one extra encoder pass over
    the 2B pairs; the photos are indexed, so a batch from :func:`with_tower_output` runs no tower.

    With ``swaps`` each caption that allows one also meets its own photo with two of its words
    swapped (:mod:`vitbert.lit.negatives`; NegCLIP's hard negatives), not matched: the same words
    about the same photo, told apart only by what is bound to what.
    """
    caption = original_caption(batch)  # (B, T)
    text, photo, matched = itm_pairs(batch["image_id"])  # (B + K,) each
    captions, keep = caption[text], batch["attention_mask"][text]
    if swaps is not None:
        negative, has = swaps(caption, batch["content_mask"].bool())  # (B, T), (B,)
        rows = has.nonzero().squeeze(1)  # (S,) the captions with a swap
        captions = torch.cat((captions, negative[rows]))  # (B + K + S, T)
        keep = torch.cat((keep, batch["attention_mask"][rows]))
        photo = torch.cat((photo, rows))
        matched = torch.cat((matched, matched.new_zeros(len(rows))))
    index = caption_photos(batch)[photo]  # each pair's photo among the batch's
    photos = {**image_argument(batch, batch_image(batch)), IMAGE_INDEX: index}
    hidden, _ = net.encode(captions, keep, **photos)  # (pairs, T, D)
    logits = head(hidden[:, 0]).float()  # (pairs,) from each pair's [CLS]
    loss = F.binary_cross_entropy_with_logits(logits, matched)
    return loss, ((logits > 0).float() == matched).float().mean()


def word_detection_loss(head: nn.Module, batch: Batch) -> Tensor:
    """Cross-entropy between the word detector's guess from the photo alone and the content
    words its captions use (each photo's bag of content pieces as a distribution, the
    multi-label recipe of Joulin et al. 2016, "Learning visual features from large weakly
    supervised data").

    Why: the MLM loss reaches the image tower only through the words' attention over the image
    tokens, a weak signal at the start, when that attention is not yet on the right object. A
    colour is in the pixels already and is read by attention alone; a shape must be built by the
    tower's convs and blocks, and the MLM signal alone does not build it in the embedded default's
    minutes (a linear probe finds no shape in the tower's tokens after 939 steps; docs/captions.md).
    This loss tells the tower directly which words a photo's captions use. It reads the batch's
    tower output (:func:`with_tower_output`, no extra tower pass); a photo's five captions pool
    their words. Function words, in every caption, are left out (``content_mask``).
    """
    tokens = batch[FEATURES_KEY]  # (P, N, D_img)
    counts = photo_word_counts(batch, original_caption(batch), batch["content_mask"].bool(),
                               len(tokens), head.vocab_size)  # (P, V)
    seen = counts.sum(dim=1) > 0  # a photo whose captions hold no content word teaches nothing
    if not seen.any():
        return head(tokens).sum() * 0.0  # nothing to learn: zero, with the graph kept for DDP
    target = counts[seen] / counts[seen].sum(dim=1, keepdim=True)  # (P', V)
    return F.cross_entropy(head(tokens[seen]).float(), target)


def photo_word_counts(batch: Batch, words: Tensor, counted: Tensor, num_photos: int,
                      num_words: int) -> Tensor:
    """(P, num_words) how often each photo's captions use each word: ``words`` (B, T) are
    indices below ``num_words``, counted where ``counted`` (B, T); a photo's captions pool."""
    counts = torch.zeros(num_photos, num_words, device=words.device)  # (P, W)
    rows = caption_photos(batch)[:, None].expand_as(words)[counted]  # the photo of each word
    counts.index_put_((rows, words[counted]), torch.ones_like(rows, dtype=counts.dtype),
                      accumulate=True)
    return counts
