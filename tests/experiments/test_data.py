"""The generated pictures: the labels say what the pixels show."""

import pytest
import torch

from experiments.data import COLOURS, MARGIN, make_shapes
from experiments.scaling import make_recall


def _bbox_centre(images: torch.Tensor, shape: str) -> torch.Tensor:
    """(n, 2) centre (x, y) of the bounding box of the pixels in ``shape``'s colour."""
    colour = torch.tensor(COLOURS[shape])[None, :, None, None]
    mask = (images == colour).all(dim=1)  # (n, 40, 40)
    centres = []
    for m in mask:
        ys, xs = torch.nonzero(m, as_tuple=True)
        assert len(xs) > 0, f"no {shape} drawn"
        centres.append(torch.stack([xs.min() + xs.max(), ys.min() + ys.max()]).float() / 2 + 0.5)
    return torch.stack(centres)


def test_left_labels_match_the_centres_and_the_pixels():
    data = make_shapes(300, "left", seed=1)
    assert data.images.shape == (300, 3, 40, 40)
    left = data.centres["square"][:, 0] < data.centres["circle"][:, 0]
    assert torch.equal(data.labels, left.long())
    square, circle = _bbox_centre(data.images, "square"), _bbox_centre(data.images, "circle")
    assert torch.equal(data.labels, (square[:, 0] < circle[:, 0]).long())
    assert 0.4 < data.labels.float().mean() < 0.6


def test_two_relations_label_is_two_times_left_plus_above():
    data = make_shapes(300, "two", seed=2)
    sq, ci, tr = (_bbox_centre(data.images, s) for s in ("square", "circle", "triangle"))
    expected = 2 * (sq[:, 0] < ci[:, 0]).long() + (tr[:, 1] < ci[:, 1]).long()
    assert torch.equal(data.labels, expected)
    assert set(data.labels.tolist()) == {0, 1, 2, 3}


def test_shapes_do_not_overlap_and_the_generator_is_deterministic():
    a, b = make_shapes(200, "two", seed=3), make_shapes(200, "two", seed=3)
    assert torch.equal(a.images, b.images)
    # Every pixel is background or exactly one shape's colour: no overlap, nothing blended.
    palette = torch.tensor([[0.0, 0.0, 0.0], *COLOURS.values()])
    pixels = a.images.permute(0, 2, 3, 1).reshape(-1, 3)
    assert (pixels[:, None] == palette[None]).all(-1).any(-1).all()


def test_unknown_task_is_refused():
    with pytest.raises(ValueError, match="unknown task"):
        make_shapes(4, "above")


def test_recall_query_is_one_of_the_keys_and_the_label_is_its_value():
    inputs, labels = make_recall(100, pairs=8, symbols=16, seed=0)
    query, keys, values = inputs[:, 0], inputs[:, 1:9], inputs[:, 9:]
    for q, k, v, y in zip(query, keys, values, labels, strict=True):
        assert len(set(k.tolist())) == 8
        (pos,) = torch.nonzero(k == q, as_tuple=True)
        assert v[pos].item() == y.item()


def test_shapes_keep_the_margin_from_the_picture_edge():
    """The stem sees 2 px round each pixel: a shape nearer the edge would be cut there."""
    images = make_shapes(500, "two", seed=4).images
    edge = torch.ones(40, 40, dtype=torch.bool)
    edge[MARGIN:-MARGIN, MARGIN:-MARGIN] = False
    assert (images[:, :, edge] == 0).all()
    # …and they do come as close as that: the margin is not wider than it says.
    assert (images[:, :, MARGIN, :] != 0).any() and (images[:, :, :, -MARGIN - 1] != 0).any()
