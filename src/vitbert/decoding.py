"""Reading the model's output: the words it guesses at each [MASK]. One owner for it, here.

Used by :class:`vitbert.predict.FillMask` (``scripts/predict.py``), the LightningModule's
``predict_step`` (``train.py predict``) and the example predictions printed at validation, so all
three offer the same guesses. Scores are probabilities over the whole vocabulary (softmax of the
logits, as in the transformers fill-mask pipeline); special tokens ([PAD], [CLS], [SEP], [MASK],
[UNK]) are never offered. Caption decoding (greedy, beam, mask-predict) belongs here as well.

Record shape (``scripts/predict.py --json`` and ``train.py predict`` alike)::

    {"index": example id, "image_id": (train.py only), "text": the masked text,
     "masks": [{"index": i-th [MASK], "truth": (train.py only),
                "with_image": [guess, ...], "another_image": [...] (train.py only),
                "text_only": [...]}]}

where a guess is ``{"score", "token", "token_str"}`` (plus ``"sequence"`` from FillMask's call).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from vitbert.data.masking import IGNORE_INDEX

Guess = dict[str, Any]


def special_token_ids(tokenizer) -> Tensor:
    """(S,) the ids never offered as a guess."""
    return torch.tensor(sorted(set(tokenizer.all_special_ids)), dtype=torch.long)


def top_k(logits: Tensor, k: int, exclude: Tensor) -> tuple[Tensor, Tensor]:
    """(scores, token ids), each (M, k'), best first, k' = min(k, V - excluded).

    ``logits`` (M, V); scores are probabilities over the whole vocabulary, the excluded ids
    included in the normalisation (as the pipeline does) but never returned.
    """
    probs = logits.float().softmax(dim=-1)  # (M, V)
    probs[:, exclude.to(probs.device)] = -1.0
    top = probs.topk(min(k, probs.shape[-1] - len(exclude)), dim=-1)  # (M, k')
    return top.values, top.indices


def guesses(logits: Tensor, k: int, tokenizer) -> list[list[Guess]]:
    """Per row of ``logits`` (M, V), ``k`` guesses ``{"score", "token", "token_str"}``."""
    scores, ids = top_k(logits, k, special_token_ids(tokenizer))
    decode = tokenizer.decode  # "##ing" stays "##ing", as in the pipeline
    return [
        [{"score": score, "token": token, "token_str": decode([token])}
         for score, token in zip(row_scores, row_ids, strict=True)]
        for row_scores, row_ids in zip(scores.tolist(), ids.tolist(), strict=True)
    ]


def masked_text(tokenizer, ids: list[int]) -> str:
    """The text of ``ids`` without [CLS], [SEP] and [PAD]; [MASK] stays visible."""
    hidden = {tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.pad_token_id}
    return tokenizer.decode([i for i in ids if i not in hidden], skip_special_tokens=False)


def fill(tokenizer, ids: list[int], position: int, token: int) -> str:
    """The pipeline's ``sequence``: the text with the piece at ``position`` replaced by ``token``
    (other [MASK]s stay), without [CLS], [SEP] and [PAD]."""
    return masked_text(tokenizer, [*ids[:position], token, *ids[position + 1:]])


def show_targets_as_mask(batch: dict[str, Tensor], mask_token_id: int) -> dict[str, Tensor]:
    """Every target shown as [MASK] (not BERT's 10% random / 10% kept), for reading guesses."""
    targets_at = batch["labels"] != IGNORE_INDEX  # (B, T)
    return {**batch, "input_ids": batch["input_ids"].masked_fill(targets_at, mask_token_id)}


def prediction_records(
    tokenizer, batch: dict[str, Tensor], readings: Mapping[str, tuple[Tensor, Tensor]], k: int
) -> list[dict[str, Any]]:
    """One record per caption of a collated batch (the shape in the module docstring).

    ``readings`` maps a condition's key to (logits (M_r, V) at the targets of the captions it
    read, in reading order, or None when it read none; which captions it read (B,) bool). A
    caption a reading skipped gets ``None`` there.
    """
    targets_at = batch["labels"] != IGNORE_INDEX  # (B, T)
    by_position: dict[str, dict[tuple[int, int], list[Guess]]] = {}
    for key, (logits, read) in readings.items():
        if logits is None:
            by_position[key] = {}
            continue
        positions = (targets_at & read[:, None].to(targets_at.device)).nonzero().tolist()
        by_position[key] = dict(zip(map(tuple, positions), guesses(logits, k, tokenizer),
                                    strict=True))
    records = []
    for b in range(len(batch["input_ids"])):
        record: dict[str, Any] = {"index": int(batch["index"][b])}
        if "image_id" in batch:
            record["image_id"] = int(batch["image_id"][b])
        record["text"] = masked_text(tokenizer, batch["input_ids"][b].tolist())
        record["masks"] = [
            {"index": i, "truth": tokenizer.decode([int(batch["labels"][b, t])]),
             **{key: found.get((b, t)) for key, found in by_position.items()}}
            for i, t in enumerate(targets_at[b].nonzero(as_tuple=True)[0].tolist())
        ]
        records.append(record)
    return records
