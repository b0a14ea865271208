"""Attention equals the textbook formula and PyTorch's own layers; masks never produce NaN."""

import math

import pytest
import torch
from torch import nn

from vitbert.nn import (
    Attention,
    AttentionContext,
    Block,
    BlockConfig,
    combine_masks,
    key_padding_mask,
    local_mask,
)


def manual_attention(attn: Attention, x, allowed=None):
    """softmax(Q Kᵀ / √Dh + M) V, written out with no shortcuts."""
    B, L, D = x.shape
    H, Dh = attn.num_heads, attn.head_dim
    q, k, v = (x @ attn.qkv.weight.T + attn.qkv.bias).split(D, dim=-1)
    q, k, v = (t.view(B, L, H, Dh).transpose(1, 2) for t in (q, k, v))
    scores = q @ k.transpose(-2, -1) / math.sqrt(Dh)
    if allowed is not None:
        scores = scores + torch.where(allowed, 0.0, float("-inf"))
    out = scores.softmax(-1) @ v
    return attn.proj(out.transpose(1, 2).reshape(B, L, D))


def padding(lengths, L):
    return torch.arange(L)[None, :] < torch.tensor(lengths)[:, None]  # (B, L), True = real


def test_matches_manual_formula():
    attn = Attention(32, 4).eval()
    x = torch.randn(3, 7, 32)
    mask = key_padding_mask(padding([7, 5, 2], 7))
    out, _ = attn(x, AttentionContext(mask))
    torch.testing.assert_close(out, manual_attention(attn, x, mask), atol=1e-5, rtol=1e-5)
    out, _ = attn(x)
    torch.testing.assert_close(out, manual_attention(attn, x), atol=1e-5, rtol=1e-5)


def test_weights_path_matches_fused_path():
    attn = Attention(32, 4).eval()
    x = torch.randn(2, 6, 32)
    mask = key_padding_mask(padding([6, 3], 6))
    fused, _ = attn(x, AttentionContext(mask))
    explicit, weights = attn(x, AttentionContext(mask), need_weights=True)
    torch.testing.assert_close(fused, explicit, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 4, 6))
    assert (weights[1, :, :, 3:] == 0).all()  # padded keys receive nothing


@pytest.mark.parametrize("masked", [False, True])
def test_matches_torch_multihead_attention(masked):
    D, H = 32, 4
    ours = Attention(D, H).eval()
    ref = nn.MultiheadAttention(D, H, batch_first=True).eval()
    with torch.no_grad():
        ref.in_proj_weight.copy_(ours.qkv.weight)
        ref.in_proj_bias.copy_(ours.qkv.bias)
        ref.out_proj.weight.copy_(ours.proj.weight)
        ref.out_proj.bias.copy_(ours.proj.bias)
    x = torch.randn(3, 9, D)
    real = padding([9, 4, 1], 9) if masked else torch.ones(3, 9, dtype=torch.bool)
    out, _ = ours(x, AttentionContext(key_padding_mask(real)))
    # nn.MultiheadAttention's key_padding_mask is the opposite polarity: True = ignore.
    expected, _ = ref(x, x, x, key_padding_mask=~real, need_weights=False)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("norm_first", [True, False])
def test_block_matches_transformer_encoder_layer(norm_first):
    D, H = 32, 4
    ours = Block(BlockConfig(D, H, mlp_ratio=2.0, norm_first=norm_first, norm_eps=1e-5)).eval()
    ref = nn.TransformerEncoderLayer(
        D, H, dim_feedforward=2 * D, dropout=0.0, activation="gelu", batch_first=True,
        norm_first=norm_first,
    ).eval()
    with torch.no_grad():
        ref.self_attn.in_proj_weight.copy_(ours.attn.qkv.weight)
        ref.self_attn.in_proj_bias.copy_(ours.attn.qkv.bias)
        ref.self_attn.out_proj.weight.copy_(ours.attn.proj.weight)
        ref.self_attn.out_proj.bias.copy_(ours.attn.proj.bias)
        ref.linear1.load_state_dict(ours.mlp.fc1.state_dict())
        ref.linear2.load_state_dict(ours.mlp.fc2.state_dict())
        ref.norm1.load_state_dict(ours.norm1.state_dict())
        ref.norm2.load_state_dict(ours.norm2.state_dict())
    x = torch.randn(2, 5, D)
    real = padding([5, 3], 5)
    out, _ = ours(x, AttentionContext(key_padding_mask(real)))
    expected = ref(x, src_key_padding_mask=~real)
    # PyTorch's fast path may zero padded rows; compare the real positions.
    torch.testing.assert_close(out[real], expected[real], atol=1e-5, rtol=1e-5)


