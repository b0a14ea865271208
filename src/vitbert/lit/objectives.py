"""The training objectives: each is one loss with a weight, and the training module sums them.

    MaskedLM        fill the hidden words (BERT's MLM): every word sees every word and the photo
    CaptionWriting  on a share of the batches, write the captions left to right instead
                    (Unified VLP's seq2seq mask), so the same model writes captions
    WordDetection   the image tower alone names the content words a photo's captions use
    Contrastive     (:mod:`vitbert.lit.contrastive`): photos and captions embedded apart, for
                    retrieval

A config lists them as LightningCLI lists any class (the plain model is ``MaskedLM`` alone)::

    model:
      objectives:
        - class_path: vitbert.lit.objectives.MaskedLM
        - class_path: vitbert.lit.objectives.WordDetection
          init_args: {weight: 3.0}

A data set's package may add its own the same way. Each step the module runs the image tower
once over the batch's photos and hands every objective a :class:`TrainingStep`; an objective
returns its loss, or None when the step gives it nothing to learn. Heads an objective trains
beside the network (:meth:`Objective.build`) are the module's, under the names a checkpoint keeps
them by (``word_head``).

A batch trains writing or filling, never both: an objective may *claim* the batch for itself
(:meth:`Objective.claims_batch`, drawn before any loss; :class:`CaptionWriting` does on its share
of the batches), and the objectives that read the collator's random masks leave a claimed batch
alone.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vitbert.data.features import BACKBONE_KEY, FEATURES_KEY, IMAGE_INDEX
from vitbert.data.masking import IGNORE_INDEX
from vitbert.models import ConfigError, VitBert, WordDetectorHead
from vitbert.models.multimodal import AttentionMode

Batch = dict[str, Tensor]


# ----------------------------------------------------------------------------- a batch's parts


def image_features(net: VitBert, batch: Batch) -> Tensor:
    """(P, N, D_img): the image features (the tower's output) of the batch's P photos, computed
    once: from pixels, from a frozen CNN backbone's cached output, or a frozen tower's cache."""
    if FEATURES_KEY in batch:
        return batch[FEATURES_KEY]
    if BACKBONE_KEY in batch:
        return net.image_features_from_backbone(batch[BACKBONE_KEY])
    return net.image_features(batch["images"])


def caption_photos(batch: Batch) -> Tensor:
    """(B,) long: the row of each caption's photo among those the batch carries (its
    ``image_index``, or caption b's own photo b when the photos are one per caption)."""
    if IMAGE_INDEX in batch:
        return batch[IMAGE_INDEX]
    return torch.arange(len(batch["input_ids"]), device=batch["input_ids"].device)


def original_caption(batch: Batch) -> Tensor:
    """The caption's pieces before masking (B, T): ``labels`` at the targets (whatever BERT's
    80/10/10 put in their place), ``input_ids`` elsewhere."""
    labels = batch["labels"]
    return torch.where(labels == IGNORE_INDEX, batch["input_ids"], labels)


def masked_logits(net: VitBert, batch: Batch, features: Tensor | None,
                  mode: AttentionMode = "bidirectional") -> Tensor:
    """Logits (M, V) at the targets of ``batch``, each caption seeing its photo among the image
    ``features`` (P, N, D_img) by the batch's ``image_index``, or no image (None)."""
    return net(batch["input_ids"], batch["attention_mask"], features, batch.get(IMAGE_INDEX),
               target_mask=batch["labels"] != IGNORE_INDEX, mode=mode)


def masked_lm_loss(net: VitBert, batch: Batch, features: Tensor,
                   mode: AttentionMode = "bidirectional") -> Tensor:
    """Mean cross-entropy (in fp32: the model never casts) over the batch's targets, each caption
    seeing its photo among the image ``features`` (or no image: None)."""
    logits = masked_logits(net, batch, features, mode)  # (M, V)
    return F.cross_entropy(logits.float(), batch["labels"][batch["labels"] != IGNORE_INDEX])


# ----------------------------------------------------------------------------- the protocol


@dataclass
class TrainingStep:
    """One training step as every objective reads it."""

    batch: Batch
    image_features: Tensor
    """(P, N, D_img): the image features of the batch's photos, computed once."""
    mask_token_id: int
    claimed_by: Objective | None = None
    """The objective that took this batch for itself (:meth:`Objective.claims_batch`), if any."""


class Objective:
    """One training loss; the module adds ``weight`` times what :meth:`__call__` returns.

    Settings are the constructor's plain arguments, kept as attributes of the same names, so a
    checkpoint stores an objective as ``{"class_path", "init_args"}`` (:meth:`settings`).
    """

    name: ClassVar[str] = "loss"  # logged as train/<name>

    def __init__(self, weight: float = 1.0) -> None:
        if weight < 0:
            raise ConfigError(f"{type(self).__name__}: weight {weight} weighs a loss; use 0 or "
                              f"more")
        self.weight = weight

    def build(self, net: VitBert) -> dict[str, nn.Module]:
        """The modules this objective trains beside ``net`` (its heads), by the name the module
        and its checkpoints keep each under; built once, when the module is."""
        return {}

    def claims_batch(self) -> bool:
        """Whether this objective takes this step's batch for itself (module doc); drawn once
        per step, before any loss."""
        return False

    def __call__(self, net: VitBert, step: TrainingStep) -> Tensor | None:
        """This objective's loss on ``step`` (unweighted), or None when it has nothing to learn
        from it."""
        raise NotImplementedError

    def settings(self) -> dict:
        """``{"class_path", "init_args"}``, plain values, as a config names this objective."""
        names = list(inspect.signature(type(self).__init__).parameters)[1:]
        return {"class_path": f"{type(self).__module__}.{type(self).__name__}",
                "init_args": {name: getattr(self, name) for name in names}}

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.settings()["init_args"].items())
        return f"{type(self).__name__}({args})"


