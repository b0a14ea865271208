"""The generated shapes data (vitbert.shapes.data): deterministic, captions true to the pictures,
compositional split."""

from __future__ import annotations

import re

import numpy as np

from vitbert.data.cache import CaptionDataset
from vitbert.shapes import data as shapes

PATTERN = re.compile(
    r"^(?:there is |a |the )?(?:a |the )?(small|large) (\w+) (\w+) (?:is |sits )?(?:to the )?"
    r"(left of|right of|above|below) (?:a|the) (small|large) (\w+) (\w+)$"
)


def _parse(caption):
    m = PATTERN.match(caption)
    assert m, caption
    s1, c1, sh1, rel, s2, c2, sh2 = m.groups()
    return (s1, c1, sh1), rel, (s2, c2, sh2)


def test_deterministic_from_seed():
    a_img, a_cap = shapes.generate(200, 32, seed=5)
    b_img, b_cap = shapes.generate(200, 32, seed=5)
    c_img, c_cap = shapes.generate(200, 32, seed=6)
    assert c_cap != a_cap
    assert np.array_equal(a_img, b_img) and a_cap == b_cap
    assert not np.array_equal(a_img, c_img)
    assert a_img.dtype == np.uint8 and a_img.shape == (200, 3, 32, 32)


def test_captions_describe_the_picture():
    """Find each named colour's pixels: their centroids obey the relation, their area the size."""
    imgs, caps = shapes.generate(300, 32, seed=0)
    palette = {k: np.array(v, float) for k, v in shapes.COLOURS.items()}
    checked = 0
    for img, cap in zip(imgs, caps, strict=True):
        (s1, c1, _), rel, (s2, c2, _) = _parse(cap)
        if c1 == c2:
            continue
        px = img.reshape(3, -1).T.astype(float)  # (S*S, 3)
        ys, xs = np.divmod(np.arange(px.shape[0]), 32)
        cent, area = [], []
        for c in (c1, c2):
            near = np.linalg.norm(px - palette[c], axis=1) < 40
            assert near.sum() > 10, (cap, c)
            cent.append((xs[near].mean(), ys[near].mean()))
            area.append(near.sum())
        (x1, y1), (x2, y2) = cent
        ok = {"left of": x1 < x2 - 5, "right of": x1 > x2 + 5,
              "above": y1 < y2 - 5, "below": y1 > y2 + 5}[rel]
        assert ok, cap
        if s1 != s2:
            assert (area[0] > area[1]) == (s1 == "large"), cap
        checked += 1
    assert checked > 200


def test_val_and_test_hold_colour_shape_pairs_never_seen_in_training():
    held = {(list(shapes.COLOURS)[c], shapes.SHAPES[s]) for c, s in shapes.held_out_pairs(0)}
    assert len(held) == 6 and len({c for c, _ in held}) == 6  # each colour held out once
    _, train = shapes.generate(2000, 16, seed=0, split="train")
    train_pairs = {(o[1], o[2]) for cap in train for o in _parse(cap)[::2]}
    assert not train_pairs & held
    assert len(train_pairs) == 24  # every other pair does appear
    for split in ("val", "test"):
        _, caps = shapes.generate(500, 16, seed=0, split=split)
        for cap in caps:
            a, _, b = _parse(cap)
            assert {(a[1], a[2]), (b[1], b[2])} & held, cap


def test_phrasing_varies_and_relations_are_balanced():
    _, caps = shapes.generate(2000, 16, seed=0)
    starts = {c.split()[0] + (" is" if " is " in c else "") for c in caps}
    assert len(starts) >= 3
    rels = [_parse(c)[1] for c in caps]
    for r in shapes.RELATIONS:
        assert 0.2 < rels.count(r) / len(rels) < 0.3


def test_cache_is_written_reused_and_rebuilt(tmp_path):
    root = tmp_path / "shapes"
    meta = shapes.build_cache(root, 16, 300, 50, 40, seed=1)
    assert meta["splits"] == {"train": 300, "val": 50, "test": 40}
    stamp = (root / "images.npy").stat().st_mtime_ns
    shapes.build_cache(root, 16, 300, 50, 40, seed=1)
    assert (root / "images.npy").stat().st_mtime_ns == stamp  # reused
    ds = CaptionDataset(root, "val")
    imgs, caps = shapes.generate(50, 16, seed=1, split="val")
    assert ds.captions == caps and np.array_equal(ds[7]["image"].numpy(), imgs[7])
    shapes.build_cache(root, 16, 300, 50, 40, seed=2)
    assert CaptionDataset(root, "val").captions != caps  # settings changed: rebuilt
