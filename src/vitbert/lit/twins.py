"""The twin contrast: a hidden word must be likelier under its own photo than under its twin's.

A caption's twin photo (:mod:`vitbert.data.twins`) belongs to a caption with the same content
words, two of them exchanged: "a small [MASK] circle left of a large blue square" under its own
photo (a red circle) and under the twin's (a blue circle beside a red square). Filling by
elimination ("the colour not named yet") answers *red* under both; only reading the circle's
colour tells them apart. The masked-language loss never asks for that difference; this loss
does, at each hidden piece of an exchanged word, under the batch's MLM mask:

    loss = softplus(s_twin - s_own),  s = z_true - logsumexp(z_other)

where z are the logits at the hidden piece and s the log-odds of the true piece. Log-odds, not
log-probabilities: once the true piece is near-certain under the own photo, log p saturates near 0
and the contrast stops teaching, while the log-odds keep a margin to push. At chance (the same
answer under both photos) the loss is ln 2.

The contrast trains the neighbour lookup (:mod:`vitbert.models.lookup`), the tower it reads and
the head, not the joint encoder: its gradient stops at the encoder's word rows. Why: the encoder
cannot bind (a two-step circuit its blocks do not find), so what the contrast taught it was to
stop filling by elimination, and elimination is how a caption written left to right names its
second object (its colour comes before anything that says which object it is). Measured on the
embedded default (docs/binding.md): greedy captions with both objects right went from 86% and
19.5% at seeds 0 and 1 to about 48% at both, reranked ones hold at 85-88% at both (67% at seed 1
before), binding unchanged.

Cost: one extra pass of the joint encoder over the captions with a hidden exchanged word, each
with both photos, and one image-tower pass over the twins' photos.
"""

from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vitbert.data.features import (
    FEATURES_KEY,
    IMAGE_INDEX,
    TWIN_IMAGES,
    TWIN_INDEX,
    caption_photos,
)
from vitbert.data.masking import IGNORE_INDEX, TWIN_MASK

Batch = dict[str, Tensor]


def log_odds(logits: Tensor, target: Tensor) -> Tensor:
    """(M, V) logits, (M,) true piece → (M,) log p / (1 - p) of the true piece, computed stably."""
    true = logits.gather(1, target[:, None]).squeeze(1)  # (M,)
    others = logits.scatter(1, target[:, None], float("-inf"))  # (M, V) without the true piece
    return true - others.logsumexp(dim=1)


def check_twin_settings(twin_weight: float, twin_photos: bool, lookup_heads: int) -> None:
    """At fit start, not at the first training step: the contrast needs the data's twin photos
    and a neighbour lookup to train, and twin photos without the contrast are loaded for
    nothing."""
    if twin_weight and not lookup_heads:
        raise ValueError(f"model.twin_weight {twin_weight} trains the neighbour lookup, which this "
                         f"model lacks: add --model.net.neighbour_lookup_heads 4 (or set "
                         f"model.twin_weight 0)")
    if twin_weight and not twin_photos:
        raise ValueError(f"model.twin_weight {twin_weight} needs batches that carry twin photos: "
                         f"add --data.twin_photos true (or set model.twin_weight 0)")
    if twin_photos and not twin_weight:
        warnings.warn("data.twin_photos loads a twin photo for every training caption, which only "
                      "the twin contrast reads: set model.twin_weight (e.g. 1) or leave "
                      "data.twin_photos off", stacklevel=2)


def twin_contrast_loss(net: nn.Module, batch: Batch, encoder_grad: bool = False) -> Tensor:
    """Mean softplus(s_twin - s_own) over the hidden pieces of exchanged words (module doc);
    ``encoder_grad`` True lets it train the joint encoder too (the module doc says why not).

    ``batch`` is an MLM batch whose photos went through the tower already
    (:func:`vitbert.lit.objectives.with_tower_output`) and which carries ``twin_images``,
    ``twin_index`` and ``twin_mask`` (:class:`vitbert.data.masking.MLMCollator`). A batch where
    no exchanged word is hidden gives a zero that keeps the graph.
    """
    if TWIN_INDEX not in batch:
        raise ValueError("model.twin_weight needs batches that carry twin photos: set "
                         "data.twin_photos: true")
    targets = batch[TWIN_MASK] & (batch["labels"] != IGNORE_INDEX)  # (B, T)
    rows = ((batch[TWIN_INDEX] >= 0) & targets.any(dim=1)).nonzero().squeeze(1)  # (R,)
    own_photos = batch[FEATURES_KEY]  # (P, N, D_img)
    if not len(rows):
        return own_photos.sum() * 0.0
    twin_photos = net.tower_tokens(batch[TWIN_IMAGES])  # (K, N, D_img)
    photos = torch.cat((own_photos, twin_photos))  # (P + K, N, D_img)
    own = caption_photos(batch)[rows]  # (R,)
    twin = len(own_photos) + batch[TWIN_INDEX][rows]  # (R,)
    ids, keep = batch["input_ids"][rows], batch["attention_mask"][rows]  # (R, T)
    logits = net(ids.repeat(2, 1), keep.repeat(2, 1), image_features=photos,
                 target_mask=targets[rows].repeat(2, 1),
                 encoder_grad=encoder_grad,
                 **{IMAGE_INDEX: torch.cat((own, twin))})  # (2M, V): own's M, then twin's M
    true = batch["labels"][rows][targets[rows]]  # (M,)
    s_own, s_twin = log_odds(logits.float(), true.repeat(2)).chunk(2)  # (M,) each
    return F.softplus(s_twin - s_own).mean()
