"""The generation objective: turn an MLM batch into a seq2seq batch (Unified VLP, Zhou et al.).

One model learns both: a bidirectional batch (every word sees every word; 15-30% of the pieces
hidden) teaches it to fill a [MASK], a seq2seq batch (a word sees the image and the words to its
left) teaches it to write left to right. In a seq2seq batch each caption is hidden at its own
rate, drawn uniformly from (0, 1], so the model meets every amount of known left context, from
almost the whole caption down to none. The positions hidden are the caption's pieces and its
closing [SEP] (so the model learns where a caption ends), never the [CLS] that starts it (the
prompt decoding begins from) nor padding. Hidden pieces are always [MASK]: decoding predicts the
next word from a [MASK] placed after the words written so far, exactly what training shows.
"""

from __future__ import annotations

import torch
from torch import Tensor

from vitbert.data.masking import IGNORE_INDEX
from vitbert.models.multimodal import AttentionMode

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
    labels = batch["labels"]
    caption = torch.where(labels == IGNORE_INDEX, batch["input_ids"], labels)  # (B, T)
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
