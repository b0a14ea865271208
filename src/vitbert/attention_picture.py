"""Draw where each [MASK] looks: the photo with its attention over the image tokens.

One picture, one panel per [MASK], shared by ``scripts/predict.py --attention`` and the web demo
(``vitbert.demo``). The input is :meth:`vitbert.predict.FillMask.attention`'s dict.

Three choices make the picture honest:

- The map lies exactly on the photo. Both are drawn over the same extent, the photo's pixel edges
  (0..S), and each image token's weight is placed at the centre of the cell it covers; matplotlib's
  default for an image (pixel *centres* at 0..S-1) would shift one of the two by half a pixel and
  leave a grey strip along two edges.
- The photo stays visible. The weights are drawn as contour lines in a colour map without yellow,
  green, red or orange in it ('cool'), not as a filled colour wash that hides objects of the map's
  own colours (a yellow shape under 'inferno's yellow).
- One colour scale for every panel, with one colour bar, and the title says so: two [MASK]s can be
  compared by colour. The "x% of its attention on the photo" line of each panel gives the amount.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np

CONTOUR_LEVELS = 4  # lines between the smallest and the largest weight of the picture
COLOUR_MAP = "cool"  # cyan → magenta: none of the shapes' colours at full strength


def attention_figure(attention: dict[str, Any], text: str):
    """The matplotlib Figure (Agg, never a window); :func:`render_attention` gives its PNG.

    With one pooled image token there is no map to draw (one number over the whole photo), so the
    panel shows the photo and states that single weight instead of a flat, meaningless heatmap.
    """
    import matplotlib

    matplotlib.use("Agg")  # files only, never a window
    import matplotlib.pyplot as plt
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize

    image, weights, grid = attention["image"], attention["weights"], attention["grid"]
    S = image.shape[0]
    count = len(weights)
    # A fixed layout in inches (panels, their titles, the colour bar, the heading): one draw,
    # where matplotlib's automatic layouts draw twice (half the time of a web demo's answer).
    panel, gap, head, bar_room = 4.0, 0.35, 0.75, (1.3 if grid is not None else 0.2)
    width = count * panel + (count + 1) * gap + bar_room
    height = panel + head + 0.55
    fig = plt.figure(figsize=(width, height))
    axes = [fig.add_axes(((gap + i * (panel + gap)) / width, 0.2 / height,
                          panel / width, panel / height)) for i in range(count)]
    edges = (0, S, S, 0)  # left, right, bottom, top: the photo's pixel edges, row 0 on top
    norm = Normalize(vmin=float(weights.min()), vmax=float(weights.max()))
    for i, ax in enumerate(axes):
        name = f"[MASK] {i + 1}" if count > 1 else "[MASK]"
        ax.imshow(image, extent=edges, interpolation="nearest" if S < 128 else "antialiased")
        ax.set_xlim(0, S)
        ax.set_ylim(S, 0)
        ax.set_xticks([])
        ax.set_yticks([])
        if grid is None:
            ax.set_title(f"{name} → the single pooled image token:\n"
                         f"{weights[i, 0]:.1%} of its attention", fontsize=10)
            continue
        rows, cols = grid
        heat = weights[i].reshape(grid)  # (rows, cols)
        # Each token's weight sits at the centre of the cell of the photo it covers.
        x = (np.arange(cols) + 0.5) * S / cols
        y = (np.arange(rows) + 0.5) * S / rows
        levels = np.linspace(norm.vmin, norm.vmax, CONTOUR_LEVELS + 2)[1:-1]
        if norm.vmax > norm.vmin:
            ax.contour(x, y, heat, levels=levels, cmap=COLOUR_MAP, norm=norm, linewidths=2.0)
        ax.set_title(f"{name}: {weights[i].sum():.0%} of its attention on the photo",
                     fontsize=10)
    what = ("one pooled image token, no map over the photo" if grid is None
            else f"{grid[0]}×{grid[1]} image tokens; lines: weight per token, one colour scale "
                 "for all panels")
    heading = (f"{text}\ntext-encoder layer {attention['layer']} (of {attention['num_layers']}, "
               f"from 0), mean of {attention['num_heads']} heads\n{what}")
    fig.text(0.5, 1 - 0.1 / height, heading, fontsize=10, ha="center", va="top")
    if grid is not None:
        left = (count * (panel + gap) + gap) / width
        bar = fig.colorbar(ScalarMappable(norm=norm, cmap=COLOUR_MAP),
                           cax=fig.add_axes((left, 0.2 / height, 0.2 / width, panel / height)))
        bar.set_label("share of the [MASK]'s attention, per image token")
        bar.ax.yaxis.set_major_formatter(lambda value, _: f"{value:.2%}")
    return fig


def render_attention(attention: dict[str, Any], text: str) -> bytes:
    """The PNG bytes of :func:`attention_figure`."""
    import matplotlib.pyplot as plt

    fig = attention_figure(attention, text)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    return buffer.getvalue()


__all__ = ["attention_figure", "render_attention"]
