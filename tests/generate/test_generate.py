"""Decoding: the cache changes nothing, one beam is greedy, Mask-Predict fills every [MASK] and
never writes a piece twice in a row, sampling draws from the model's distribution, reranking orders
by the contrastive score plus the pseudo-log-likelihood."""

import itertools

import pytest
import torch
from torch import Tensor

from vitbert.decoding import (
    CaptionTokens,
    Generated,
    beam_search,
    greedy,
    mask_predict,
    rerank,
    sample,
    sample_and_rerank,
)
from vitbert.decoding.generate import _NextWord, _restrict
from vitbert.models import ImageTowerConfig, TextTowerConfig, VitBert, VitBertConfig, build_network
from vitbert.shapes import BindingLevers

TOKENS = CaptionTokens(cls=2, sep=3, mask=4, banned=(0, 1, 2, 4))


def random_model(lookup_heads: int = 0, hue_dim: int = 0, itc_dim: int = 0,
                 share_window: int = 0) -> VitBert:
    """A tiny model with large random weights: pieces that depend on the image and on the words
    written, not a near-uniform guess; a [SEP] bias that ends captions at different lengths.
    With ``lookup_heads`` the shapes data's extension (``vitbert.shapes.BindingLevers``) and its
    neighbour lookup (its output no longer zero), with ``hue_dim`` a tower that keeps hue apart,
    which the lookup then reads; with ``share_window`` that tower's places too, a lookup that
    says where it looked, and words that hear the reads near them."""
    image = ImageTowerConfig(kind="conv_stem" if hue_dim else "vit", image_size=16,
                             patch_size=8, dim=32, depth=1, num_heads=2)
    text = TextTowerConfig(dim=24, depth=2, num_heads=2, max_len=12)
    extension = BindingLevers(hue_dim=hue_dim, places=bool(share_window),
                              lookup_heads=lookup_heads, share_window=share_window,
                              lookup_place=bool(share_window)) if lookup_heads else None
    torch.manual_seed(0)
    net = build_network(VitBertConfig(image=image, text=text, vocab_size=30, itc_dim=itc_dim,
                                extension=extension)).eval()
    assert (getattr(net, "reader", None) is not None) == bool(lookup_heads)
    with torch.no_grad():
        for param in net.parameters():
            if param.ndim > 1:
                param.normal_(0.0, 0.3)
        if hue_dim:  # a read this large would write every row alike: one length
            net.reader.lookup.out.weight.mul_(0.2)
            if net.reader.lookup.place is not None:
                net.reader.lookup.place.weight.mul_(0.2)
        if share_window:
            net.reader.sharing.mix.weight.mul_(0.5)
        net.mlm_head.decoder.bias.zero_()
        net.mlm_head.decoder.bias[TOKENS.sep] = 3.0
    return net


@pytest.fixture(params=[(0, 0), (2, 0), (2, 8), (2, 8, 0, 2)],
                ids=["plain", "neighbour_lookup", "lookup_by_hue_and_form", "shared_reads"])
def model(request):
    return random_model(*request.param)


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
    for photos, count in ((images, len(images)), (None, 1)):  # no image: one caption
        cached = beam_search(model, TOKENS, photos, num_beams=3, num_return_sequences=3)
        uncached = beam_search(model, TOKENS, photos, num_beams=3, num_return_sequences=3,
                               use_cache=False)
        assert len(cached) == count
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
    (no_image,) = mask_predict(model, TOKENS, None, lengths=(3,), iterations=2)  # one caption
    assert len(no_image.token_ids) == 3 and TOKENS.mask not in no_image.token_ids


class OneWordModel(torch.nn.Module):
    """Sure of one word only: at every position piece 7 is likeliest, then 8, then 9, whatever
    it reads (an MLM that has not found the caption)."""

    def __init__(self) -> None:
        super().__init__()
        self.anchor = torch.nn.Parameter(torch.zeros(()))  # a device to run on
        self.config = VitBertConfig(text=TextTowerConfig(max_len=12))

    def forward(self, ids: Tensor, keep: Tensor, photos=None) -> Tensor:
        self.grad_enabled = torch.is_grad_enabled()
        logits = torch.full((*ids.shape, 30), -5.0)  # (B, T, V)
        logits[..., 7], logits[..., 8], logits[..., 9] = 3.0, 2.0, 1.0
        return logits


def test_mask_predict_never_writes_a_piece_twice_in_a_row():
    model = OneWordModel()
    (found,) = mask_predict(model, TOKENS, None, lengths=(6,), iterations=3)
    assert not model.grad_enabled  # decoding builds no autograd graph
    pieces = found.token_ids
    assert len(pieces) == 6 and all(a != b for a, b in itertools.pairwise(pieces)), pieces
    assert set(pieces) == {7, 8}  # the next best where the best would repeat: still likely


