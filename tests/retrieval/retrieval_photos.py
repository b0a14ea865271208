"""Photos whose content a test can predict: one colour each, the colour named in the file."""

from __future__ import annotations

import numpy as np

COLOURS = {"red": (220, 30, 30), "green": (30, 200, 30), "blue": (30, 30, 220),
           "yellow": (230, 220, 40)}


def plain_colour(colour: str, size: int = 40) -> np.ndarray:
    """A photo of one colour, with a little noise (so no two files are the same bytes)."""
    rng = np.random.default_rng(sum(map(ord, colour)))
    noise = rng.integers(-8, 9, (size, size, 3))
    return np.clip(np.array(COLOURS[colour]) + noise, 0, 255).astype(np.uint8)
