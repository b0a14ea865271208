"""The experiment models: what each can and cannot see, through ``forward``, and the lr group."""

import pytest
import torch

from experiments.data import draw, make_shapes
from experiments.models import (
    CNN,
    PATCH,
    POOLS,
    POSITIONS,
    AttentionClassifier,
    GridRotary2D,
)
from experiments.position import RelativePositionBias2D, Rotary2D
from experiments.train import named_param_groups


def _pair(square_xy: tuple[float, float], circle_xy: tuple[float, float]) -> torch.Tensor:
    """One picture (1, 3, 40, 40): a square of half-width 4 and a circle of half-width 3."""
    centres = {"square": torch.tensor([square_xy]), "circle": torch.tensor([circle_xy])}
    return draw(centres, torch.tensor([[4.0, 3.0]]))


# Far from each other and from the edges; the circle is 16 px right of and 8 px below the square
# (whole patches), so swapping the two moves each shape by whole patches.
A, B = (10.3, 12.6), (26.3, 20.6)
LEFT, RIGHT = _pair(A, B), _pair(B, A)
# Shapes 2 px from the top and left edges (as close as the data puts them): the tokens there are
# edge tokens, and a stem that marks the edge would give them away.
NEAR_EDGE = _pair((6.0, 6.0), (30.0, 28.0))
MOVED = torch.roll(NEAR_EDGE, (PATCH, PATCH), dims=(2, 3))  # one patch on; nothing wraps round
# Relative change of the features the head reads: float rounding vs a model that can see.
ROUNDING, SEEN = 1e-6, 1e-4


def _calibrated(model: torch.nn.Module) -> torch.nn.Module:
    """BatchNorm statistics from a few pictures of the data set, then eval mode."""
    model.train()
    with torch.no_grad():
        model(make_shapes(32, seed=5).images)
    return model.eval()


@pytest.mark.parametrize("position", POSITIONS)
def test_attention_classifier_forward(position):
    model = AttentionClassifier(position, num_classes=4, dim=16, num_heads=2, stem_width=4)
    assert model(torch.rand(3, 3, 40, 40)).shape == (3, 4)


@pytest.mark.parametrize("pool", POOLS)
def test_cnn_forward(pool):
    assert CNN(pool, num_classes=2, width=4)(torch.rand(2, 3, 40, 40)).shape == (2, 2)


def _swap_change(model: CNN | AttentionClassifier, before: torch.Tensor = LEFT,
                 after: torch.Tensor = RIGHT) -> float:
    """How much the features the head reads move from ``before`` to ``after``, relative to
    their size."""
    if isinstance(model, CNN):
        features, features_moved = model.features(before), model.features(after)
    else:
        features, features_moved = model.tokens(before).mean(1), model.tokens(after).mean(1)
    return ((features_moved - features).norm() / features.norm()).item()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_early_pool_cnn_gives_the_same_output_when_the_shapes_swap_places(seed):
    """Pooled after one 3×3 conv, only a bag of local features is left: "left of" is gone."""
    torch.manual_seed(seed)
    model = _calibrated(CNN("early", width=8))
    assert _swap_change(model) < ROUNDING  # float rounding
    assert torch.allclose(model(LEFT), model(RIGHT), atol=1e-6)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_late_pool_cnn_sees_which_shape_is_where(seed):
    """The same layers pooled at the end: the features move, far past float rounding."""
    torch.manual_seed(seed)
    model = _calibrated(CNN("end", width=8))
    assert _swap_change(model) > SEEN


def test_stem_tokens_move_with_the_picture_and_nothing_else_changes():
    """Content moved by one patch → tokens move by one cell, the edge cells included.

    With zero padding inside the stem (the project's ConvStem) the cells at the picture's edge
    differ from the others, and this fails: the tokens would carry where they are.
    """
    torch.manual_seed(0)
    model = _calibrated(AttentionClassifier("none", dim=16, num_heads=2, stem_width=4))
    tokens = model.stem(NEAR_EDGE).reshape(1, 10, 10, -1)  # (B, rows, cols, D)
    tokens_moved = model.stem(MOVED).reshape(1, 10, 10, -1)
    assert torch.allclose(tokens_moved[:, 1:, 1:], tokens[:, :-1, :-1], atol=1e-5)


def test_without_position_the_model_cannot_tell_left_from_right():
    torch.manual_seed(0)
    model = _calibrated(AttentionClassifier("none", dim=16, num_heads=2, stem_width=4))
    assert _swap_change(model) < ROUNDING
    assert _swap_change(model, NEAR_EDGE, MOVED) < ROUNDING
    assert torch.allclose(model(LEFT), model(RIGHT), atol=1e-6)


@pytest.mark.parametrize("position", ["learned", "bias", "rope2d"])
def test_each_position_scheme_reaches_the_output(position):
    torch.manual_seed(0)
    model = _calibrated(AttentionClassifier(position, dim=16, num_heads=2, stem_width=4))
    with torch.no_grad():  # the bias table starts at 0 and the learned table near it
        for table in (model.bias, model.pos):
            if table is not None:
                next(table.parameters()).normal_()
    assert _swap_change(model) > SEEN


def _column_scores(rotary: Rotary2D) -> torch.Tensor:
    """sin(angle(m) − angle(n)) of the column pair for every two cells (m, n): (N, N)."""
    q = torch.tensor([0.0, 0.0, 1.0, 0.0]).expand(1, 1, 100, 4)  # (B, H, N, Dh)
    k = torch.tensor([0.0, 0.0, 0.0, 1.0]).expand(1, 1, 100, 4)
    q, k = rotary(q, k)
    return (q @ k.transpose(-2, -1))[0, 0]


def test_grid_rope_tells_left_from_right_at_every_offset_with_a_head_of_width_4():
    col = torch.arange(10).repeat(10)
    offset = col[:, None] - col[None, :]  # (N, N)
    scores = _column_scores(GridRotary2D(4, (10, 10)))
    assert torch.equal(torch.sign(scores[offset != 0]), torch.sign(offset[offset != 0].float()))
    # The library's 1 rad per cell wraps round from 4 cells on: the reason for GridRotary2D.
    scores = _column_scores(Rotary2D(4, (10, 10)))
    assert not torch.equal(torch.sign(scores[offset != 0]),
                           torch.sign(offset[offset != 0].float()))


def test_bias_group_holds_exactly_the_offset_table_at_ten_times_the_lr():
    model = AttentionClassifier("bias", dim=16, num_heads=2, stem_width=4)
    groups = {g["name"]: g for g in named_param_groups(model, 1e-3, {"bias.table": 10.0})}
    assert set(groups) == {"rest", "bias.table"}
    table = next(m for m in model.modules() if isinstance(m, RelativePositionBias2D)).table
    assert groups["bias.table"]["params"] == [table]
    assert groups["bias.table"]["lr"] == pytest.approx(1e-2)
    assert groups["rest"]["lr"] == pytest.approx(1e-3)
    assert sum(len(g["params"]) for g in groups.values()) == len(list(model.parameters()))
