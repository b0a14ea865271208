"""Decoding: the cache changes nothing, one beam is greedy, Mask-Predict fills every [MASK];
the same with the word pointer, which changes the piece after a key word and nothing before."""

import pytest
import torch

from vitbert.decoding import CaptionTokens, beam_search, greedy, mask_predict
from vitbert.models import (
    ImageTowerConfig,
    PointerConfig,
    TextTowerConfig,
    VitBert,
    VitBertConfig,
)

TOKENS = CaptionTokens(cls=2, sep=3, mask=4, banned=(0, 1, 2, 4))


def random_model(pointer: bool = False) -> VitBert:
    """A tiny model with large random weights: pieces that depend on the image and on the words
    written, not a near-uniform guess; a [SEP] bias that ends captions at different lengths.
    With ``pointer``, a word pointer: key words are pieces 5-14, value words pieces 15-22."""
    image = ImageTowerConfig(kind="vit", image_size=16, patch_size=8, dim=32, depth=1,
                             num_heads=2)
    text = TextTowerConfig(dim=24, depth=2, num_heads=2, max_len=12)
    words = (PointerConfig(tuple(f"k{i}" for i in range(10)), tuple(f"v{i}" for i in range(8)))
             if pointer else PointerConfig())
    torch.manual_seed(0)
    net = VitBert(VitBertConfig(image=image, text=text, vocab_size=30, pointer=words)).eval()
    with torch.no_grad():
        for param in net.parameters():
            if param.ndim > 1:
                param.normal_(0.0, 0.3)
        net.mlm_head.decoder.bias.zero_()
        net.mlm_head.decoder.bias[TOKENS.sep] = 2.0
        if pointer:
            net.pointer.key_ids.copy_(torch.arange(5, 15))
            net.pointer.value_ids.copy_(torch.arange(15, 23))
    return net


@pytest.fixture(params=[False, True], ids=["text head", "with the word pointer"])
def model(request):
    return random_model(pointer=request.param)


@pytest.fixture
def images():
    return torch.randint(0, 256, (5, 3, 16, 16), dtype=torch.uint8)


def test_cached_and_uncached_greedy_write_the_same_pieces(model, images):
    cached = greedy(model, TOKENS, images, use_cache=True)
    uncached = greedy(model, TOKENS, images, use_cache=False)
    assert [g.token_ids for g in cached] == [g.token_ids for g in uncached]
    assert [g.score for g in cached] == pytest.approx([g.score for g in uncached], abs=1e-4)
    assert len({len(g.token_ids) for g in cached}) > 1  # rows ended at different steps


def test_cached_and_uncached_beams_agree_and_text_only_works(model, images):
    for kwargs in ({"images": images}, {"images": None, "num_captions": 2}):
        cached = beam_search(model, TOKENS, num_beams=3, num_return_sequences=3, **kwargs)
        uncached = beam_search(model, TOKENS, num_beams=3, num_return_sequences=3,
                               use_cache=False, **kwargs)
        assert [[g.token_ids for g in b] for b in cached] == \
               [[g.token_ids for g in b] for b in uncached]


def test_one_beam_is_greedy(model, images):
    by_greedy = greedy(model, TOKENS, images, length_penalty=0.7)
    by_beam = beam_search(model, TOKENS, images, num_beams=1, length_penalty=0.7)
    assert [g.token_ids for g in by_greedy] == [b[0].token_ids for b in by_beam]
    assert [g.score for g in by_greedy] == pytest.approx([b[0].score for b in by_beam],
                                                          abs=1e-5)


def test_beam_search_finds_at_least_greedys_sequence_score(model, images):
    # Beam search keeps greedy's path among its candidates, so its best raw sum of
    # log-probabilities (length_penalty=0) is never worse.
    by_greedy = greedy(model, TOKENS, images, length_penalty=0.0)
    by_beam = beam_search(model, TOKENS, images, num_beams=4, length_penalty=0.0)
    for g, b in zip(by_greedy, by_beam, strict=True):
        assert b[0].score >= g.score - 1e-5


def test_captions_hold_no_special_piece_and_fit_the_positions(model, images):
    for found in greedy(model, TOKENS, images, max_new_tokens=50):
        assert 1 <= len(found.token_ids) <= 11  # max_len 12: [CLS] + pieces, [MASK] after
        assert not set(found.token_ids) & {0, 1, 2, 3, 4}


def test_mask_predict_fills_every_mask(model, images):
    found = mask_predict(model, TOKENS, images, lengths=(3, 5, 30), iterations=4)
    assert len(found) == len(images)
    for g in found:
        assert len(g.token_ids) in (3, 5, 10)  # 30 is cut to what the positions hold
        assert TOKENS.mask not in g.token_ids
        assert not set(g.token_ids) & {0, 1, 2, 3, 4}


def test_the_word_pointer_chooses_the_piece_after_a_key_word_and_no_other(images):
    with_pointer = random_model(pointer=True)
    text_head = random_model(pointer=True)
    text_head.pointer = None  # the same weights, the text head alone
    with torch.no_grad():  # key and value words likely: the pointer then has choices to make
        for net in (with_pointer, text_head):
            net.mlm_head.decoder.bias[5:23] = 2.0
    pointed = greedy(with_pointer, TOKENS, images, use_cache=False)
    plain = greedy(text_head, TOKENS, images, use_cache=False)
    assert [g.token_ids for g in pointed] != [g.token_ids for g in plain]
    key_ids = set(range(5, 15))
    for a, b in zip(pointed, plain, strict=True):
        # Up to the first key word either writes, both write the same: the pointer re-shares
        # the key words among themselves (what is seen) and the piece after one (what it
        # points at), nothing else.
        first = min((i for ids in (a.token_ids, b.token_ids)
                     for i, piece in enumerate(ids) if piece in key_ids), default=None)
        if first is None:
            assert a.token_ids == b.token_ids
        else:
            assert a.token_ids[:first] == b.token_ids[:first]
