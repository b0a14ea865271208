"""The seq2seq mask and the key/value cache: a word sees exactly its past; caching is exact."""

import torch

from vitbert.nn import (
    AttentionContext,
    BlockConfig,
    Encoder,
    KVCache,
    key_padding_mask,
    seq2seq_mask,
)


def test_seq2seq_mask_blocks_exactly_the_future_words():
    N, T = 3, 5
    real = torch.ones(2, N + T, dtype=torch.bool)
    real[1, -2:] = False  # the second caption is two pieces shorter
    mask = seq2seq_mask(N, real)
    assert mask.shape == (2, 1, N + T, N + T)
    for b in range(2):
        for q in range(N + T):
            for k in range(N + T):
                # image tokens: image keys only; a word: the image and the words up to itself
                expected = k < N if q < N else k < N or k <= q
                expected = expected and bool(real[b, k])
                assert bool(mask[b, 0, q, k]) == expected, (b, q, k)


def test_seq2seq_mask_keeps_key_padding():
    real = torch.tensor([[True, False, True, True]])  # a blocked image token
    mask = seq2seq_mask(2, real)
    assert not mask[0, 0, :, 1].any()
    assert (mask & ~key_padding_mask(real)).sum() == 0


def test_cached_encoder_equals_one_pass_under_the_causal_mask():
    encoder = Encoder(BlockConfig(dim=16, num_heads=2), depth=2).eval()
    x = torch.randn(3, 7, 16)
    N = 2
    full = encoder(x, AttentionContext(seq2seq_mask(N, torch.ones(3, 7, dtype=torch.bool))))
    cache = KVCache(2)
    parts = [encoder(x[:, :N], cache=cache)]  # image tokens first, among themselves
    for t in range(N, 7):  # then one word at a time, seeing everything cached
        sees_all = AttentionContext(torch.ones(1, 1, 1, t + 1, dtype=torch.bool))
        parts.append(encoder(x[:, t:t + 1], sees_all, cache=cache))
    torch.testing.assert_close(torch.cat(parts, dim=1), full, atol=1e-5, rtol=1e-5)
    assert len(cache) == 7
    cache.crop(4)
    assert len(cache) == 4
    cache.select(torch.tensor([2, 2, 0]))
    assert cache.layers[0].keys.shape[0] == 3
