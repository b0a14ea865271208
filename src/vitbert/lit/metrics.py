"""Masked-word accuracy with the photo, with another image's photo, and without any.

All figures are micro-averaged over masked tokens (every masked piece counts once, however the
batches are cut), synchronised across DDP ranks by torchmetrics. Most masked pieces are function
words ("a", "the", "of") that the text alone predicts; the ``_content`` figures restrict to pieces
of content words, which is where the photo can help.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn
from torchmetrics import MeanMetric, SumMetric
from torchmetrics.classification import MulticlassAccuracy

from vitbert.data.masking import IGNORE_INDEX
from vitbert.lit.conditions import ANOTHER_PHOTO, CONDITIONS, TEXT_ONLY, Condition

TOP_K = (1, 5, 10)
# Captions left out of the another-photo reading: no other image in their batch.
SKIPPED = f"skipped{ANOTHER_PHOTO.suffix}"


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
    """One :class:`_ConditionMetrics` per condition, and the image gains derived from them.

    ``compute()`` returns plain floats keyed ``top1``, ``top5_text``, ``top1_mismatch_content``,
    ``loss``, ``image_gain_top1`` (with the photo minus another image's photo: the headline),
    ``image_gain_vs_text_top1`` (with the photo minus text only), their ``_content`` versions,
    and ``skipped_mismatch``; the caller adds the stage prefix.
    """

    def __init__(self, vocab_size: int) -> None:
        super().__init__()
        self.conditions = nn.ModuleDict({c.key: _ConditionMetrics(vocab_size) for c in CONDITIONS})
        self.skipped = SumMetric()

    def update(self, condition: Condition, logits: Tensor, targets: Tensor, is_content: Tensor,
               skipped: int = 0) -> None:
        """One condition's reading; ``skipped`` counts captions it could not read."""
        if len(targets):
            self.conditions[condition.key].update(logits, targets, is_content)
        if condition is ANOTHER_PHOTO:
            self.skipped.update(skipped)

    def update_readings(self, readings: dict[Condition, tuple[Tensor | None, Tensor]],
                        labels: Tensor, content_mask: Tensor) -> None:
        """Every condition of :func:`vitbert.lit.conditions.read` (logits (M_c, V) at the targets
        of the captions it reads, which it reads (B,) bool) against ``labels`` (B, T)."""
        for condition, (logits, reads) in readings.items():
            targets_at = (labels != IGNORE_INDEX) & reads[:, None]  # (B, T)
            self.update(condition, logits, labels[targets_at], content_mask[targets_at],
                        skipped=int((~reads).sum()))

    def compute(self) -> dict[str, float]:
        figures: dict[str, float] = {SKIPPED: self.skipped.compute().item()}
        for condition in CONDITIONS:
            figures |= self.conditions[condition.key].compute(condition.suffix)
        for k in TOP_K:
            for content in ("", "_content"):
                with_photo = figures[f"top{k}{content}"]
                figures[f"image_gain_top{k}{content}"] = (
                    with_photo - figures[f"top{k}{ANOTHER_PHOTO.suffix}{content}"])
                figures[f"image_gain_vs_text_top{k}{content}"] = (
                    with_photo - figures[f"top{k}{TEXT_ONLY.suffix}{content}"])
        return figures

    def logged(self, stage: str) -> dict[str, float]:
        """The epoch's figures keyed ``{stage}/{name}``, for ``log_dict``; then a fresh start."""
        figures = {f"{stage}/{name}": value for name, value in self.compute().items()}
        self.reset()
        return figures

    def reset(self) -> None:
        self.skipped.reset()
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

