"""resize_center_crop (PIL.ImageOps.fit) against the hand-written resize-then-crop it replaced."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image
from skimage import data as skdata

from vitbert.data.cache import resize_center_crop


def old_resize_center_crop(img: Image.Image, size: int) -> np.ndarray:
    """The implementation of cache version 1, kept here as the reference."""
    w, h = img.size
    scale = size / min(w, h)
    nw, nh = max(size, round(w * scale)), max(size, round(h * scale))
    img = img.resize((nw, nh), Image.Resampling.BICUBIC, reducing_gap=3.0)
    left, top = (nw - size) // 2, (nh - size) // 2
    img = img.crop((left, top, left + size, top + size))
    return np.array(img, dtype=np.uint8).transpose(2, 0, 1)


# (photo, size, whole-pixel crop offset in the old code): astronaut is 512x512, coffee 600x400
# (224: offset 56 exactly), chelsea 451x300 (224: 56.5, rounded down to 56 by the old code).
CASES = [("astronaut", 224, True), ("coffee", 224, True), ("coffee", 384, True),
         ("chelsea", 224, False), ("chelsea", 384, False), ("astronaut", 32, False),
         ("chelsea", 32, False)]


@pytest.mark.parametrize(("name", "size", "whole"), CASES)
def test_same_pixels_as_the_old_resize_up_to_a_sub_pixel_shift(name, size, whole):
    img = Image.fromarray(getattr(skdata, name)())
    new = resize_center_crop(img, size)
    old = old_resize_center_crop(img, size)
    assert new.shape == old.shape == (3, size, size) and new.dtype == np.uint8
    diff = np.abs(new.astype(int) - old.astype(int))
    if whole:  # same crop, same filter: identical
        assert diff.max() == 0
    else:  # half a pixel more central (or no pre-shrink): a small difference, same picture
        assert diff.mean() < 4.0
        assert abs(new.astype(float).mean() - old.astype(float).mean()) < 1.0


def test_the_crop_is_the_centre():
    """A wide picture whose left and right quarters are red and blue: only grey remains."""
    a = np.full((40, 160, 3), 128, np.uint8)
    a[:, :40] = (255, 0, 0)
    a[:, 120:] = (0, 0, 255)
    out = resize_center_crop(Image.fromarray(a), 20)
    assert (out == 128).all()
