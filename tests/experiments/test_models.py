"""The experiment models: shapes, position options, and the 10x-lr parameter group."""

import pytest
import torch

from vitbert.experiments.models import (
    POSITIONS,
    AttentionClassifier,
    CNNPoolEarly,
    CNNPoolEnd,
)
from vitbert.experiments.train import named_param_groups
from vitbert.nn import RelativePositionBias2D


@pytest.mark.parametrize("position", POSITIONS)
def test_attention_classifier_forward(position):
    model = AttentionClassifier(position, num_classes=4, dim=16, num_heads=2, stem_width=4)
    assert model(torch.rand(3, 3, 40, 40)).shape == (3, 4)


@pytest.mark.parametrize("cls", [CNNPoolEnd, CNNPoolEarly])
def test_cnns_forward(cls):
    assert cls(num_classes=2, width=4)(torch.rand(2, 3, 40, 40)).shape == (2, 2)


def test_without_position_the_block_cannot_see_token_order():
    """Permuting the stem's tokens leaves the prediction unchanged (the reason for ≈ chance)."""
    model = AttentionClassifier("none", dim=16, num_heads=2, stem_width=4).eval()
    tokens = torch.randn(2, 100, 16)
    perm = torch.randperm(100)
    out = model.head(model.encoder(tokens))
    out_perm = model.head(model.encoder(tokens[:, perm]))
    assert torch.allclose(out, out_perm, atol=1e-5)


def test_bias_group_holds_exactly_the_offset_table_at_ten_times_the_lr():
    model = AttentionClassifier("bias", dim=16, num_heads=2, stem_width=4)
    groups = {g["name"]: g for g in named_param_groups(model, 1e-3, {"bias.table": 10.0})}
    assert set(groups) == {"rest", "bias.table"}
    table = next(m for m in model.modules() if isinstance(m, RelativePositionBias2D)).table
    assert groups["bias.table"]["params"] == [table]
    assert groups["bias.table"]["lr"] == pytest.approx(1e-2)
    assert groups["rest"]["lr"] == pytest.approx(1e-3)
    assert sum(len(g["params"]) for g in groups.values()) == len(list(model.parameters()))
