"""The fractal generator: deterministic per seed, class and instance; FractalDB's filter holds."""

import numpy as np
import pytest

from vitbert.pretraining.fractals import (
    IFS,
    chaos_game,
    fill_rate,
    find_class,
    is_contractive,
    render,
)


def test_a_class_depends_on_its_seed_and_number_only():
    first = find_class(seed=0, class_index=3)
    again = find_class(seed=0, class_index=3)
    np.testing.assert_array_equal(first.maps, again.maps)
    assert not np.array_equal(first.maps, find_class(seed=0, class_index=4).maps)
    assert not np.array_equal(first.maps, find_class(seed=1, class_index=3).maps)


@pytest.mark.parametrize("class_index", range(6))
def test_kept_classes_pass_the_filter(class_index):
    ifs = find_class(seed=0, class_index=class_index, min_fill=0.2)
    assert is_contractive(ifs)
    assert fill_rate(ifs) >= 0.2
    assert 2 <= len(ifs.maps) <= 8
    np.testing.assert_allclose(ifs.probabilities.sum(), 1.0)


def test_fill_rate_tells_a_line_from_a_plane():
    # Four maps of scale 1/2 onto the quadrants fill the square; two onto a diagonal draw a line.
    quadrants = np.array([[[0.5, 0, dx], [0, 0.5, dy]] for dx in (-0.5, 0.5) for dy in (-0.5, 0.5)])
    diagonal = np.array([[[0.5, 0, d], [0, 0.5, d]] for d in (-0.5, 0.5)])
    square = IFS(quadrants, np.full(4, 0.25))
    line = IFS(diagonal, np.full(2, 0.5))
    assert fill_rate(square) > 0.9
    assert fill_rate(line) < 0.1


def test_chaos_game_points_lie_on_the_attractor():
    # The quadrant system's attractor is the square [-1, 1]²: no point may leave it after burn-in.
    quadrants = np.array([[[0.5, 0, dx], [0, 0.5, dy]] for dx in (-0.5, 0.5) for dy in (-0.5, 0.5)])
    points, which = chaos_game(IFS(quadrants, np.full(4, 0.25)), 5000, np.random.default_rng(0))
    assert points.shape == (5000, 2) and which.shape == (5000,)
    assert np.abs(points).max() <= 1 + 1e-3
    assert set(np.unique(which)) == {0, 1, 2, 3}


def test_render_is_a_pure_function_of_its_seed():
    ifs = find_class(seed=0, class_index=0)
    image = render(ifs, 32, (0, 0, 5))
    assert image.shape == (32, 32, 3) and image.dtype == np.uint8
    np.testing.assert_array_equal(image, render(ifs, 32, (0, 0, 5)))
    assert not np.array_equal(image, render(ifs, 32, (0, 0, 6)))
    # Drawn, not blank, not filled: between 5% and 90% of the pixels lit.
    lit = (image.max(axis=-1) > 0).mean()
    assert 0.05 < lit < 0.9


def test_instances_of_a_class_are_closer_than_instances_of_two_classes():
    """What makes the classes learnable: the shape (lit pixels, pose undone by comparing sorted
    row and column profiles) varies less within a class than between classes."""

    def profile(image: np.ndarray) -> np.ndarray:
        lit = (image.max(axis=-1) > 40).astype(float)
        return np.sort(np.concatenate([lit.sum(0), lit.sum(1)]))

    classes = [find_class(0, k) for k in range(8)]
    profiles = np.array([[profile(render(ifs, 64, (0, k, i))) for i in range(6)]
                         for k, ifs in enumerate(classes)])  # (8, 6, 128)
    centres = profiles.mean(axis=1)  # (8, 128)
    distances = np.linalg.norm(profiles[:, :, None] - centres[None, None], axis=-1)  # (8, 6, 8)
    nearest = distances.argmin(axis=-1)  # (8, 6)
    accuracy = (nearest == np.arange(8)[:, None]).mean()
    assert accuracy > 0.5  # chance 1/8
