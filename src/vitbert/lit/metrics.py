"""Masked-word accuracy with the photo, with another image's photo, and without any.

All figures are micro-averaged over masked tokens (every masked piece counts once, however the
batches are cut), synchronised across DDP ranks by torchmetrics. Most masked pieces are function
words ("a", "the", "of") that the text alone predicts; the ``_content`` figures restrict to pieces
of content words, which is where the photo can help.

Caption metrics (:class:`CaptionMetrics`): BLEU-4 (torchmetrics) and CIDEr-D against all references
of each image. CIDEr-D (Vedantam et al. 2015) is the coco-caption implementation's arithmetic
(``pycocoevalcap`` ``cider_scorer.py``, which is CIDEr-D despite its name): TF-IDF vectors of 1- to
4-grams, IDF from the references of the images scored, clipped cosine similarity, a Gaussian penalty
(σ = 6) on the length difference, the mean over references, ×10. The test checks it against that
implementation's output. coco-caption tokenises with Stanford's PTBTokenizer (Java) and drops
punctuation; :func:`tokenize` lower-cases and keeps runs of letters and digits, which is the same
for captions like ours, with no Java.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

import torch.nn.functional as F
from torch import Tensor, nn
from torchmetrics import MeanMetric, SumMetric
from torchmetrics.classification import MulticlassAccuracy
from torchmetrics.text import BLEUScore

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


_WORD = re.compile(r"[a-z0-9]+")


def tokenize(text: str) -> list[str]:
    """Lower-cased words, punctuation dropped: ``"A dog's ball."`` → ``[a, dog, s, ball]``."""
    return _WORD.findall(text.lower())


def _ngrams(words: Sequence[str], n: int) -> Counter:
    return Counter(tuple(words[i:i + k]) for k in range(1, n + 1)
                   for i in range(len(words) - k + 1))


def cider_d(candidates: Sequence[str], references: Sequence[Sequence[str]], n: int = 4,
            sigma: float = 6.0) -> tuple[float, list[float]]:
    """(corpus CIDEr-D, per-image scores): one candidate and its references per image."""
    if len(candidates) != len(references) or not candidates:
        raise ValueError(f"{len(candidates)} candidates for {len(references)} reference sets")
    cands = [_ngrams(tokenize(c), n) for c in candidates]
    refs = [[_ngrams(tokenize(r), n) for r in rs] for rs in references]
    # Document frequency: in how many images' references each n-gram occurs.
    df = Counter(g for rs in refs for g in set().union(*rs))
    log_images = math.log(float(len(refs)))

    def vector(counts: Counter) -> tuple[list[dict], list[float], int]:
        vec: list[dict] = [{} for _ in range(n)]
        for gram, tf in counts.items():
            vec[len(gram) - 1][gram] = tf * (log_images - math.log(max(1.0, df[gram])))
        norms = [math.sqrt(sum(w * w for w in v.values())) for v in vec]
        # The reference counts bigrams as the length (words - 1); kept, so the figures match.
        length = sum(tf for gram, tf in counts.items() if len(gram) == 2)
        return vec, norms, length

    scores = []
    for cand, rs in zip(cands, refs, strict=True):
        vec, norm, length = vector(cand)
        total = 0.0
        for ref in rs:
            rvec, rnorm, rlength = vector(ref)
            penalty = math.exp(-((length - rlength) ** 2) / (2 * sigma**2))
            for k in range(n):
                # Clipped: a candidate n-gram counts at most as much as the reference gives it.
                dot = sum(min(w, rvec[k].get(g, 0.0)) * rvec[k].get(g, 0.0)
                          for g, w in vec[k].items())
                if norm[k] and rnorm[k]:
                    dot /= norm[k] * rnorm[k]
                total += dot * penalty / n
        scores.append(10.0 * total / len(rs))
    return sum(scores) / len(scores), scores


class CaptionMetrics:
    """Collects (caption, references) pairs; :meth:`compute` gives BLEU-4 and CIDEr-D."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.candidates: list[str] = []
        self.references: list[list[str]] = []

    def update(self, candidates: Sequence[str], references: Sequence[Sequence[str]]) -> None:
        self.candidates += list(candidates)
        self.references += [list(r) for r in references]

    def compute(self) -> dict[str, float]:
        bleu = BLEUScore(n_gram=4)
        return {
            "bleu4": float(bleu([" ".join(tokenize(c)) for c in self.candidates],
                                [[" ".join(tokenize(r)) for r in rs] for rs in self.references])),
            "cider": cider_d(self.candidates, self.references)[0],
        }
