"""Twin photos: for a caption, the photos of other captions that use the same content words with
two of them exchanged.

"a small red circle left of a large blue square" and "a small blue circle left of a large red
square" name the same things; only what is bound to what differs. Shown the first caption with
a word of the exchange hidden, a model that fills by elimination (the colour the caption has not
named yet) answers the same under both photos; one that binds answers each photo differently.
:mod:`vitbert.lit.twins` turns that into a loss. No word list decides what may be exchanged: the
training captions themselves do (two captions of different photos whose content words, in
order, differ by one exchange), as NegCLIP's swaps are made, but from photos that exist.

Content words are the words outside :data:`vitbert.data.masking.STOP_WORDS`, split as BERT's
pre-tokenizer splits (runs of letters and digits; each punctuation mark alone), so a word's
characters are those of the tokenizer's word and the collator finds its pieces by their offsets.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import torch
from torch.utils.data import Dataset

from .features import TWIN_IMAGES
from .masking import STOP_WORDS, TWIN_SPANS

WORD = re.compile(r"\w+|[^\w\s]")
MAX_TWINS = 4  # photos an item carries; the collator draws one (more cost loading, teach little)


def content_words(caption: str) -> list[tuple[str, int, int]]:
    """(word lowercased, start, end) for each content word of ``caption``, in order."""
    return [(m.group().lower(), m.start(), m.end()) for m in WORD.finditer(caption)
            if m.group().lower() not in STOP_WORDS]


def find_twins(captions: Sequence[str], photos: Sequence[int]
               ) -> list[list[tuple[int, tuple[int, int]]]]:
    """For each caption, its twins: ``(other caption, (i, j))`` where the other caption is of
    another photo and its content words are this one's with words ``i`` and ``j`` (content-word
    places, i < j, different words) exchanged.

    Captions are grouped by their bag of content words first, so the work is the sum of the
    squared group sizes, not the square of the data set.
    """
    words = [tuple(w for w, _, _ in content_words(c)) for c in captions]
    groups: dict[tuple[str, ...], list[int]] = defaultdict(list)
    for k, w in enumerate(words):
        if len(w) >= 2:
            groups[tuple(sorted(w))].append(k)
    twins: list[list[tuple[int, tuple[int, int]]]] = [[] for _ in captions]
    for members in groups.values():
        for a_pos, a in enumerate(members):
            for b in members[a_pos + 1:]:
                if photos[a] == photos[b]:
                    continue
                places = [i for i, (x, y) in enumerate(zip(words[a], words[b], strict=True))
                          if x != y]
                if len(places) == 2:  # same bag, two places differ: they are exchanged
                    twins[a].append((b, (places[0], places[1])))
                    twins[b].append((a, (places[0], places[1])))
    return twins


class TwinPhotos(Dataset):
    """A caption data set whose items also carry their twins' photos (up to :data:`MAX_TWINS`)
    and, for each, the character spans of the two exchanged words in the item's own caption:
    ``twin_images`` uint8 (K, 3, S, S), ``twin_spans`` [(start, end), (start, end)] × K. Items
    without a twin carry K = 0. The collator draws one twin per caption (:class:`MLMCollator`).
    """

    def __init__(self, dataset: Dataset) -> None:
        self.dataset = dataset
        self.captions = dataset.captions
        self.rows = dataset.rows
        self.twins = find_twins(self.captions, [int(r) for r in self.rows])

    def __len__(self) -> int:
        return len(self.dataset)

    def share(self) -> float:
        """The share of captions with at least one twin."""
        return sum(bool(t) for t in self.twins) / max(len(self.twins), 1)

    def __getitem__(self, i: int) -> dict[str, Any]:
        item = self.dataset[i]
        twins = self.twins[i][:MAX_TWINS]
        spans = content_words(self.captions[i])
        item[TWIN_SPANS] = [[spans[p][1:] for p in places] for _, places in twins]
        images = [self.dataset[other]["image"] for other, _ in twins]
        item[TWIN_IMAGES] = (torch.stack(images) if images
                             else torch.zeros(0, *item["image"].shape, dtype=torch.uint8))
        return item
