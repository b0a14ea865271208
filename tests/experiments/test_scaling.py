"""The √d measurement and the toy model behind the ``scale`` experiment."""

import itertools

import torch

from vitbert.experiments.scaling import RecallModel, make_recall, max_gate

WIDTHS = (1, 4, 16, 64, 256)


def test_max_gate_without_the_scale_grows_with_the_head_width():
    gates = [max_gate(d, scale=False, trials=500) for d in WIDTHS]
    assert all(a < b for a, b in itertools.pairwise(gates)), gates
    assert gates[-1] > 0.8  # one key takes nearly all the weight


def test_max_gate_with_the_scale_stays_flat():
    gates = [max_gate(d, scale=True, trials=500) for d in WIDTHS]
    assert max(gates) / min(gates) < 1.25, gates
    assert max(gates) < 0.2  # 64 keys, scores of variance 1: no key dominates


def test_at_width_one_the_scale_changes_nothing():
    assert max_gate(1, scale=True, trials=300) == max_gate(1, scale=False, trials=300)


def test_recall_model_unscaled_scores_are_sqrt_d_times_the_scaled_ones():
    torch.manual_seed(0)
    scaled = RecallModel(dim=64, scale=True)
    unscaled = RecallModel(dim=64, scale=False)
    unscaled.load_state_dict(scaled.state_dict())
    assert unscaled.attn.scale == 1.0 and scaled.attn.scale == 64**-0.5
    inputs, _ = make_recall(8, seed=0)
    assert scaled(inputs).shape == (8, 16)
    # Same weights, different score temperature: the outputs differ.
    assert not torch.allclose(scaled(inputs), unscaled(inputs))
