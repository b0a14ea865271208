"""The embedded default: captioned pictures of two shapes, generated from a seed in seconds.

Each picture holds two objects (one of 5 shapes, 6 colours, 2 sizes) on a dark background, one
placed left of / right of / above / below the other. The caption names both and the relation:

    "a small red circle left of a large blue square"
    "there is a large green cross above a small yellow triangle"
    "a small purple diamond is to the right of a large orange circle"

Why it works as a test of looking: colour, shape, size and relation words are drawn independently
of each other and of the phrasing, so the text around a hidden one says nothing about which it is;
only the pixels do. (Function words, by contrast, are guessable from text alone, a baseline.)

Compositional split: a fifth of the (colour, shape) pairs, chosen from the seed with every colour
and every shape held out once or twice, never appear in train; every val and test picture holds at
least one held-out pair. Train-vs-val accuracy on colour/shape words tells whether the model reads
colour and shape separately or memorises pairs.

Everything is vectorised in numpy (shape masks from coordinate grids, 2x2 supersampled for smooth
edges at 32 px); 24,000 pictures at 32 px take about a second. The pictures go into the same cache
format as Flickr30k (`vitbert.data.cache`), so one dataset class reads both.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from vitbert.data import cache
from vitbert.data.lock import one_builder

COLOURS = {
    "red": (220, 40, 40), "green": (40, 180, 60), "blue": (50, 90, 230),
    "yellow": (235, 215, 40), "purple": (150, 60, 200), "orange": (245, 140, 30),
}
SHAPES = ("circle", "square", "triangle", "diamond", "cross")
SIZES = {"small": 0.12, "large": 0.19}  # radius as a fraction of the image side
RELATIONS = ("left of", "right of", "above", "below")
INVERSE = {"left of": "right of", "right of": "left of", "above": "below", "below": "above"}
# Phrasings: (prefix, relation wording); relation words stay the same content words.
TEMPLATES = (
    "a {a} {rel} a {b}",
    "there is a {a} {rel} a {b}",
    "a {a} is {rel2} a {b}",
    "a {a} sits {rel} a {b}",
    "the {a} is {rel2} the {b}",
)
REL2 = {"left of": "to the left of", "right of": "to the right of", "above": "above",
        "below": "below"}
BACKGROUND = 30
DEFAULT_ROOT = "data/shapes"  # where the embedded default is generated
# Generation time per 32×32 picture on one CPU core (24 000 pictures: 6.3 s measured).
SECONDS_PER_PICTURE_32 = 2.6e-4


def held_out_pairs(seed: int) -> set[tuple[int, int]]:
    """(colour, shape) index pairs never shown in train: 6 of 30, one per colour, shapes spread."""
    rng = np.random.default_rng([seed, 1])
    offset = int(rng.integers(len(SHAPES)))
    order = rng.permutation(len(COLOURS))
    return {(int(c), (i * 2 + offset) % len(SHAPES)) for i, c in enumerate(order)}


def _shape_coverage(shape: np.ndarray, cx: np.ndarray, cy: np.ndarray, r: np.ndarray,
                    size: int, ss: int = 2) -> np.ndarray:
    """Anti-aliased coverage in [0, 1] of one object per picture: (n,) params -> (n, S, S)."""
    g = (np.arange(size * ss) + 0.5) / ss  # sub-pixel centres, pixel units
    out = np.zeros((len(cx), size * ss, size * ss), dtype=bool)
    for k in range(len(SHAPES)):
        sel = np.flatnonzero(shape == k)  # only the pictures drawing this shape
        if len(sel) == 0:
            continue
        dx = g[None, None, :] - cx[sel, None, None]  # (m, 1, S*ss)
        dy = g[None, :, None] - cy[sel, None, None]  # (m, S*ss, 1)
        rr = r[sel, None, None]
        ax, ay = np.abs(dx), np.abs(dy)
        if k == 0:  # circle
            m = dx**2 + dy**2 <= rr**2
        elif k == 1:  # square, about the circle's area
            m = np.maximum(ax, ay) <= 0.82 * rr
        elif k == 2:  # triangle, apex up
            m = (dy <= 0.8 * rr) & (dy >= -rr) & (ax <= (dy + rr) * 0.6)
        elif k == 3:  # diamond
            m = ax + ay <= 1.1 * rr
        else:  # cross
            m = ((ax <= 0.33 * rr) & (ay <= rr)) | ((ay <= 0.33 * rr) & (ax <= rr))
        out[sel] = m
    o = out.view(np.uint8)  # average each ss x ss block by adding strided slices (fast)
    cov = sum(o[:, i::ss, j::ss].astype(np.float32) for i in range(ss) for j in range(ss))
    return cov / (ss * ss)


def generate(n: int, image_size: int = 32, seed: int = 0, split: str = "train",
             chunk: int = 2048) -> tuple[np.ndarray, list[str]]:
    """n pictures uint8 (n, 3, S, S) and their captions, deterministic from (seed, split)."""
    rng = np.random.default_rng([seed, cache.SPLITS.index(split)])
    held = held_out_pairs(seed)
    pairs = np.array([(c, s) for c in range(len(COLOURS)) for s in range(len(SHAPES))])
    is_held = np.array([tuple(p) in held for p in pairs])
    seen, unseen = pairs[~is_held], pairs[is_held]
    if split == "train":
        a = seen[rng.integers(len(seen), size=n)]
        b = seen[rng.integers(len(seen), size=n)]
    else:  # one held-out pair per picture, in either slot
        a = unseen[rng.integers(len(unseen), size=n)]
        b = pairs[rng.integers(len(pairs), size=n)]
        swap = rng.random(n) < 0.5
        a[swap], b[swap] = b[swap].copy(), a[swap].copy()
    size_a, size_b = rng.integers(2, size=n), rng.integers(2, size=n)
    radii = np.array(list(SIZES.values())) * image_size
    ra, rb = radii[size_a], radii[size_b]
    rel = rng.integers(len(RELATIONS), size=n)

    # Place a and b: separated by ~half the picture along the relation's axis, with a smaller
    # offset across it, so exactly one relation word is true.
    S = float(image_size)
    along = rng.uniform(0.42, 0.52, n) * S
    across = rng.uniform(-0.15, 0.15, n) * S
    sign = np.where((rel == 0) | (rel == 2), -1.0, 1.0)  # a at smaller x (left) / y (above)
    lo = np.maximum(ra, rb) + 0.5
    mid_along = rng.uniform(lo + along / 2, S - lo - along / 2)
    mid_across = rng.uniform(lo + np.abs(across) / 2, S - lo - np.abs(across) / 2)
    pa_along, pb_along = mid_along + sign * along / 2, mid_along - sign * along / 2
    pa_across, pb_across = mid_across + across / 2, mid_across - across / 2
    horizontal = rel < 2
    ax_, ay_ = np.where(horizontal, pa_along, pa_across), np.where(horizontal, pa_across, pa_along)
    bx_, by_ = np.where(horizontal, pb_along, pb_across), np.where(horizontal, pb_across, pb_along)

    palette = np.array(list(COLOURS.values()), dtype=np.float32)  # (6, 3)
    images = np.empty((n, 3, image_size, image_size), dtype=np.uint8)
    for s in range(0, n, chunk):
        e = min(n, s + chunk)
        noise = rng.integers(-6, 7, (e - s, 3, image_size, image_size), dtype=np.int8)
        img = np.full((e - s, 3, image_size, image_size), BACKGROUND, np.float32) + noise
        for pair, (cx, cy), r in ((a, (ax_, ay_), ra), (b, (bx_, by_), rb)):
            cov = _shape_coverage(pair[s:e, 1], cx[s:e], cy[s:e], r[s:e], image_size)  # (n, S, S)
            col = palette[pair[s:e, 0]][:, :, None, None]  # (n, 3, 1, 1)
            img = img * (1 - cov[:, None]) + col * cov[:, None]
        images[s:e] = np.clip(img + 0.5, 0, 255).astype(np.uint8)

    colour_names, size_names = list(COLOURS), list(SIZES)
    templates = rng.integers(len(TEMPLATES), size=n)
    flip = rng.random(n) < 0.5  # mention b first with the inverse relation
    captions = []
    for i in range(n):
        da = f"{size_names[size_a[i]]} {colour_names[a[i, 0]]} {SHAPES[a[i, 1]]}"
        db = f"{size_names[size_b[i]]} {colour_names[b[i, 0]]} {SHAPES[b[i, 1]]}"
        r_ = RELATIONS[rel[i]]
        if flip[i]:
            da, db, r_ = db, da, INVERSE[r_]
        captions.append(TEMPLATES[templates[i]].format(a=da, b=db, rel=r_, rel2=REL2[r_]))
    return images, captions


@one_builder("root")
def build_cache(root: str | Path = DEFAULT_ROOT, image_size: int = 32, num_train: int = 20_000,
                num_val: int = 2_000, num_test: int = 2_000, seed: int = 0,
                force: bool = False) -> dict[str, Any]:
    """Generate the shapes data set into the cache format at `root` unless it is already there."""
    root = Path(root)
    counts = {"train": num_train, "val": num_val, "test": num_test}
    settings = {"version": cache.CACHE_VERSION, "format": "shapes", "image_size": int(image_size),
                "seed": int(seed), "counts": counts}
    if not force and cache.is_current(root, settings):
        return cache.read_meta(root)  # type: ignore[return-value]
    total = sum(counts.values())
    megabytes = total * image_size**2 * 3 / 1e6
    seconds = total * SECONDS_PER_PICTURE_32 * (image_size / 32) ** 2
    print(f"generating the shapes data set into {root} ({total} pictures, {megabytes:.0f} MB; "
          f"once, ~{max(seconds, 1):.0f} s)", file=sys.stderr, flush=True)  # stdout: results
    t0 = time.perf_counter()
    cache.start_build(root)
    arr = cache.new_image_array(root, sum(counts.values()), image_size)
    texts, splits, start = [], [], 0
    for split, n in counts.items():
        imgs, caps = generate(n, image_size, seed, split)
        arr[start : start + n] = imgs
        start += n
        texts += caps
        splits += [split] * n
    arr.flush()
    del arr
    files = [f"{s}/{i}" for s, n in counts.items() for i in range(n)]
    return cache.write_annotations(root, files, list(range(len(texts))), texts, splits, settings,
                                   extra={"build_seconds": round(time.perf_counter() - t0, 2)})
