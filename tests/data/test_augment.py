"""The word-preserving augmentation: a random resized crop that keeps most of the picture."""

from __future__ import annotations

import pytest
import torch

from vitbert.data.augment import random_resized_crop


def test_no_crop_at_scale_one_and_bad_scales_refused():
    assert random_resized_crop(32, 1.0) is None
    for bad in (0.0, 1.5):
        with pytest.raises(ValueError, match="random_crop_scale"):
            random_resized_crop(32, bad)


def test_crop_keeps_size_and_dtype_and_only_zooms_in():
    # A left-to-right ramp: a crop (no flip) keeps the ramp rising and stays inside its range.
    ramp = torch.linspace(0, 255, 32).round().to(torch.uint8).expand(3, 32, 32).contiguous()
    crop = random_resized_crop(32, 0.5)
    torch.manual_seed(0)
    outs = [crop(ramp) for _ in range(20)]
    assert all(o.shape == (3, 32, 32) and o.dtype == torch.uint8 for o in outs)
    assert any(not torch.equal(o, ramp) for o in outs)
    for o in outs:
        row = o[0, 16].float()
        assert (row[1:] - row[:-1] >= -1).all(), "never mirrored"
        assert row[-1] - row[0] >= 0.45 * 255, "at least half the width kept"
