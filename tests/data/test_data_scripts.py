"""scripts/prepare_data.py and the data section of scripts/bench.py."""

from __future__ import annotations

import importlib.util
import json
import warnings
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def _load(name):
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_prepare_data_help_explains_the_formats(capsys):
    with pytest.raises(SystemExit):
        _load("prepare_data").main(["--help"])
    text = capsys.readouterr().out
    for needle in ["results_20130124.token", "results.csv", "dataset_flickr30k.json",
                   "flickr_annotations_30k.csv", "2199200615.jpg", "--image-size", "--out"]:
        assert needle in text


def test_prepare_data_prints_one_json_line(flickr_root, tmp_path, capsys):
    root = flickr_root("kaggle")
    argv = ["--root", str(root), "--out", str(tmp_path / "c"), "--image-size", "16",
            "--workers", "0", "--max-bad-fraction", "0.5"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _load("prepare_data").main(argv)
    last = capsys.readouterr().out.strip().splitlines()[-1]
    summary = json.loads(last)
    assert list(summary) == ["format", "images", "captions", "skipped", "splits"]
    assert summary["format"] == "kaggle" and summary["images"] == 17
    assert set(summary["splits"]) == {"train", "val", "test"}


def test_prepare_data_bad_root_exits_with_the_reason(tmp_path):
    with pytest.raises(SystemExit, match="no Flickr30k annotation file"):
        _load("prepare_data").main(["--root", str(tmp_path), "--out", str(tmp_path / "c")])


def test_bench_data_section_json(capsys):
    argv = ["--sections", "data", "--json", "--data-images", "12", "--data-image-size", "32",
            "--data-batch-size", "8", "--data-workers", "0", "--data-batches", "2"]
    _load("bench").main(argv)
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    d = out["data"]
    assert d["images"] == 12 and d["cached_samples_per_s"] > 0 and d["decode_samples_per_s"] > 0