def test_combine_masks_blocks_if_any_rule_blocks():
    a = torch.tensor([True, True, False, False])
    b = torch.tensor([True, False, True, False])
    assert combine_masks(a, b).tolist() == [True, False, False, False]
    assert combine_masks(None, a) is a
    assert combine_masks(None, None) is None


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_fully_blocked_rows_are_finite(dtype):
    attn = Attention(16, 2).to(dtype).eval()
    x = torch.randn(3, 4, 16, dtype=dtype)
    real = padding([4, 2, 0], 4)  # the last sequence is all padding
    mask = key_padding_mask(real)
    for need_weights in (False, True):
        out, _ = attn(x, AttentionContext(mask), need_weights=need_weights)
        assert torch.isfinite(out).all()
    causal = torch.ones(4, 4, dtype=torch.bool).tril()
    nothing = torch.zeros(4, 4, dtype=torch.bool)
    out, _ = attn(x, AttentionContext(combine_masks(causal, nothing)))
    assert torch.isfinite(out).all()


def test_bias_is_added_to_scores():
    attn = Attention(16, 2).eval()
    x = torch.randn(1, 5, 16)
    bias = torch.randn(2, 5, 5)
    out, _ = attn(x, AttentionContext(bias=bias))
    explicit, weights = attn(x, AttentionContext(bias=bias), need_weights=True)
    torch.testing.assert_close(out, explicit, atol=1e-5, rtol=1e-5)
    # A huge bias towards key 0 makes every query attend to key 0 alone.
    pull = torch.zeros(2, 5, 5)
    pull[..., 0] = 1e4
    _, weights = attn(x, AttentionContext(bias=pull), need_weights=True)
    torch.testing.assert_close(weights[..., 0], torch.ones(1, 2, 5))


def test_local_mask_is_a_clipped_window_and_prefix_tokens_see_everything():
    mask = local_mask((4, 5), radius=1, num_prefix_tokens=1)[0, 0]  # (1 + 20, 1 + 20)
    assert mask.shape == (21, 21)
    assert mask[0].all() and mask[:, 0].all()  # the class token
    patches = mask[1:, 1:]
    # Patch (1, 1) is index 6: it sees rows 0-2 by columns 0-2, nine patches; a corner sees four.
    seen = {(int(i) // 5, int(i) % 5) for i in patches[6].nonzero()}
    assert seen == {(r, c) for r in range(3) for c in range(3)}
    assert int(patches[0].sum()) == 4
    assert torch.equal(patches, patches.T)
    assert local_mask((4, 5), radius=4).all()  # a window as large as the grid: global


def test_local_attention_ignores_tokens_outside_the_window():
    attn = Attention(dim=16, num_heads=2).eval()
    x = torch.randn(1, 9, 16)  # a 3x3 grid
    context = AttentionContext(local_mask((3, 3), radius=1))
    far = x.clone()
    far[0, 8] += 10.0  # the bottom-right patch: two rows and two columns from the top-left
    with torch.no_grad():
        out, out_far = attn(x, context)[0], attn(far, context)[0]
        manual = manual_attention(attn, x, local_mask((3, 3), radius=1))
    torch.testing.assert_close(out, manual, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out_far[0, 0], out[0, 0])  # out of the top-left's window
    assert not torch.allclose(out_far[0, 4], out[0, 4])  # the centre sees every patch