def test_cached_and_uncached_sampling_draw_the_same_and_a_seed_repeats(model, images):
    cached = sample(model, TOKENS, images, num_samples=4, seed=3)
    uncached = sample(model, TOKENS, images, num_samples=4, seed=3, use_cache=False)
    assert [[g.token_ids for g in per] for per in cached] == \
           [[g.token_ids for g in per] for per in uncached]
    assert len(cached) == len(images) and all(len(per) == 4 for per in cached)
    other = sample(model, TOKENS, images, num_samples=4, seed=4)
    assert [[g.token_ids for g in per] for per in other] != \
           [[g.token_ids for g in per] for per in cached]


def test_sampling_cold_is_greedy_with_greedys_scores(model, images):
    by_greedy = greedy(model, TOKENS, images)
    cold = sample(model, TOKENS, images, num_samples=2, temperature=1e-3)
    for g, drawn in zip(by_greedy, cold, strict=True):
        for s in drawn:
            assert s.token_ids == g.token_ids
            assert s.score == pytest.approx(g.score, abs=1e-4)  # untempered log-probabilities


def test_the_first_piece_is_drawn_with_the_models_probabilities():
    net, photo = random_model(), torch.randint(0, 256, (1, 3, 16, 16), dtype=torch.uint8)
    written = torch.full((1, 1), TOKENS.cls)
    # The banned pieces ([SEP] first among them) out, the rest renormalised, as sampling does.
    wanted = _restrict(_NextWord(net, TOKENS, photo, True)(written), TOKENS, 0).softmax(-1)[0]
    n = 4000
    drawn = torch.tensor([s.token_ids[0] for s in sample(net, TOKENS, photo, num_samples=n)[0]])
    share = torch.bincount(drawn, minlength=len(wanted)).float() / n
    # A share's standard error is at most 0.5 / sqrt(4000) = 0.008: 0.04 is five of them.
    assert (share - wanted).abs().max() < 0.04
    assert (wanted > 0.05).sum() >= 2  # the test means something: several likely pieces


def alone(net, caption: Generated, photo: Tensor, tokens: CaptionTokens
          ) -> tuple[float, float]:
    """A caption's contrastive similarity to one photo and the sum of log p(piece) over its
    content pieces with that photo, each hidden in turn: the caption read alone, unpadded."""
    ids = torch.tensor([[TOKENS.cls, *caption.token_ids, TOKENS.sep]])
    keep = torch.ones_like(ids, dtype=torch.bool)
    similarity = float(net.embed_texts(ids, keep)[0] @ net.embed_images(photo[None])[0])
    likelihood = 0.0
    for position in range(1, ids.shape[1] - 1):
        if ids[0, position].item() in tokens.function:
            continue
        hidden = ids.clone()
        hidden[0, position] = tokens.mask
        target = torch.zeros_like(keep)
        target[0, position] = True
        logits = net(hidden, keep, net.image_features(photo[None]), target_mask=target)  # (1, V)
        likelihood += logits.log_softmax(-1)[0, ids[0, position]].item()
    return similarity, likelihood


@torch.no_grad()
def test_rerank_orders_by_the_similarity_over_the_temperature_plus_the_likelihood(images):
    """Each caption scored as if read alone; the sum of the two log-probabilities orders them
    (the function word's piece, 6, left out of the likelihood); without the likelihood the
    similarity alone."""
    net = random_model(itc_dim=8)
    tokens = CaptionTokens(cls=2, sep=3, mask=4, banned=(0, 1, 2, 4), function=(6,))
    found = [[Generated([5, 6, 7], -1.0), Generated([8], -2.0), Generated([5, 6, 7], -1.0),
              Generated([9, 10, 11, 12, 13], -3.0), Generated([13, 12], -1.0)] for _ in images]
    distinct = [(5, 6, 7), (8,), (9, 10, 11, 12, 13), (13, 12)]  # the duplicate is scored once
    ranked = rerank(net, tokens, images, found)
    by_similarity = rerank(net, tokens, images, found, likelihood=False)
    temperature = net.itc.temperature.item()
    orders = set()
    for photo, per_image, plain in zip(images, ranked, by_similarity, strict=True):
        assert sorted(tuple(g.token_ids) for g in per_image) == distinct
        for g in per_image:
            similarity, likelihood = alone(net, g, photo, tokens)
            assert g.similarity == pytest.approx(similarity, abs=1e-5)
            assert g.likelihood == pytest.approx(likelihood, abs=1e-4)
        keys = [g.similarity / temperature + g.likelihood for g in per_image]
        assert keys == sorted(keys, reverse=True)
        assert all(g.likelihood is None for g in plain)
        similarities = [g.similarity for g in plain]
        assert similarities == sorted(similarities, reverse=True)
        orders.add((tuple(tuple(g.token_ids) for g in per_image),
                    tuple(tuple(g.token_ids) for g in plain)))
    assert any(a != b for a, b in orders), "the likelihood changes an order: the test means it"


def test_sample_and_rerank_offers_the_greedy_caption_among_the_samples(images):
    net = random_model(itc_dim=8)
    by_greedy = greedy(net, TOKENS, images)
    for g, candidates in zip(by_greedy, sample_and_rerank(net, TOKENS, images, 6), strict=True):
        assert g.token_ids in [c.token_ids for c in candidates]
        assert 1 <= len(candidates) <= 7
