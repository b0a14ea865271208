"""scripts/prepare_data.py and the data section of scripts/bench.py."""

from __future__ import annotations

import json
import warnings

import pytest
from helpers import REPO, load_script


def test_prepare_data_help_explains_the_formats(capsys):
    with pytest.raises(SystemExit):
        load_script("prepare_data").main(["--help"])
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
        load_script("prepare_data").main(argv)
    last = capsys.readouterr().out.strip().splitlines()[-1]
    summary = json.loads(last)
    assert list(summary) == ["format", "images", "captions", "skipped", "splits"]
    assert summary["format"] == "kaggle" and summary["images"] == 17
    assert set(summary["splits"]) == {"train", "val", "test"}


def test_prepare_data_bad_root_exits_with_the_reason(tmp_path, capsys):
    with pytest.raises(SystemExit) as exited:
        load_script("prepare_data").main(["--root", str(tmp_path), "--out", str(tmp_path / "c")])
    assert exited.value.code == 2  # a user's mistake, as in every script
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"error: {tmp_path}: no Flickr30k annotation file")


def test_prepare_data_default_cache_is_the_one_the_flickr30k_config_reads():
    prepare = load_script("prepare_data")
    from_config = prepare.parse_args(["--config", str(REPO / "configs/flickr30k.yaml")])
    assert (from_config.root, from_config.out, from_config.image_size) == (
        "data/flickr30k", "data/flickr30k-cache-224", 224)
    from vitbert.data import captioned_photos

    plain = prepare.parse_args([])
    # main() fills in DEFAULT_CACHE_DIR for a missing --out.
    assert plain.out is None and plain.root == captioned_photos.DEFAULT_ROOT
    assert captioned_photos.DEFAULT_CACHE_DIR == from_config.out


def test_prepare_data_with_config_builds_the_cache_training_reads(flickr_root, tmp_path, capsys):
    from vitbert.data import CaptionedPhotos
    from vitbert.data.datamodule import CaptionDataModule

    root, cache_dir = flickr_root("karpathy"), tmp_path / "cache"
    config = tmp_path / "run.yaml"
    config.write_text(f"""
model: {{net: {{image: {{image_size: 16}}}}}}
data:
  source:
    class_path: vitbert.data.CaptionedPhotos
    init_args: {{root: {root}, cache_dir: {cache_dir}, max_bad_fraction: 0.5}}
""")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        load_script("prepare_data").main(["--config", str(config), "--workers", "0"])
    assert json.loads((cache_dir / "cache.json").read_text())["settings"]["image_size"] == 16
    source = CaptionedPhotos(root=str(root), cache_dir=str(cache_dir), max_bad_fraction=0.5)
    dm = CaptionDataModule(source=source, image_size=16, num_workers=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert dm.source.build_cache(16)["rebuilt"] is False  # found current: nothing decoded


def test_prepare_data_config_without_a_flickr_source_says_so(tmp_path, capsys):
    config = tmp_path / "shapes.yaml"
    config.write_text("data: {source: {class_path: vitbert.shapes.ShapesSource}}\n")
    with pytest.raises(SystemExit) as exited:
        load_script("prepare_data").main(["--config", str(config)])
    assert exited.value.code == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"error: --config {config}: data.source is not a CaptionedPhotos")


def test_bench_data_section_json(capsys):
    argv = ["--sections", "data", "--json", "--data-images", "12", "--data-image-size", "32",
            "--data-batch-size", "8", "--data-workers", "0", "--data-batches", "2"]
    load_script("bench").main(argv)
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    d = out["data"]
    assert d["images"] == 12 and d["cached_samples_per_s"] > 0 and d["decode_samples_per_s"] > 0
    assert d["streamed_samples_per_s"] > 0 and d["shards_write_s"] > 0
