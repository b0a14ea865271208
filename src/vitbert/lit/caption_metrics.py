"""Caption metrics: BLEU-4 (torchmetrics) and CIDEr-D against all references of each image.

CIDEr-D (Vedantam et al. 2015) is the coco-caption implementation's arithmetic (``pycocoevalcap``
``cider_scorer.py``, which is CIDEr-D despite its name): TF-IDF vectors of 1- to 4-grams, IDF
from the references of the images scored, clipped cosine similarity, a Gaussian penalty
(σ = 6) on the length difference, the mean over references, ×10. The test checks it against
that implementation's output. coco-caption tokenises with Stanford's PTBTokenizer (Java) and
drops punctuation; :func:`tokenize` lower-cases and keeps runs of letters and digits, which is
the same for captions like ours, with no Java.

For the embedded shapes data, :func:`colours_and_shapes_right` asks the question that matters
there: does the caption name both objects' colours and shapes correctly? :func:`object_verdicts`
says, object by object, what went wrong when it does not.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

from torchmetrics.text import BLEUScore

from vitbert.data.shapes import COLOURS, SHAPES

_WORD = re.compile(r"[a-z0-9]+")
# A colour word followed by a shape word: how the shapes captions name an object.
COLOUR_SHAPE = re.compile(rf"\b({'|'.join(COLOURS)}) ({'|'.join(SHAPES)})\b")


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


def colours_and_shapes_right(candidate: str, reference: str) -> dict[str, bool] | None:
    """Whether the candidate names exactly the reference's (colour, shape) pairs, in any order
    (``colour_shape``), and, to tell which half fails, exactly its colours (``colours``) and its
    shapes (``shapes``), each as a multiset; None when the reference names none (not a shapes
    caption)."""
    wanted = Counter(COLOUR_SHAPE.findall(reference.lower()))
    if not wanted:
        return None
    named = Counter(COLOUR_SHAPE.findall(candidate.lower()))

    return {"colour_shape": named == wanted,
            "colours": _count(named, 0) == _count(wanted, 0),
            "shapes": _count(named, 1) == _count(wanted, 1)}


def colour_shape_shares(candidates: Sequence[str], references: Sequence[str]
                        ) -> dict[str, float] | None:
    """The share of candidates with :func:`colours_and_shapes_right`'s ``colour_shape``,
    ``colours`` and ``shapes`` right; None when a reference is not a shapes caption (or none)."""
    right = [colours_and_shapes_right(c, r) for c, r in zip(candidates, references, strict=True)]
    if not right or None in right:
        return None
    return {name: sum(r[name] for r in right) / len(right) for name in right[0]}


RIGHT, OTHER_OBJECT, OTHER_SHAPE, NOT_NAMED = "right", "other_object", "other_shape", "not_named"
VERDICTS = (RIGHT, OTHER_OBJECT, OTHER_SHAPE, NOT_NAMED)


def object_verdicts(candidate: str, reference: str) -> list[tuple[tuple[str, str], str]]:
    """Each (colour, shape) object the reference names, in its order, with what the candidate
    made of it: ``right`` (that pair is named); ``other_object`` (its colour is given the shape of
    another object of the picture: the two were bound wrongly); ``other_shape`` (its colour is
    given a shape the picture does not hold); ``not_named`` (no shape follows its colour).

    Exact pairs are matched first, as multisets, so a right object is never also counted as
    another's mistake.
    """
    wanted = COLOUR_SHAPE.findall(reference.lower())
    unmatched = Counter(COLOUR_SHAPE.findall(candidate.lower()))
    right = []
    for pair in wanted:
        right.append(unmatched[pair] > 0)
        if right[-1]:
            unmatched[pair] -= 1  # this named pair is spoken for
    verdicts = []
    for (colour, shape), is_right in zip(wanted, right, strict=True):
        others = {s for c, s in wanted if (c, s) != (colour, shape)}
        said = {s for c, s in unmatched.elements() if c == colour}
        verdict = (RIGHT if is_right else OTHER_OBJECT if said & others
                   else OTHER_SHAPE if said else NOT_NAMED)
        verdicts.append(((colour, shape), verdict))
    return verdicts


def _count(pairs: Counter, slot: int) -> Counter:
    """The colours (slot 0) or shapes (slot 1) of counted (colour, shape) pairs."""
    return Counter(pair[slot] for pair in pairs.elements())


class CaptionMetrics:
    """Collects (caption, references) pairs; :meth:`compute` gives BLEU-4, CIDEr-D and, when
    every reference is a shapes caption, the share with every colour and shape word right
    (``colour_shape``), with the colours alone right (``colours``) and the shapes alone
    (``shapes``)."""

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
        figures = {
            "bleu4": float(bleu([" ".join(tokenize(c)) for c in self.candidates],
                                [[" ".join(tokenize(r)) for r in rs] for rs in self.references])),
            "cider": cider_d(self.candidates, self.references)[0],
        }
        shares = colour_shape_shares(self.candidates, [rs[0] for rs in self.references])
        return figures | (shares or {})
