"""Hard negatives made from the caption itself: two of its words swapped.

A model that reads a picture as a bag of words ("bags-of-words" VLMs, Yuksekgonul et al. 2023,
ARO) cannot tell "a small red circle left of a large blue square" from the same caption with
the two colours swapped: the same words, the same things in the picture, only the binding of
what to which differs. NegCLIP trains on such swaps; it chooses the words to swap with a
part-of-speech tagger (two nouns, two adjectives). Here no tagger and no word list: two words are
swapped when every *word pair* the swap creates is one the training captions use
(:class:`WordPairs`). "red" and "blue" both follow "small" and precede "circle", so they swap;
"red" and "circle" do not ("small circle red" is not a pair the captions use). On real captions
this picks nouns for nouns and adjectives for adjectives without knowing either.

The binding evaluation (:mod:`vitbert.lit.binding`) scores the true caption against them.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable

import torch
from torch import Tensor


class WordPairs:
    """The set of adjacent piece pairs (a, b) that occur in a body of captions (special tokens
    included, so "first word" and "last word" are pairs with [CLS] and [SEP]).

    Stored as a sorted tensor of ``a * V + b``, looked up with ``searchsorted``: a few thousand
    pairs for the shapes captions, a few hundred thousand for Flickr30k.
    """

    def __init__(self, codes: Tensor, vocab_size: int) -> None:
        self.codes = torch.unique(codes.long())  # sorted
        self.vocab_size = vocab_size

    @classmethod
    def from_ids(cls, rows: Iterable[list[int]], vocab_size: int) -> WordPairs:
        """From token id lists (each a whole encoded caption, [CLS] … [SEP])."""
        codes = [a * vocab_size + b for ids in rows for a, b in itertools.pairwise(ids)]
        return cls(torch.tensor(codes, dtype=torch.long), vocab_size)

    @classmethod
    def from_captions(cls, tokenizer, captions: Iterable[str], max_length: int = 512
                      ) -> WordPairs:
        """From caption strings, tokenised as training tokenises them."""
        ids = tokenizer(list(captions), truncation=True, max_length=max_length)["input_ids"]
        return cls.from_ids(ids, len(tokenizer))

    def __len__(self) -> int:
        return len(self.codes)

    def seen(self, a: Tensor, b: Tensor) -> Tensor:
        """Whether each pair (a, b) occurs (same shapes in and out)."""
        codes = self.codes.to(a.device)
        query = a.long() * self.vocab_size + b.long()
        at = torch.searchsorted(codes, query).clamp(max=len(codes) - 1)
        return codes[at] == query

    def to(self, device: torch.device | str) -> WordPairs:
        return WordPairs(self.codes.to(device), self.vocab_size)


def whole_words(ids: Tensor, continuation: Tensor) -> Tensor:
    """(B, T) bool: pieces that are a whole word, neither a ``##`` continuation nor followed by
    one (``continuation`` (V,) bool marks the continuation pieces). Swapping a piece of a longer
    word would make a word the captions do not use."""
    cont = continuation.to(ids.device)[ids]  # (B, T)
    next_cont = torch.zeros_like(cont)
    next_cont[:, :-1] = cont[:, 1:]
    return ~cont & ~next_cont


def continuation_pieces(tokenizer) -> Tensor:
    """(V,) bool: which pieces of the vocabulary continue a word (WordPiece's ``##``)."""
    flags = torch.zeros(len(tokenizer), dtype=torch.bool)
    for piece, index in tokenizer.get_vocab().items():
        flags[index] = piece.startswith("##")
    return flags


def swap_candidates(ids: Tensor, swappable: Tensor, pairs: WordPairs) -> Tensor:
    """(K, 3) every (row, i, j), i < j, where swapping the pieces at i and j of ``ids`` (B, T)
    keeps every adjacent pair one the captions use; both positions ``swappable`` (B, T) and the
    two pieces different.

    The pairs a swap changes: (x[i-1], x[j]), (x[j], x[i+1]), (x[j-1], x[i]), (x[i], x[j+1]); when
    j = i + 1 the middle two are the one pair (x[j], x[i]). Position 0 ([CLS]) and the last
    ([SEP] or padding) are never swappable, so i - 1 and j + 1 exist.
    """
    T = ids.shape[1]
    swappable = swappable.clone()
    swappable[:, 0] = False
    swappable[:, -1] = False
    base = swappable[:, :, None] & swappable[:, None, :]  # (B, T, T)
    base &= torch.ones(T, T, dtype=torch.bool, device=ids.device).triu(1)
    base &= ids[:, :, None] != ids[:, None, :]
    row, i, j = base.nonzero(as_tuple=True)  # (K,) each
    x = ids
    adjacent = j == i + 1
    ok = pairs.seen(x[row, i - 1], x[row, j]) & pairs.seen(x[row, i], x[row, j + 1])
    middle = pairs.seen(x[row, j], x[row, i + 1]) & pairs.seen(x[row, j - 1], x[row, i])
    ok &= torch.where(adjacent, pairs.seen(x[row, j], x[row, i]), middle)
    return torch.stack((row, i, j), dim=1)[ok]


def swap_negatives(ids: Tensor, swappable: Tensor, pairs: WordPairs,
                   generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
    """One swapped copy per caption of ``ids`` (B, T), the swap drawn uniformly among
    :func:`swap_candidates`; and which captions have one (B,) bool (a caption with no
    candidate is returned unchanged and False)."""
    candidates = swap_candidates(ids, swappable, pairs)  # (K, 3)
    B = len(ids)
    has = torch.zeros(B, dtype=torch.bool, device=ids.device)
    negative = ids.clone()
    if len(candidates) == 0:
        return negative, has
    # A uniform pick per row: the candidate with the largest random key in its row.
    key = torch.rand(len(candidates), generator=generator, device="cpu").to(ids.device)
    best = torch.full((B,), -1.0, device=ids.device).scatter_reduce(
        0, candidates[:, 0], key, "amax")
    chosen = candidates[key == best[candidates[:, 0]]]  # (B', 3), one per row with candidates
    row, i, j = chosen.unbind(1)
    negative[row, i], negative[row, j] = ids[row, j], ids[row, i]
    has[row] = True
    return negative, has


class SwapNegatives:
    """Swapped copies of captions, the swaps those a body of captions allows
    (:func:`swap_negatives` over the whole words of the content pieces given)."""

    def __init__(self, pairs: WordPairs, continuation: Tensor) -> None:
        self.pairs = pairs
        self.continuation = continuation

    @classmethod
    def from_captions(cls, tokenizer, captions: Iterable[str], max_length: int = 512
                      ) -> SwapNegatives:
        """The word pairs of ``captions`` (the training captions) under ``tokenizer``."""
        return cls(WordPairs.from_captions(tokenizer, captions, max_length),
                   continuation_pieces(tokenizer))

    def __call__(self, ids: Tensor, content: Tensor, generator: torch.Generator | None = None
                 ) -> tuple[Tensor, Tensor]:
        """``ids`` (B, T) with two of their ``content`` (B, T) words swapped, and which have a
        swap (B,) bool; see :func:`swap_negatives`."""
        swappable = content & whole_words(ids, self.continuation)
        return swap_negatives(ids, swappable, self.pairs, generator)
