"""Position schemes: RoPE scores depend only on offsets, tables match their formulas."""

import math

import torch

from experiments import position
from vitbert.nn import Attention, AttentionContext, LearnedPosition


def test_sinusoidal_table_matches_formula():
    table = position.sinusoidal_table(50, 16)
    for pos in (0, 1, 7, 49):
        for i in range(8):
            angle = pos / 10000 ** (2 * i / 16)
            assert math.isclose(table[pos, 2 * i], math.sin(angle), abs_tol=1e-6)
            assert math.isclose(table[pos, 2 * i + 1], math.cos(angle), abs_tol=1e-6)
    x = torch.zeros(2, 10, 16)
    torch.testing.assert_close(position.SinusoidalPosition(50, 16)(x), table[:10].expand(2, -1, -1))


def test_learned_position_adds_per_position_vectors():
    pos = LearnedPosition(10, 8)
    x = torch.zeros(2, 4, 8)
    torch.testing.assert_close(pos(x), pos.weight[:, :4].expand(2, -1, -1))


def rotated_scores(rotary, q_vec, k_vec, length):
    """Put the same q and k vector at every position, rotate, return all q·k scores."""
    q = q_vec.expand(1, 1, length, -1).clone()
    k = k_vec.expand(1, 1, length, -1).clone()
    q, k = rotary(q, k)
    return (q @ k.transpose(-2, -1))[0, 0]  # (L, L)


def test_rope_1d_score_depends_only_on_offset():
    q_vec, k_vec = torch.randn(16), torch.randn(16)
    scores = rotated_scores(position.Rotary1D(16), q_vec, k_vec, 12)
    for offset in range(-5, 6):
        diagonal = torch.diagonal(scores, offset)
        torch.testing.assert_close(diagonal, diagonal[0].expand_as(diagonal), atol=1e-4, rtol=1e-4)
    # ... and it does depend on the offset (the rotation is not a no-op).
    assert not torch.allclose(torch.diagonal(scores, 0)[0], torch.diagonal(scores, 3)[0])


def test_rope_1d_preserves_norms_and_position_zero():
    rotary = position.Rotary1D(8)
    q, k = torch.randn(2, 3, 6, 8), torch.randn(2, 3, 6, 8)
    rq, _ = rotary(q, k)
    torch.testing.assert_close(rq.norm(dim=-1), q.norm(dim=-1))
    torch.testing.assert_close(rq[..., 0, :], q[..., 0, :])


def test_rope_2d_score_depends_only_on_row_and_column_offsets():
    rows, cols = 4, 5
    rotary = position.Rotary2D(16, (rows, cols))
    scores = rotated_scores(rotary, torch.randn(16), torch.randn(16), rows * cols)
    by_offset = {}
    for i in range(rows * cols):
        for j in range(rows * cols):
            offset = (i // cols - j // cols, i % cols - j % cols)
            by_offset.setdefault(offset, []).append(scores[i, j])
    for values in by_offset.values():
        values = torch.stack(values)
        torch.testing.assert_close(values, values[0].expand_as(values), atol=1e-4, rtol=1e-4)
    assert len({round(v[0].item(), 3) for v in by_offset.values()}) > 10


def test_rope_2d_halves_turn_by_row_and_by_column():
    rotary = position.Rotary2D(8, (3, 3))
    q = torch.randn(1, 1, 9, 8)
    rq, _ = rotary(q, q)
    # Token 1 is (row 0, col 1): the row half is untouched, the column half turned.
    torch.testing.assert_close(rq[..., 1, :4], q[..., 1, :4])
    assert not torch.allclose(rq[..., 1, 4:], q[..., 1, 4:])
    # Token 3 is (row 1, col 0): the other way round.
    torch.testing.assert_close(rq[..., 3, 4:], q[..., 3, 4:])
    assert not torch.allclose(rq[..., 3, :4], q[..., 3, :4])


def test_rope_leaves_values_untouched():
    """Through Attention: with v independent of position, RoPE can only change the weights."""
    attn = Attention(16, 2).eval()
    x = torch.randn(1, 4, 16)
    with torch.no_grad():
        attn.qkv.weight[32:].zero_()  # v = bias only: identical for every token
    with_rope, _ = attn(x, AttentionContext(rotary=position.Rotary1D(8)))
    without, _ = attn(x)
    torch.testing.assert_close(with_rope, without, atol=1e-5, rtol=1e-5)


def test_relative_bias_is_shared_by_equal_offsets():
    bias_module = position.RelativePositionBias2D(num_heads=2, grid_size=(3, 4))
    with torch.no_grad():
        bias_module.table.normal_()
    bias = bias_module()  # (H, 12, 12)
    assert bias.shape == (2, 12, 12)

    def at(r1, c1, r2, c2):
        return bias[:, r1 * 4 + c1, r2 * 4 + c2]

    torch.testing.assert_close(at(0, 0, 1, 2), at(1, 1, 2, 3))
    torch.testing.assert_close(at(2, 3, 0, 0), at(2, 3, 0, 0))
    assert not torch.allclose(at(0, 0, 1, 2), at(0, 0, 2, 1))
    with_prefix = position.RelativePositionBias2D(2, (3, 4), num_prefix_tokens=1)()
    assert with_prefix.shape == (2, 13, 13) and (with_prefix[:, 0] == 0).all()
