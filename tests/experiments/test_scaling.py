"""The √d measurement and the toy model behind the ``scale`` experiment."""

import itertools

import torch

from experiments.scaling import RecallModel, make_recall, max_gate

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


def _attention_by_hand(model: RecallModel, inputs: torch.Tensor, scale: float) -> torch.Tensor:
    """The recall model's logits, with its attention written out: softmax(q·kᵀ · scale) v."""
    P = (inputs.shape[1] - 1) // 2
    tokens = model.key_emb(inputs[:, 1:1 + P]) + model.value_emb(inputs[:, 1 + P:])
    x = model.norm(torch.cat((model.query_emb(inputs[:, :1]), tokens), dim=1))  # (B, 1 + P, D)
    q, k, v = model.attn.qkv(x).chunk(3, dim=-1)  # one head: (B, 1 + P, D) each
    weights = (q @ k.transpose(-2, -1) * scale).softmax(-1)
    return model.head(model.attn.proj(weights @ v)[:, 0])


def test_recall_model_divides_the_scores_by_sqrt_d_exactly_when_asked():
    """Through ``forward`` (the fused SDPA path): the scores are q·k/√d with the scale and q·k
    without it. Dropping, doubling or misplacing the factor fails one of the two checks."""
    torch.manual_seed(0)
    dim = 64
    scaled = RecallModel(dim=dim, scale=True)
    unscaled = RecallModel(dim=dim, scale=False)
    unscaled.load_state_dict(scaled.state_dict())
    inputs, _ = make_recall(8, seed=0)
    with torch.no_grad():
        for model, factor in ((scaled, dim**-0.5), (unscaled, 1.0)):
            assert torch.allclose(model(inputs), _attention_by_hand(model, inputs, factor),
                                  atol=1e-5)
        # The two temperatures are far enough apart that the check above can tell them apart.
        assert not torch.allclose(_attention_by_hand(scaled, inputs, 1.0),
                                  _attention_by_hand(scaled, inputs, dim**-0.5), atol=1e-3)
