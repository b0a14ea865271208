"""Swapped-word negatives: which swaps the captions allow, and the noise they put in MLM batches."""

from __future__ import annotations

import pytest
import torch

from vitbert.data.tokenizer import train_wordpiece
from vitbert.lit.negatives import (
    SwapNegatives,
    WordPairs,
    continuation_pieces,
    swap_candidates,
    whole_words,
)

CAPTIONS = [
    "a small red circle left of a large blue square",
    "a large green square above a small red circle",
    "a small blue triangle right of a small green circle",
    "a large red triangle below a large blue square",
    "a small blue circle above a large red square",
    "a large green square left of a small blue circle",
] * 5


@pytest.fixture(scope="module")
def tokenizer():
    return train_wordpiece(CAPTIONS, vocab_size=200, min_frequency=1)


def encode(tokenizer, texts):
    return tokenizer(texts, padding="longest", return_tensors="pt")["input_ids"]


def words_at(tokenizer, ids, positions):
    return {tokenizer.convert_ids_to_tokens(int(ids[p])) for p in positions}


def test_word_pairs_know_the_pairs_they_were_built_from():
    pairs = WordPairs.from_ids([[2, 5, 6, 3], [2, 7, 3]], vocab_size=10)
    a = torch.tensor([5, 6, 2, 7, 6])
    b = torch.tensor([6, 5, 7, 3, 3])
    assert pairs.seen(a, b).tolist() == [True, False, True, True, True]


def test_only_words_used_in_the_same_places_swap(tokenizer):
    swaps = SwapNegatives.from_captions(tokenizer, CAPTIONS)
    ids = encode(tokenizer, [CAPTIONS[0]])
    content = torch.ones_like(ids, dtype=torch.bool)
    found = {frozenset(words_at(tokenizer, ids[0], (i, j)))
             for _, i, j in swap_candidates(ids, content, swaps.pairs).tolist()}
    # Colour for colour, shape for shape, size for size: never a colour for a shape.
    assert found == {frozenset({"red", "blue"}), frozenset({"circle", "square"}),
                     frozenset({"small", "large"})}


def test_a_negative_exchanges_two_pieces_and_nothing_else(tokenizer):
    swaps = SwapNegatives.from_captions(tokenizer, CAPTIONS)
    ids = encode(tokenizer, CAPTIONS[:4])
    content = torch.ones_like(ids, dtype=torch.bool)
    negative, has = swaps(ids, content, torch.Generator().manual_seed(0))
    assert has.sum() >= 3
    assert torch.equal(negative[~has], ids[~has])
    for row in has.nonzero().squeeze(1).tolist():
        changed = (negative[row] != ids[row]).nonzero().squeeze(1)
        assert len(changed) == 2
        i, j = changed.tolist()
        assert negative[row, i] == ids[row, j] and negative[row, j] == ids[row, i]


def test_a_caption_with_nothing_to_swap_is_left_as_it_is(tokenizer):
    swaps = SwapNegatives.from_captions(tokenizer, CAPTIONS)
    ids = encode(tokenizer, ["a small red circle left of a small red circle"])
    negative, has = swaps(ids, torch.ones_like(ids, dtype=torch.bool))
    assert not has.any() and torch.equal(negative, ids)


def test_pieces_of_longer_words_never_swap(tokenizer):
    ids = encode(tokenizer, ["the redsquare dog"])  # a word the vocabulary cuts in pieces
    pieces = tokenizer.convert_ids_to_tokens(ids[0])
    whole = whole_words(ids, continuation_pieces(tokenizer))[0]
    for k, piece in enumerate(pieces):
        next_piece = pieces[k + 1] if k + 1 < len(pieces) else ""
        assert bool(whole[k]) == (not piece.startswith("##") and not next_piece.startswith("##"))
    assert not whole.all(), "the test needs a word of several pieces"
