"""Caption metrics: BLEU-4 (torchmetrics) and CIDEr-D against all references of each image.

CIDEr-D (Vedantam et al. 2015) is the coco-caption implementation's arithmetic (``pycocoevalcap``
``cider_scorer.py``, which is CIDEr-D despite its name): TF-IDF vectors of 1- to 4-grams, IDF
from the references of the images scored, clipped cosine similarity, a Gaussian penalty
(σ = 6) on the length difference, the mean over references, ×10. The test checks it against
that implementation's output. coco-caption tokenises with Stanford's PTBTokenizer (Java) and
drops punctuation; :func:`tokenize` lower-cases and keeps runs of letters and digits, which is
the same for captions like ours, with no Java. Figures only one data set can give (the shapes
data's colours and shapes) come from its source: ``vitbert.data.sources.DataSource.caption_scores``.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

from torchmetrics.text import BLEUScore

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
