"""Weight-decay groups, learning-rate multipliers and the warmup + cosine schedule."""

import itertools
import math

import pytest
import torch
from torch import nn

from vitbert.lit.optim import OptimizerConfig, build_optimizer, parameter_groups, warmup_cosine
from vitbert.nn import BlockConfig, Encoder, LearnedPosition


class Toy(nn.Module):
    def __init__(self):
        super().__init__()
        self.image_tower = nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4))
        self.word = nn.Embedding(10, 4)
        self.encoder = Encoder(BlockConfig(dim=4, num_heads=2), depth=1)
        self.position = LearnedPosition(3, 4)
        self.decoder = nn.Linear(4, 10)
        self.decoder.weight = self.word.weight  # tied, as in the MLM head


def groups_by_name(model, config):
    found = {}
    for group in parameter_groups(model, config):
        for name in group["names"]:
            found[name] = (group["weight_decay"], group["lr_mult"])
    return found


def test_decay_only_on_matrices_of_linear_layers():
    config = OptimizerConfig(weight_decay=0.1)
    found = groups_by_name(Toy(), config)
    assert found["encoder.blocks.0.attn.qkv.weight"][0] == 0.1
    assert found["encoder.blocks.0.mlp.fc1.weight"][0] == 0.1
    for name in ("encoder.blocks.0.attn.qkv.bias", "encoder.norm.weight", "word.weight",
                 "position.weight", "image_tower.1.weight"):
        assert found[name][0] == 0.0, name
    # The tied decoder weight is the embedding: counted once, not decayed.
    assert "decoder.weight" not in found


def test_learning_rate_multipliers_per_part():
    config = OptimizerConfig(lr=1e-3, image_tower_lr_mult=0.1)
    model = Toy()
    found = groups_by_name(model, config)
    assert found["image_tower.0.weight"][1] == 0.1
    assert found["image_tower.1.weight"][1] == 0.1
    names = {g["name"] for g in parameter_groups(model, config)}
    assert names == {"decay", "no_decay", "no_decay_lr_x0.1", "decay_lr_x0.1"}
    assert found["encoder.blocks.0.attn.qkv.weight"][1] == 1.0
    assert found["position.weight"][1] == 1.0
    optimizer = build_optimizer(model, config)
    lrs = {p: g["lr"] for g in optimizer.param_groups for p in g["params"]}
    assert lrs[model.position.weight] == pytest.approx(1e-3)
    assert lrs[model.image_tower[0].weight] == pytest.approx(1e-4)
    n_params = sum(len(g["params"]) for g in optimizer.param_groups)
    assert n_params == len(list(model.parameters()))


def _previous_factor(step: int, warmup: int, total: int, floor: float) -> float:
    """The hand-written schedule this project used before the library's (the reference)."""
    if step < warmup:
        return (step + 1) / warmup
    progress = min((step - warmup) / max(total - warmup, 1), 1.0)
    return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress))


def lr_curve(config: OptimizerConfig, total_steps: int) -> list[float]:
    optimizer = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=config.lr)
    schedule = warmup_cosine(optimizer, config, total_steps)
    lrs = []
    for _ in range(total_steps):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        schedule.step()
    return lrs


def test_warmup_then_cosine_to_floor():
    config = OptimizerConfig(lr=1.0, warmup_steps=10, min_lr_ratio=0.1)
    lrs = lr_curve(config, total_steps=110)
    assert lrs[0] == 0.0 and lrs[10] == pytest.approx(1.0)
    assert all(a < b for a, b in itertools.pairwise(lrs[:11]))
    midpoint = 10 + 50
    assert lrs[midpoint] == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.5)))
    assert lrs[-1] == pytest.approx(0.1, abs=1e-3)
    assert all(a >= b for a, b in itertools.pairwise(lrs[10:]))


@pytest.mark.parametrize("warmup, total", [(10, 110), (0, 50), (0.05, 937), (1, 7)])
def test_library_schedule_equals_the_previous_one_after_warmup(warmup, total):
    """From the peak on the curve is the old one to float precision; during warmup it is the old
    one a step later (it rises from 0 where the old one started at 1 / warmup)."""
    config = OptimizerConfig(lr=2e-3, warmup_steps=warmup, min_lr_ratio=0.05)
    lrs = lr_curve(config, total)
    w = int(warmup * total) if 0 < warmup < 1 else int(warmup)
    old = [2e-3 * _previous_factor(s, w, total, 0.05) for s in range(total)]
    assert lrs[w:] == pytest.approx(old[w:], rel=1e-9, abs=1e-15)
    assert lrs[1:w] == pytest.approx(old[: w - 1] if w else [], rel=1e-9)


def test_fractional_warmup_is_a_share_of_total_steps():
    config = OptimizerConfig(lr=1.0, warmup_steps=0.1)
    optimizer = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1.0)
    schedule = warmup_cosine(optimizer, config, total_steps=200)
    assert schedule.lr_lambdas[0](20) == pytest.approx(1.0)
    assert schedule.lr_lambdas[0](10) == pytest.approx(0.5)


def test_a_pretrained_text_tower_learns_at_its_own_rate_and_the_new_parts_at_the_peak(
        tiny_config):
    """The text tower (embeddings, tied decoder matrix, encoder) at lr × text_tower_lr_mult;
    what is new around it (projector, MLM head's transform and bias) at the peak."""
    from vitbert.models import VitBert

    net = VitBert(tiny_config())
    config = OptimizerConfig(lr=1e-3, text_tower_lr_mult=0.05)
    lrs = {p: g["lr"] for g in build_optimizer(net, config).param_groups for p in g["params"]}
    assert lrs[net.text.embeddings.word.weight] == pytest.approx(5e-5)
    assert lrs[net.mlm_head.decoder.weight] == pytest.approx(5e-5)  # the same Parameter
    assert lrs[net.text.encoder.blocks[0].attn.qkv.weight] == pytest.approx(5e-5)
    for fresh in (net.projector.proj.weight, net.mlm_head.dense.weight, net.mlm_head.decoder.bias,
                  net.image_tower.patch_embed.proj.weight):
        assert lrs[fresh] == pytest.approx(1e-3)
