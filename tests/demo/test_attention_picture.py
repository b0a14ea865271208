"""The shared attention picture: the map lies on the photo, one colour scale for every panel."""

from __future__ import annotations

import io

import numpy as np
from PIL import Image

from vitbert.attention_picture import attention_figure, render_attention


def attention(weights, grid=(4, 4), S=32):
    rng = np.random.default_rng(0)
    return {"image": rng.integers(0, 256, (S, S, 3), dtype=np.uint8),
            "weights": np.asarray(weights, dtype=np.float32), "grid": grid,
            "layer": 1, "num_layers": 2, "num_heads": 4}


def test_map_and_photo_share_the_photos_pixel_edges():
    S = 32
    weights = np.zeros((1, 16), np.float32)
    weights[0, 5] = 0.5  # row 1, col 1: the cell spanning 8..16 on both axes
    fig = attention_figure(attention(weights, S=S), "a [MASK]")
    ax = fig.axes[0]
    assert list(ax.images[0].get_extent()) == [0, S, S, 0]  # pixel edges, not centres
    assert ax.get_xlim() == (0, S) and ax.get_ylim() == (S, 0)
    # Every contour line circles the peak's cell centre (12, 12), inside its neighbours' centres.
    for segment in ax.collections[0].allsegs:
        for line in segment:
            assert np.all((line > 4 - 1e-6) & (line < 20 + 1e-6))
            assert np.allclose(line.mean(axis=0), 12, atol=1.5)


def test_one_colour_scale_for_all_panels_and_the_heading_says_so():
    weights = np.array([np.linspace(0.0, 0.1, 16), np.linspace(0.2, 0.6, 16)], np.float32)
    fig = attention_figure(attention(weights), "a [MASK] and a [MASK]")
    panels = [ax for ax in fig.axes if ax.images]
    assert len(panels) == 2
    for ax in panels:
        norm = ax.collections[0].norm
        assert (norm.vmin, norm.vmax) == (0.0, np.float32(0.6))
    bars = [ax for ax in fig.axes if not ax.images]
    assert len(bars) == 1 and bars[0].get_ylim() == (0.0, np.float32(0.6))  # the colour bar
    assert "one colour scale for all panels" in "".join(t.get_text() for t in fig.texts)


def test_a_pooled_token_gets_a_number_not_a_map():
    png = render_attention(attention([[0.25]], grid=None), "a [MASK]")
    assert Image.open(io.BytesIO(png)).format == "PNG"
    fig = attention_figure(attention([[0.25]], grid=None), "a [MASK]")
    assert len(fig.axes) == 1 and not fig.axes[0].collections
    assert "25.0% of its attention" in fig.axes[0].get_title()
