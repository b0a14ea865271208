"""Masked-word accuracy with the photo, without it, and with someone else's photo.

All figures are micro-averaged over masked tokens (every masked piece counts once, however the
batches are cut), synchronised across DDP ranks by torchmetrics. Most masked pieces are function
words ("a", "the", "of") that the text alone predicts; the ``_content`` figures restrict to pieces
of content words, which is where the photo can help.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn
from torchmetrics import MeanMetric
from torchmetrics.classification import MulticlassAccuracy

TOP_K = (1, 5, 10)

# Each evaluation condition: a metric-name suffix and what the model sees.
CONDITIONS = {
    "": "with the photo",
    "_text": "text only",
    "_mismatch": "another example's photo",
}


class _ConditionMetrics(nn.Module):
    """Loss and top-k accuracy for one condition, over all masked pieces and over content words."""

    def __init__(self, vocab_size: int) -> None:
        super().__init__()
        self.loss = MeanMetric()
        self.accuracy = _top_k_accuracies(vocab_size)
        self.content_accuracy = _top_k_accuracies(vocab_size)

    def update(self, logits: Tensor, targets: Tensor, is_content: Tensor) -> None:
        """logits (M, V), targets (M,), is_content (M,) bool."""
        logits = logits.float()
        self.loss.update(F.cross_entropy(logits, targets, reduction="none"))
        for metric in self.accuracy.values():
            metric.update(logits, targets)
        if is_content.any():
            for metric in self.content_accuracy.values():
                metric.update(logits[is_content], targets[is_content])

    def compute(self, suffix: str) -> dict[str, float]:
        figures = {f"loss{suffix}": self.loss.compute().item()}
        for name, metric in self.accuracy.items():
            figures[f"{name}{suffix}"] = metric.compute().item()
        for name, metric in self.content_accuracy.items():
            # Computed on every rank even when this one saw no content word: compute() is a
            # collective under DDP, and an empty metric reads as 0.
            figures[f"{name}{suffix}_content"] = metric.compute().item()
        return figures

    def reset(self) -> None:
        self.loss.reset()
        for metric in (*self.accuracy.values(), *self.content_accuracy.values()):
            metric.reset()


class MaskedLMMetrics(nn.Module):
    """One :class:`_ConditionMetrics` per condition, and the image gain derived from them.

    ``compute()`` returns plain floats keyed ``top1``, ``top5_text``, ``top1_mismatch_content``,
    ``loss``, ``image_gain_top1``, ``image_gain_top1_content``, …; the caller adds the stage prefix.
    """

    def __init__(self, vocab_size: int) -> None:
        super().__init__()
        self.conditions = nn.ModuleDict(
            {_key(suffix): _ConditionMetrics(vocab_size) for suffix in CONDITIONS}
        )

    def update(self, suffix: str, logits: Tensor, targets: Tensor, is_content: Tensor) -> None:
        self.conditions[_key(suffix)].update(logits, targets, is_content)

    def compute(self) -> dict[str, float]:
        figures: dict[str, float] = {}
        for suffix in CONDITIONS:
            figures |= self.conditions[_key(suffix)].compute(suffix)
        for k in TOP_K:
            figures[f"image_gain_top{k}"] = figures[f"top{k}"] - figures[f"top{k}_text"]
            figures[f"image_gain_top{k}_content"] = (
                figures[f"top{k}_content"] - figures[f"top{k}_text_content"]
            )
        return figures

    def reset(self) -> None:
        for condition in self.conditions.values():
            condition.reset()


def _top_k_accuracies(vocab_size: int) -> nn.ModuleDict:
    # A tiny test vocabulary may have fewer than k entries: then "top k" is "any of them".
    return nn.ModuleDict(
        {
            f"top{k}": MulticlassAccuracy(vocab_size, top_k=min(k, vocab_size), average="micro")
            for k in TOP_K
        }
    )


def _key(suffix: str) -> str:
    # ModuleDict keys cannot be empty.
    return suffix.lstrip("_") or "image"
