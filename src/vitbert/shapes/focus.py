"""Focused masking: hide the word the model finds hardest, and show it the rest of the caption.

Random masking (BERT's 15%, the embedded default's 30%) spends the targets on the words that
occur, whatever is left to learn about them. On the shapes captions a relation word ("left",
"above") is about one target in thirteen, and each hidden form word takes away what the colour
word beside it needed to find its object (the neighbour lookup asks the photo about a word's
neighbours, :mod:`vitbert.shapes.model`). The model learnt colours and forms and never relations
(docs/binding.md).

A *focused* copy of a caption has one content piece hidden, drawn in proportion to the model's
running loss on that piece of the vocabulary, and every other piece in view: the words it has
solved ("red", once it reads hue) are rarely drawn, the words it cannot fill yet often. No word
list: how hard a piece is comes from the model's own losses on the targets of the
masked-language batches, and which pieces may be drawn from the batch's ``content_mask`` (the
collator's function words are never drawn). On the shapes data the relation words become about
half of the focused targets.

The focused copies are trained *beside* the batch's random masks, not instead of them
(:class:`FocusedMaskedLM`, the masked-language objective with the copies added): the random fill
is what the caption writer shares with the filler, and a run that focused its captions instead
wrote worse captions (docs/binding.md).

:class:`PieceDifficulty` keeps the running losses (a buffer, so a checkpoint holds it and a
resumed run draws what the uninterrupted one would have).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vitbert.data.masking import IGNORE_INDEX
from vitbert.lit.conditions import select_captions
from vitbert.lit.objectives import (
    Batch,
    MaskedLM,
    TrainingStep,
    masked_lm_losses,
    original_caption,
)
from vitbert.models import ConfigError, VitBert
from vitbert.shapes.twins import TWIN_KEYS


class FocusedMaskedLM(MaskedLM):
    """Masked-language modelling with focused copies beside the random masks (module doc).

    Every masked-language batch's losses update the running difficulty of its target pieces;
    from ``start`` (a fraction of the run's steps) on, the first ``fraction`` of the batch's
    captions are trained a second time, focused, and the loss is the random targets' mean
    (logged ``train/loss``, as :class:`MaskedLM`'s) plus ``focus_weight`` times the focused ones'
    (logged ``train/focus_loss``). Until then the read
    sharing of the neighbour lookup (``vitbert.shapes.BindingLevers.share_window``), which carries
    what the focused relation words need, is held at its start (zero): the recipe measured in
    docs/binding.md.

    Args:
        focus_weight: weight of the focused loss beside the random targets' (whose weight is
            this objective's ``weight``).
        start: the fraction of the run's optimiser steps after which captions are focused (the
            running losses are measured from the first step): random masking first teaches the
            words that the focused ones are read beside.
        fraction: the share of each batch's captions that get a focused copy (the first ones;
            the loader shuffles): the copy is a second encoder pass, and half the captions cost
            half of it.
    """

    def __init__(self, focus_weight: float = 2.0, start: float = 0.3, fraction: float = 1.0,
                 weight: float = 1.0) -> None:
        super().__init__(weight)
        if focus_weight < 0:
            raise ConfigError(f"focus_weight={focus_weight} weighs a loss: use 0 (off) or more")
        if not 0.0 <= start < 1.0:
            raise ConfigError(f"start={start} is a fraction of the run's steps: use 0 (from the "
                              f"first) up to below 1")
        if not 0.0 < fraction <= 1.0:
            raise ConfigError(f"fraction={fraction} is the share of a batch's captions that get a "
                              f"focused copy: use a value in (0, 1], e.g. 0.5")
        self.focus_weight, self.start, self.fraction = focus_weight, start, fraction

    def build(self, net: VitBert) -> dict[str, nn.Module]:
        self.difficulty = PieceDifficulty(net.config.vocab_size)
        return {"difficulty": self.difficulty}

    def focusing(self, step: int, total_steps: int) -> bool:
        """Whether optimiser step ``step`` of ``total_steps`` focuses captions."""
        return bool(self.focus_weight) and step >= self.start * total_steps

    def __call__(self, net: VitBert, step: TrainingStep) -> Tensor | None:
        if step.claimed_by is not None:
            return None
        losses, pieces = masked_lm_losses(net, step.batch, step.tower)  # (M,) each
        loss = step.logged["train/loss"] = losses.mean()  # logged as the plain objective's
        if self.focusing(step.step, step.total_steps):
            batch = {k: v for k, v in step.batch.items() if k not in TWIN_KEYS}
            focused = self.difficulty.focus(batch, step.mask_token_id, fraction=self.fraction)
            focused_losses, focused_pieces = masked_lm_losses(net, focused, step.tower)  # (F,)
            if len(focused_losses):  # a batch with no content piece has nothing to focus
                step.logged["train/focus_loss"] = focused_losses.mean()
                loss = loss + self.focus_weight * step.logged["train/focus_loss"]
            losses = torch.cat((losses, focused_losses))
            pieces = torch.cat((pieces, focused_pieces))
        self.difficulty.update(pieces, losses.detach())
        return loss

    def before_optimizer_step(self, net: VitBert, step: int, total_steps: int) -> None:
        # The read sharing waits for the focus: a zero gradient keeps its zero weights where they
        # are under AdamW (no step, no decay), and unlike requires_grad it leaves DDP's buckets
        # as they were built.
        sharing = getattr(net.reader, "sharing", None)
        if sharing is not None and not self.focusing(step, total_steps):
            for param in sharing.parameters():
                if param.grad is not None:
                    param.grad.zero_()


class PieceDifficulty(nn.Module):
    """A running mean of the masked-language loss of each vocabulary piece when it is a target,
    and the focused re-masking it drives (module doc).

    Every piece starts at ln V, the loss of a uniform guess: a piece not hidden yet counts as
    hard until the model has been asked it. ``momentum`` is the weight kept of the old mean at
    each batch in which the piece is a target.
    """

    def __init__(self, vocab_size: int, momentum: float = 0.9) -> None:
        super().__init__()
        if not 0.0 <= momentum < 1.0:
            raise ValueError(f"momentum must be in [0, 1), got {momentum}")
        self.momentum = momentum
        self.register_buffer("loss", torch.full((vocab_size,), math.log(vocab_size)))

    @torch.no_grad()
    def update(self, pieces: Tensor, losses: Tensor) -> None:
        """Fold in a batch: ``pieces`` (M,) the targets' true pieces, ``losses`` (M,) their
        cross-entropy; a piece that is a target several times counts with its batch mean."""
        total = torch.zeros_like(self.loss).index_add_(0, pieces, losses.to(self.loss.dtype))
        count = torch.zeros_like(self.loss).index_add_(0, pieces, torch.ones_like(total[pieces]))
        seen = count > 0
        self.loss[seen] = (self.momentum * self.loss[seen]
                           + (1.0 - self.momentum) * total[seen] / count[seen])

    def focus(self, batch: Batch, mask_token_id: int,
              generator: torch.Generator | None = None, fraction: float = 1.0) -> Batch:
        """A focused copy of a masked-language ``batch``: each caption with one content piece
        hidden (drawn in proportion to its running loss) and no other target. A caption with no
        content piece has no target in the copy.

        Reads the caption back from the batch (``labels`` at its targets, ``input_ids``
        elsewhere); the focused piece is always [MASK]. Returns new ``input_ids`` and ``labels``
        (B', T), the other keys unchanged. ``fraction`` < 1 copies only the first ⌈fraction·B⌉
        captions (B' of them; the loader shuffles, so they are a random sample): the copy is a
        second pass through the encoder, and a part of the batch costs that part of the pass
        (:class:`FocusedMaskedLM` checks it is in (0, 1] when the run is built).
        """
        count = math.ceil(fraction * len(batch["input_ids"]))
        if count < len(batch["input_ids"]):
            keep = torch.arange(len(batch["input_ids"]), device=batch["input_ids"].device) < count
            batch = select_captions(batch, keep)
        caption = original_caption(batch)  # (B, T)
        T = caption.shape[1]
        eligible = batch["content_mask"].bool() & batch["attention_mask"].bool()  # (B, T)
        focused = eligible.any(dim=1)  # (B,)
        # Rows with no content piece draw from a dummy weight (multinomial needs one positive).
        weight = torch.where(eligible, self.loss[caption].clamp_min(1e-6), 0.0)  # (B, T)
        weight = torch.where(focused[:, None], weight, 1.0)
        pick = torch.multinomial(weight, 1, generator=generator).squeeze(1)  # (B,)
        target = F.one_hot(pick, T).bool() & focused[:, None]  # (B, T)
        return {
            **batch,
            "input_ids": caption.masked_fill(target, mask_token_id),
            "labels": caption.masked_fill(~target, IGNORE_INDEX),
        }
