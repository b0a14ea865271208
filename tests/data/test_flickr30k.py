"""Flickr30k: every annotation format, its quirks, odd and broken images, splits, the cache."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
from conftest import ALL, BAD, BLANK, GOOD, ODD, SPLIT_OF, captions_for

from vitbert.data.cache import CaptionDataset, DataError, decode_image
from vitbert.data.captioned_photos import build_cache
from vitbert.data.layouts import detect, hash_split, read_annotations
from vitbert.data.layouts.flickr30k import parse_kaggle

KEPT = GOOD + ODD  # every file that must end up in the cache


def _build(root, out, **kw):
    kw.setdefault("max_bad_fraction", 0.5)
    kw.setdefault("image_size", 32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        summary = build_cache(root, out, **kw)
    return summary, [str(w.message) for w in caught]


@pytest.mark.parametrize("fmt", ["token", "kaggle", "karpathy", "nlphuji"])
def test_each_format_is_detected_and_cached(flickr_root, tmp_path, fmt):
    root = flickr_root(fmt)
    summary, msgs = _build(root, tmp_path / "cache")
    assert summary["format"] == fmt
    extra = 1 if fmt == "kaggle" else 0  # the repaired broken row's photo
    assert summary["images"] == len(KEPT) + extra
    assert summary["captions"] == 5 * len(KEPT) + extra
    assert summary["skipped"] == len(BAD) + 1 + 1  # bad files, the blank photo, its blank caption
    assert sum(summary["splits"].values()) == summary["images"]
    # One warning, counting and naming the bad files with their reasons.
    [msg] = [m for m in msgs if "skipped" in m]
    for name in ["zero.jpg", "truncated.jpg", "missing.jpg"]:
        assert name in msg
    assert "zero-byte" in msg and "missing file" in msg and "cannot decode" in msg

    ds = {s: CaptionDataset(tmp_path / "cache", s) for s in ("train", "val", "test")}
    files = {ds["train"].files[r] for d in ds.values() for r in d.rows}
    assert not files & {*BAD, BLANK}
    assert set(KEPT) <= files
    # Captions survive exactly, attached to their photo.
    d = ds["train"]
    for i in range(len(d)):
        name = d.files[d.rows[i]]
        if name != "2199200615.jpg":
            assert d.captions[i] in captions_for(name)
    item = d[0]
    assert item["image"].dtype.__str__() == "torch.uint8" and item["image"].shape == (3, 32, 32)


def test_kaggle_broken_row_is_read_not_dropped(flickr_root, tmp_path):
    root = flickr_root("kaggle")
    parsed = parse_kaggle(root / "results.csv")
    rec = {r.file: r for r in parsed.records}["2199200615.jpg"]
    assert rec.captions == ["A dog runs across the grass ."]
    n_lines = len((root / "results.csv").read_text().splitlines())
    assert parsed.repaired == [f"results.csv line {n_lines}"]
    # Column names carry no leading space, captions none either.
    assert all(not c.startswith(" ") for r in parsed.records for c in r.captions)


def test_kaggle_unrepairable_row_reported_by_line(flickr_root, tmp_path):
    root = flickr_root("kaggle")
    with open(root / "results.csv", "a") as fh:
        fh.write("garbage without separators\n")
    n = len((root / "results.csv").read_text().splitlines())
    parsed = parse_kaggle(root / "results.csv")
    assert parsed.bad_captions == [
        f"results.csv line {n}: expected 'image_name| comment_number| comment'"]


def test_karpathy_and_nlphuji_splits_come_from_the_annotations(flickr_root, tmp_path):
    for fmt in ("karpathy", "nlphuji"):
        _, _, parsed = read_annotations(flickr_root(fmt), fmt)
        for r in parsed.records:
            want = "train" if SPLIT_OF[r.file] == "restval" else SPLIT_OF[r.file]
            assert r.split == want, (fmt, r.file)


def test_hash_split_is_by_image_deterministic_and_near_karpathy_ratios():
    names = [f"{1000000 + i}.jpg" for i in range(20000)]
    splits = [hash_split(n) for n in names]
    assert splits == [hash_split(n) for n in names]
    frac = {s: splits.count(s) / len(names) for s in ("train", "val", "test")}
    assert abs(frac["test"] - 1000 / 31783) < 0.005
    assert abs(frac["val"] - 1014 / 31783) < 0.005


def test_token_format_splits_by_image(flickr_root, tmp_path):
    _build(flickr_root("token"), tmp_path / "cache")
    ann = json.loads((tmp_path / "cache" / "annotations.json").read_text())
    split_of_row: dict[int, set] = {}
    for r, s in zip(ann["rows"], ann["splits"], strict=True):
        split_of_row.setdefault(r, set()).add(s)
    assert all(len(s) == 1 for s in split_of_row.values())
    for r, s in split_of_row.items():
        assert s == {hash_split(ann["files"][r])}


def test_odd_modes_are_converted_correctly(image_folder):
    sixteen = decode_image(image_folder / "sixteen.png", 16)
    assert abs(int(sixteen.mean()) - 128) <= 1  # scaled, not clipped to 255
    rgba = decode_image(image_folder / "rgba.png", 16)  # (3, 16, 16), crop of a 80x60 picture
    assert (rgba[:, :, 0] == 255).all()  # transparent left edge -> white
    assert tuple(rgba[:, 8, -1]) == (255, 0, 0)  # opaque right edge -> red
    grey = decode_image(image_folder / "grey.jpg", 16)
    assert (grey[0] == grey[1]).all() and (grey[1] == grey[2]).all()
    cmyk = decode_image(image_folder / "cmyk.jpg", 16).astype(int)
    ref = decode_image(image_folder / f"{GOOD[1]}", 16)  # chelsea too, a different crop
    assert cmyk.shape == ref.shape == (3, 16, 16)
    assert cmyk[0].mean() > cmyk[2].mean()  # the cat photo stays warm (red > blue), not inverted


def test_too_many_bad_images_stop_with_a_clear_error(flickr_root, tmp_path):
    root = flickr_root("token")
    with pytest.raises(DataError) as e:
        _build(root, tmp_path / "cache", max_bad_fraction=0.05)
    msg = str(e.value)
    assert str(root) in msg and "token format" in msg and "zero.jpg (zero-byte file)" in msg
    assert "max_bad_fraction" in msg
    assert not (tmp_path / "cache" / "cache.json").exists()


def test_no_annotation_file_is_a_clear_error(tmp_path):
    with pytest.raises(DataError, match=r"results_20130124\.token"):
        detect(tmp_path)


def test_cache_is_reused_and_rebuilt_when_settings_or_sources_change(flickr_root, tmp_path):
    root, out = flickr_root("token"), tmp_path / "cache"
    s1, _ = _build(root, out)
    assert s1["rebuilt"]
    s2, msgs = _build(root, out)
    assert not s2["rebuilt"] and not msgs  # reused: no decoding, no warning
    s3, _ = _build(root, out, image_size=24)
    assert s3["rebuilt"]
    assert np.load(out / "images.npy", mmap_mode="r").shape[-1] == 24
    ann = root / "results_20130124.token"
    ann.write_text(ann.read_text() + f"{GOOD[0]}#5\tone more caption .\n")
    s4, _ = _build(root, out, image_size=24)
    assert s4["rebuilt"] and s4["captions"] == s3["captions"] + 1


def test_worker_processes_write_the_same_cache(flickr_root, tmp_path):
    root = flickr_root("karpathy")
    _build(root, tmp_path / "a", workers=0)
    _build(root, tmp_path / "b", workers=2)
    a = np.load(tmp_path / "a" / "images.npy")
    b = np.load(tmp_path / "b" / "images.npy")
    assert a.any() and np.array_equal(a, b)
    assert len(ALL) == a.shape[0]  # one row per listed photo, failed rows stay zero
