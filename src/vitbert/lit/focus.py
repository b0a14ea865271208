"""Focused masking: hide the word the model finds hardest, and show it the rest of the caption.

Random masking (BERT's 15%, the embedded default's 30%) spends the targets on the words that
occur, whatever is left to learn about them. On the shapes captions a relation word ("left",
"above") is about one target in thirteen, and each hidden form word takes away what the colour
word beside it needed to find its object (the neighbour lookup asks the photo about a word's
neighbours, :mod:`vitbert.models.lookup`). The model learnt colours and forms and never relations
(docs/binding.md).

A *focused* copy of a caption has one content piece hidden, drawn in proportion to the model's
running loss on that piece of the vocabulary, and every other piece in view: the words it has
solved ("red", once it reads hue) are rarely drawn, the words it cannot fill yet often. No word
list: how hard a piece is comes from the model's own losses on the targets of the
masked-language batches, and which pieces may be drawn from the batch's ``content_mask`` (the
collator's function words are never drawn). On the shapes data the relation words become about
half of the focused targets.

The focused copies are trained *beside* the batch's random masks, not instead of them
(``MaskedLMModule(focus_weight=...)``, :func:`vitbert.lit.objectives.training_loss`): the random
fill is what the caption writer shares with the filler, and a run that focused its captions
instead wrote worse captions (reranked 55-68% against 85-91%; docs/binding.md).

:class:`PieceDifficulty` keeps the running losses (a buffer, so a checkpoint holds it and a
resumed run draws what the uninterrupted one would have).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vitbert.data.features import select_captions
from vitbert.data.masking import IGNORE_INDEX
from vitbert.lit.objectives import original_caption

Batch = dict[str, Tensor]


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
        (``MaskedLMModule(focus_fraction=...)`` checks it is in (0, 1] when the run is built).
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
