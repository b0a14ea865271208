"""Fractal images from random iterated function systems: a labelled image set with no photo in it.

Formula-driven supervised learning (FractalDB, Kataoka et al. ACCV 2020; for ViTs Nakashima et
al. AAAI 2022) pretrains an image tower on images drawn from formulas: each *class* is one
iterated function system (IFS), a handful of random 2-D affine maps, and its *instances* are
renderings of that system's attractor with small perturbations. Telling 1,000 such systems apart
teaches a tower edges, curvature, self-similar texture and shape at many scales, with no download
and no licence.

The recipe followed here:

* **A class** (:func:`sample_ifs`): 2–8 maps ``x → A x + t`` with the six parameters drawn
  uniformly from [-1, 1], each map picked with probability proportional to ``|det A|``.
* **FractalDB's filter** (:func:`find_class`): a system is kept when its attractor, scaled to
  its bounding box, covers at least ``min_fill`` (0.2, FractalDB's ``--rate``) of a square
  canvas, so lines and dots are dropped. Beyond FractalDB, every map must also be a contraction
  (largest singular value below 1), the condition for an attractor to exist: without it most
  kept systems drew as fuzzy blobs, a few far-flung points setting the scale (about 1 draw in
  120 passes both tests).
* **An instance** (:func:`render`): the chaos game (many short chains run side by side) with one
  of the class's 6·N parameters scaled by a factor in [0.8, 1.2] (FractalDB's intra-class
  weighting), a quarter-turn and mirror, a random zoom and offset, and colour: each map paints
  the points it placed in a colour of its own, drawn per instance (hue uniform, saturation and
  value high), on black. Drawn at twice the size and averaged down, so a 32-pixel image keeps
  thin strokes as grey levels instead of aliasing.

Everything is a pure function of integer seeds: ``render(ifs, size, (seed, class, instance))``
returns the same pixels on every machine and in every worker, so a cached set is reproducible
and a held-out set is just other instance numbers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

PARAMETER_RANGE = 1.0  # each of a, b, c, d, e, f ~ U[-1, 1], as FractalDB draws them
INSTANCE_WEIGHT = (0.8, 1.2)  # FractalDB's intra-class parameter weighting
CHAINS = 256  # chaos-game chains run side by side (one numpy step moves them all)
BURN_IN = 12  # steps before a chain's points are on the attractor (contraction ~0.5 → 2⁻¹²)
SUPERSAMPLE = 2


@dataclass(frozen=True)
class IFS:
    """An iterated function system: ``maps`` (N, 2, 3) rows ``[A | t]``, picked with
    ``probabilities`` (N,)."""

    maps: np.ndarray
    probabilities: np.ndarray


def sample_ifs(rng: np.random.Generator, min_maps: int = 2, max_maps: int = 8) -> IFS:
    """A random system: ``min_maps``–``max_maps`` affine maps, parameters U[-1, 1]."""
    n = int(rng.integers(min_maps, max_maps + 1))
    maps = rng.uniform(-PARAMETER_RANGE, PARAMETER_RANGE, size=(n, 2, 3))
    return IFS(maps, _map_probabilities(maps))


def _map_probabilities(maps: np.ndarray) -> np.ndarray:
    """Each map in proportion to how much area it keeps, ``|det A|`` (FractalDB's rule)."""
    det = np.abs(maps[:, 0, 0] * maps[:, 1, 1] - maps[:, 0, 1] * maps[:, 1, 0]) + 1e-6
    return det / det.sum()


def chaos_game(ifs: IFS, num_points: int, rng: np.random.Generator
               ) -> tuple[np.ndarray, np.ndarray]:
    """Points on the attractor (P, 2) and the map that placed each (P,).

    :data:`CHAINS` chains start at random points and take :data:`BURN_IN` unrecorded steps;
    then each step adds one point per chain. Non-finite points (a system that is not
    contractive) come back as NaN for the caller to reject.
    """
    steps = -(-num_points // CHAINS)
    x = rng.uniform(-1, 1, size=(CHAINS, 2))
    points = np.empty((steps, CHAINS, 2))
    which = rng.choice(len(ifs.maps), size=(BURN_IN + steps, CHAINS), p=ifs.probabilities)
    with np.errstate(over="ignore", invalid="ignore"):
        for step in range(BURN_IN + steps):
            m = ifs.maps[which[step]]  # (CHAINS, 2, 3)
            x = np.einsum("cij,cj->ci", m[:, :, :2], x) + m[:, :, 2]  # (CHAINS, 2)
            if step >= BURN_IN:
                points[step - BURN_IN] = x
    return points.reshape(-1, 2)[:num_points], which[BURN_IN:].reshape(-1)[:num_points]


def _to_canvas(points: np.ndarray, size: int, margin: float = 0.0,
               offset: tuple[float, float] = (0.0, 0.0)) -> np.ndarray | None:
    """Integer pixel coordinates (P, 2) of ``points`` scaled to their bounding box inside a
    ``size`` canvas, aspect kept; None for a degenerate cloud (not finite, or a point)."""
    if not np.isfinite(points).all():
        return None
    low, high = points.min(axis=0), points.max(axis=0)
    extent = float((high - low).max())
    if extent < 1e-9 or extent > 1e6:
        return None
    usable = size * (1.0 - margin)
    centred = (points - (low + high) / 2) / extent * usable  # within ±usable/2
    pixels = centred + size / 2 + np.asarray(offset) * size * margin / 2
    return np.clip(pixels.astype(np.int64), 0, size - 1)


def fill_rate(ifs: IFS, size: int = 64, num_points: int = 20_000, seed: int = 0) -> float:
    """Share of a ``size``² canvas the attractor covers, scaled to its bounding box (0 for a
    system that diverges): FractalDB's filling rate."""
    points, _ = chaos_game(ifs, num_points, np.random.default_rng(seed))
    pixels = _to_canvas(points, size)
    if pixels is None:
        return 0.0
    covered = np.zeros((size, size), dtype=bool)
    covered[pixels[:, 1], pixels[:, 0]] = True
    return float(covered.mean())


def is_contractive(ifs: IFS) -> bool:
    """Whether every map shrinks every distance (largest singular value of ``A`` below 1)."""
    return bool((np.linalg.svd(ifs.maps[:, :, :2], compute_uv=False)[:, 0] < 1).all())


def find_class(seed: int, class_index: int, min_fill: float = 0.2) -> IFS:
    """Class ``class_index``: FractalDB's random search, drawing systems from a stream of its
    own (``(seed, class_index)``) until one is contractive and its :func:`fill_rate` reaches
    ``min_fill``. Each class depends on its seed and number alone, so classes are searched in
    parallel and class ``k`` is the same in a set of 10 classes and in one of 1,000."""
    rng = np.random.default_rng((seed, class_index))
    while True:
        ifs = sample_ifs(rng)
        if is_contractive(ifs) and fill_rate(ifs) >= min_fill:
            return ifs


def _perturbed(ifs: IFS, rng: np.random.Generator) -> IFS:
    """The class's system with one of its 6·N parameters scaled by U[0.8, 1.2]."""
    maps = ifs.maps.copy()
    flat = maps.reshape(-1)
    flat[rng.integers(flat.size)] *= rng.uniform(*INSTANCE_WEIGHT)
    return IFS(maps, _map_probabilities(maps))


def _palette(num_maps: int, rng: np.random.Generator) -> np.ndarray:
    """(num_maps, 3) bright colours in [0, 1]: hue uniform, saturation and value high."""
    hue = rng.uniform(0, 1, num_maps)
    saturation = rng.uniform(0.5, 1.0, num_maps)
    value = rng.uniform(0.7, 1.0, num_maps)
    # HSV → RGB (the standard six-sector formula, vectorised)
    k = (np.array([5.0, 3.0, 1.0]) + hue[:, None] * 6) % 6  # (N, 3)
    return value[:, None] - value[:, None] * saturation[:, None] * np.clip(
        np.minimum(k, 4 - k), 0, 1)


def render(ifs: IFS, size: int, seed: int | Sequence[int], num_points: int | None = None
           ) -> np.ndarray:
    """One instance of the class ``ifs``: (size, size, 3) uint8, a pure function of ``seed``
    (numpy's ``SeedSequence`` entropy: pass ``(base seed, class, instance)`` so that no two
    classes share an instance's colours and pose)."""
    rng = np.random.default_rng(seed)
    canvas = size * SUPERSAMPLE
    num_points = num_points or canvas * canvas * 4
    for attempt in range(2):  # a perturbation can break contraction: then the class as is
        system = _perturbed(ifs, rng) if attempt == 0 else ifs
        points, which = chaos_game(system, num_points, rng)
        pixels = _to_canvas(points, canvas, margin=rng.uniform(0.0, 0.3),
                            offset=tuple(rng.uniform(-1, 1, 2)))
        if pixels is not None:
            break
    else:
        raise ValueError("the class's own system diverges; find_class never keeps one")
    colours = _palette(len(ifs.maps), rng)[which]  # (P, 3)
    image = np.zeros((canvas, canvas, 3))
    np.maximum.at(image, (pixels[:, 1], pixels[:, 0]), colours)
    image = image.reshape(size, SUPERSAMPLE, size, SUPERSAMPLE, 3).mean(axis=(1, 3))
    image = np.rot90(image, k=int(rng.integers(4)))
    if rng.integers(2):
        image = image[:, ::-1]
    return np.ascontiguousarray(np.round(image * 255).astype(np.uint8))
