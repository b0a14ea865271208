"""40×40 pictures of a square, a circle and (optionally) a triangle, with relation labels.

Each shape has its own fixed colour (square red, circle green, triangle blue) on a black
background, so *which* shape is which is trivial to see, pixel by pixel. That is deliberate: the
experiments measure whether a model can relate *where* two things are, not whether it can
recognise them. Positions are drawn uniformly, with the shapes kept apart (no overlap) and at
least ``min_gap`` pixels between the compared centre coordinates, so every label is unambiguous.

Tasks:

* ``"left"``: 2 classes, 1 iff the square is left of the circle (square's centre x < circle's).
* ``"two"``: 4 classes, ``2 * left + above`` with ``left`` as above and ``above`` = 1 iff the
  triangle is above the circle (triangle's centre y < circle's; y grows downwards).

Everything is vectorised over the batch (masks from coordinate grids); 10,000 pictures take
well under a second.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

IMAGE_SIZE = 40
MARGIN = 2  # background pixels kept round every shape at the picture's edge (see _place)
COLOURS = {"square": (1.0, 0.2, 0.2), "circle": (0.2, 1.0, 0.2), "triangle": (0.3, 0.4, 1.0)}
NUM_CLASSES = {"left": 2, "two": 4}


@dataclass
class ShapesData:
    """Images (n, 3, 40, 40) in [0, 1], labels (n,), and the centres (n, 2) as (x, y) pixels."""

    images: Tensor
    labels: Tensor
    centres: dict[str, Tensor]


def _place(n: int, shapes: list[str], radius: Tensor, gen: torch.Generator) -> dict[str, Tensor]:
    """Centres (n, 2) per shape, non-overlapping, found by redrawing the rows that collide.

    Every shape keeps ``MARGIN`` background pixels from the picture's edge: the attention
    models' stem sees 2 pixels around each pixel, so a shape closer to the edge would lose part
    of its outline there, a cue to where it stands that no position scheme put in.
    """
    lo = radius.max().item() + MARGIN
    hi = IMAGE_SIZE - lo
    centres = {s: torch.empty(n, 2) for s in shapes}
    todo = torch.arange(n)
    while len(todo):
        for s in shapes:
            centres[s][todo] = lo + (hi - lo) * torch.rand(len(todo), 2, generator=gen)
        bad = torch.zeros(len(todo), dtype=torch.bool)
        for i, a in enumerate(shapes):
            for b in shapes[i + 1:]:
                # Chebyshev distance > both half-widths + 1 pixel: bounding boxes never touch.
                d = (centres[a][todo] - centres[b][todo]).abs().amax(dim=1)
                bad |= d < radius[todo, i] + radius[todo, shapes.index(b)] + 1
        todo = todo[bad]
    return centres


def _round_apart(centres: dict[str, Tensor], a: str, b: str, axis: int, gap: float) -> Tensor:
    """Rows where shape a and b are at least ``gap`` apart along ``axis`` (x = 0, y = 1)."""
    return (centres[a][:, axis] - centres[b][:, axis]).abs() >= gap


def draw(centres: dict[str, Tensor], radius: Tensor) -> Tensor:
    """Pictures (n, 3, 40, 40) of the shapes named in ``centres`` ((n, 2) as (x, y) pixels each),
    with half-widths ``radius`` (n, shapes) in the same order, on a black background."""
    n = radius.shape[0]
    images = torch.zeros(n, 3, IMAGE_SIZE, IMAGE_SIZE)
    coord = torch.arange(IMAGE_SIZE, dtype=torch.float32) + 0.5  # pixel centres
    y, x = coord[None, :, None], coord[None, None, :]  # broadcast to (n, 40, 40)
    for i, s in enumerate(centres):
        cx, cy = centres[s][:, 0, None, None], centres[s][:, 1, None, None]
        r = radius[:, i, None, None]
        if s == "square":
            inside = ((x - cx).abs() <= r) & ((y - cy).abs() <= r)
        elif s == "circle":
            inside = (x - cx) ** 2 + (y - cy) ** 2 <= r**2
        else:  # apex up: the half-width grows from 0 at the top to r at the bottom
            inside = ((y - cy).abs() <= r) & ((x - cx).abs() <= (y - cy + r) / 2)
        colour = torch.tensor(COLOURS[s])[None, :, None, None]
        images = torch.where(inside[:, None], colour, images)  # (n, 3, 40, 40)
    return images


def make_shapes(
    n: int, task: str = "left", seed: int = 0, min_gap: float = 2.0
) -> ShapesData:
    """``n`` pictures for ``task`` ("left" or "two"), deterministic in ``seed``."""
    if task not in NUM_CLASSES:
        raise ValueError(f"unknown task {task!r}; choose from {sorted(NUM_CLASSES)}")
    shapes = ["square", "circle"] + (["triangle"] if task == "two" else [])
    gen = torch.Generator().manual_seed(seed)

    # Draw more than needed and keep the rows whose compared coordinates are clearly apart.
    keep_centres: dict[str, list[Tensor]] = {s: [] for s in shapes}
    keep_radius: list[Tensor] = []
    have = 0
    while have < n:
        m = 2 * (n - have) + 16
        radius = 3.0 + 2.0 * torch.rand(m, len(shapes), generator=gen)  # half-width 3..5 px
        centres = _place(m, shapes, radius, gen)
        ok = _round_apart(centres, "square", "circle", 0, min_gap)
        if task == "two":
            ok &= _round_apart(centres, "triangle", "circle", 1, min_gap)
        for s in shapes:
            keep_centres[s].append(centres[s][ok])
        keep_radius.append(radius[ok])
        have += int(ok.sum())
    centres = {s: torch.cat(c)[:n] for s, c in keep_centres.items()}
    radius = torch.cat(keep_radius)[:n]

    images = draw(centres, radius)

    left = (centres["square"][:, 0] < centres["circle"][:, 0]).long()
    labels = left
    if task == "two":
        above = (centres["triangle"][:, 1] < centres["circle"][:, 1]).long()
        labels = 2 * left + above
    return ShapesData(images, labels, centres)
