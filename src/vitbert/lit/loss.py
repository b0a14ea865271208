"""The training objective: cross-entropy at the masked pieces only, each caption with its photo.

Used by :class:`vitbert.lit.module.MaskedLMModule` and by the training-step benchmark
(``vitbert.bench.step``), so the benchmark times the loss that trains.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from vitbert.data.features import batch_image, image_argument
from vitbert.data.masking import IGNORE_INDEX
from vitbert.models.multimodal import AttentionMode

Batch = dict[str, Tensor]


def masked_logits(net: nn.Module, batch: Batch, images: Tensor | None,
                  attention_mode: AttentionMode = "bidirectional") -> Tensor:
    """Logits (M, V) at the targets of ``batch``, each caption seeing ``images`` (or nothing).

    ``images`` are pixels, or a frozen tower's cached features when the batch carries those
    (``vitbert.data.features``); the model is called with the keyword that fits, and with the
    batch's ``image_index`` when it has one (``images`` are then its P distinct photos).
    """
    return net(batch["input_ids"], batch["attention_mask"], **image_argument(batch, images),
               target_mask=batch["labels"] != IGNORE_INDEX, attention_mode=attention_mode)


def masked_lm_loss(net: nn.Module, batch: Batch,
                   attention_mode: AttentionMode = "bidirectional") -> Tensor:
    """Mean cross-entropy over the batch's M targets, each caption seeing its own photo
    (under the bidirectional mask for MLM, the seq2seq one for caption generation)."""
    logits = masked_logits(net, batch, batch_image(batch), attention_mode)  # (M, V)
    return F.cross_entropy(logits.float(), batch["labels"][batch["labels"] != IGNORE_INDEX])


def masked_lm_losses(net: nn.Module, batch: Batch,
                     attention_mode: AttentionMode = "bidirectional") -> tuple[Tensor, Tensor]:
    """:func:`masked_lm_loss` target by target: the cross-entropy (M,) and the true piece (M,)
    of each of the batch's M targets (what :mod:`vitbert.lit.focus` learns from)."""
    logits = masked_logits(net, batch, batch_image(batch), attention_mode)  # (M, V)
    pieces = batch["labels"][batch["labels"] != IGNORE_INDEX]  # (M,)
    return F.cross_entropy(logits.float(), pieces, reduction="none"), pieces
