"""The shapes data's own caption score: does a caption name both objects' colours and shapes?

BLEU-4 and CIDEr-D (:mod:`vitbert.lit.metrics`) score any caption; on the shapes data
the question that matters is narrower, and only this data can ask it: are the (colour, shape)
pairs the caption names exactly the picture's? :func:`colour_shape_shares` answers it for a set
of captions (``scripts/analyze.py --captions``), and :func:`object_verdicts` says, object by
object, what went wrong when a caption misses (:mod:`vitbert.shapes.analysis`).
:func:`binding_swaps` makes the binding test's negatives of a shapes caption
(:mod:`vitbert.shapes.binding`).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

from vitbert.shapes.data import COLOURS, SHAPES

# A colour word followed by a shape word: how the shapes captions name an object.
COLOUR_SHAPE = re.compile(rf"\b({'|'.join(COLOURS)}) ({'|'.join(SHAPES)})\b")
# The shares :func:`colour_shape_shares` gives, with their labels in the end-of-training table:
# the headline first, then its parts.
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


_OPPOSITE = {"left": "right", "right": "left", "above": "below", "below": "above"}


def binding_swaps(caption: str) -> list[tuple[str, str]]:
    """The binding test's negatives of a shapes caption (:mod:`vitbert.lit.binding`): the two
    objects' colours swapped (``colour``) and their shapes swapped (``shape``), each only when
    the two differ, and the relation turned to its opposite (``relation``: left ↔ right,
    above ↔ below). The same words about the same picture; only what is bound to what changes."""
    words = caption.split()
    negatives = []
    for kind, vocabulary in (("colour", COLOURS), ("shape", SHAPES)):
        at = [i for i, word in enumerate(words) if word in vocabulary]
        if len(at) == 2 and words[at[0]] != words[at[1]]:
            swapped = list(words)
            swapped[at[0]], swapped[at[1]] = words[at[1]], words[at[0]]
            negatives.append((kind, " ".join(swapped)))
    at = [i for i, word in enumerate(words) if word in _OPPOSITE]
    if len(at) == 1:
        turned = list(words)
        turned[at[0]] = _OPPOSITE[words[at[0]]]
        negatives.append(("relation", " ".join(turned)))
    return negatives