def build_objective(spec: Objective | dict) -> Objective:
    """An objective, or one from its ``{"class_path", "init_args"}`` (as a checkpoint has it)."""
    if isinstance(spec, Objective):
        return spec
    from jsonargparse import ArgumentParser

    parser = ArgumentParser(exit_on_error=False)
    parser.add_argument("--objective", type=Objective)
    return parser.instantiate_classes(parser.parse_object({"objective": spec})).objective


def writes_captions(objectives: list[Objective]) -> bool:
    """Whether these objectives teach the model to write captions left to right (a
    :class:`CaptionWriting` on a share of the batches above 0)."""
    return any(isinstance(o, CaptionWriting) and o.probability for o in objectives)


# ----------------------------------------------------------------------------- the objectives


class MaskedLM(Objective):
    """Masked-language modelling: cross-entropy at the pieces the collator hid (15-30% of them,
    BERT's 80% [MASK] / 10% random / 10% unchanged), each caption reading its photo, every word
    seeing every word. Leaves the batches another objective claims."""

    name = "loss"

    def __call__(self, net: VitBert, step: TrainingStep) -> Tensor | None:
        if step.claimed_by is not None:
            return None
        return masked_lm_loss(net, step.batch, step.image_features)


class CaptionWriting(Objective):
    """Writing captions left to right (Unified VLP, Zhou et al. 2020), on the share
    ``probability`` of the batches, which it claims; the others fill words.

    A claimed batch is re-masked for generation (:func:`seq2seq_batch`) and read under the
    seq2seq mask: a word sees the image and the words to its left. One model learns both: the
    bidirectional batches teach it to fill a [MASK], these to write. At 0 nothing is drawn from
    the RNG, so a run without it is the run it always was.
    """

    name = "generation_loss"

    def __init__(self, probability: float = 0.3, weight: float = 1.0) -> None:
        super().__init__(weight)
        if not 0.0 <= probability <= 1.0:
            raise ConfigError(f"CaptionWriting: probability {probability} is the share of batches "
                              f"that write captions; use a value in [0, 1], e.g. 0.3")
        self.probability = probability

    def claims_batch(self) -> bool:
        return bool(self.probability and torch.rand(()) < self.probability)

    def __call__(self, net: VitBert, step: TrainingStep) -> Tensor | None:
        if step.claimed_by is not self:
            return None
        batch = seq2seq_batch(step.batch, step.mask_token_id)
        return masked_lm_loss(net, batch, step.image_features, mode="seq2seq")


def seq2seq_batch(batch: Batch, mask_token_id: int,
                  generator: torch.Generator | None = None) -> Batch:
    """A copy of ``batch`` with its captions re-masked for generation.

    Each caption is hidden at its own rate, drawn uniformly from (0, 1], so the model meets every
    amount of known left context, from almost the whole caption down to none. The positions
    hidden are the caption's pieces and its closing [SEP] (so the model learns where a caption
    ends), never the [CLS] that starts it (the prompt decoding begins from) nor padding; at least
    one per caption. Hidden pieces are always [MASK]: decoding predicts the next word from a
    [MASK] placed after the words written so far, exactly what training shows. Returns new
    ``input_ids`` and ``labels`` (B, T), the other keys unchanged.
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


class WordDetection(Objective):
    """The image tower alone predicts which content words a photo's captions use (Joulin et al.
    2016; the word detectors of Fang et al. 2015), by a head on its output (``word_head``).

    Why: the MLM loss reaches the image tower only through the words' attention over the image
    tokens, a weak signal at the start, when that attention is not yet on the right object; this
    loss tells the tower directly which words a photo's captions use. It reads the step's image
    features (no extra tower pass); a photo's captions pool their words; function words, in every
    caption, are left out (the batch's ``content_mask``).
    """

    name = "word_loss"

    def build(self, net: VitBert) -> dict[str, nn.Module]:
        self.head = WordDetectorHead(net.config.image.dim, net.config.vocab_size)
        return {"word_head": self.head}

    def __call__(self, net: VitBert, step: TrainingStep) -> Tensor:
        return word_detection_loss(self.head, step.batch, step.image_features)


def word_detection_loss(head: nn.Module, batch: Batch, features: Tensor) -> Tensor:
    """Cross-entropy between the head's guess from the image features (P, N, D_img) and the
    content words each photo's captions use (its bag of content pieces as a distribution, the
    multi-label recipe of Joulin et al. 2016)."""
    counts = photo_word_counts(batch, original_caption(batch), batch["content_mask"].bool(),
                               len(features), head.vocab_size)  # (P, V)
    seen = counts.sum(dim=1) > 0  # a photo whose captions hold no content word teaches nothing
    if not seen.any():
        return head(features).sum() * 0.0  # nothing to learn: zero, with the graph kept for DDP
    target = counts[seen] / counts[seen].sum(dim=1, keepdim=True)  # (P', V)
    return F.cross_entropy(head(features[seen]).float(), target)


def photo_word_counts(batch: Batch, words: Tensor, counted: Tensor, num_photos: int,
                      num_words: int) -> Tensor:
    """(P, num_words) how often each photo's captions use each word: ``words`` (B, T) are
    indices below ``num_words``, counted where ``counted`` (B, T); a photo's captions pool."""
    counts = torch.zeros(num_photos, num_words, device=words.device)  # (P, W)
    rows = caption_photos(batch)[:, None].expand_as(words)[counted]  # the photo of each word
    counts.index_put_((rows, words[counted]), torch.ones_like(rows, dtype=counts.dtype),
                      accumulate=True)
    return counts
