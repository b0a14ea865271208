"""Splits said out loud: every fit starts by printing photos and captions per split and where the
split came from; an empty split stops the stage that needs it with one line, except validation,
which a fit then runs without."""

from __future__ import annotations

import warnings

import pytest
from helpers import TINY_MODEL, objectives

from vitbert.data import CaptionedPhotos
from vitbert.data.cache import DataError
from vitbert.data.datamodule import CaptionDataModule
from vitbert.data.layouts import hash_split
from vitbert.shapes import ShapesSource

# 40 file names whose hash split puts 38 photos in train, none in val and 2 in test.
FORTY = [f"{1000000 + i}.jpg" for i in range(40)]
# The embedded default's objectives but the twin contrast: twin photos are the shapes source's.
TINY = [*TINY_MODEL, *objectives("itc", "words", "captions", "mlm"), "--examples.num_examples", "0",
        "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false"]


def _flickr(root, cache, **kw) -> CaptionDataModule:
    source = CaptionedPhotos(root=str(root), cache_dir=str(cache), prepare_workers=0)
    return CaptionDataModule(source=source, image_size=32, num_workers=0, batch_size=8,
                             min_frequency=1, **kw)


def _fit(root, tmp_path, *extra: str):
    from vitbert.cli import main

    return main(["fit", "--data.source.class_path", "vitbert.data.CaptionedPhotos",
                 "--data.source.init_args.root", str(root),
                 "--data.source.init_args.cache_dir", str(tmp_path / "cache"),
                 "--data.source.init_args.prepare_workers", "0",
                 "--data.num_workers", "0", "--data.batch_size", "8",
                 "--trainer.max_steps", "2", *TINY, *extra])


def test_the_names_split_as_this_file_says():
    assert [hash_split(n) for n in FORTY].count("train") == 38
    assert [hash_split(n) for n in FORTY].count("test") == 2


def test_a_fit_on_40_kaggle_photos_says_its_splits_and_runs_without_validation(
        tmp_path, monkeypatch, capsys, kaggle_copy):
    root = kaggle_copy(tmp_path / "kaggle", FORTY)
    monkeypatch.chdir(tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cli = _fit(root, tmp_path)
    out = capsys.readouterr().out
    assert f"split: hash of the file name ({root / 'results.csv'} has no split; ~3% val, " \
           "~3% test)" in out
    assert "  train: 38 photos, 190 captions\n" in out
    assert (f"  val: 0 photos (the hash split of 40 photos gave none); validation is off: add "
            f"photos to {root} or give Karpathy's dataset_flickr30k.json\n") in out
    assert "  test: 2 photos, 10 captions\n" in out
    assert cli.trainer.global_step == 2
    assert not [k for k in cli.trainer.callback_metrics if k.startswith("val/")]
    assert not [w for w in caught if "length" in str(w.message)], [str(w.message) for w in caught]
    assert "Total length" not in out + capsys.readouterr().err


def test_karpathy_json_says_its_split_is_karpathys(karpathy_flickr, tmp_path, capsys):
    dm = _flickr(karpathy_flickr, tmp_path / "cache")
    dm.setup("fit")
    out = capsys.readouterr().out
    assert (f"split: Karpathy's split from {karpathy_flickr / 'dataset_flickr30k.json'}\n"
            "  train: 6 photos, 30 captions\n  val: 3 photos, 15 captions\n"
            "  test: 3 photos, 15 captions") in out
    assert dm.split_sizes() == {"train": (6, 30), "val": (3, 15), "test": (3, 15)}


def test_an_empty_train_split_stops_the_fit_with_one_line_naming_the_folder(
        tmp_path, monkeypatch, capsys, kaggle_copy):
    root = kaggle_copy(tmp_path / "kaggle", [n for n in FORTY if hash_split(n) == "test"])
    with pytest.raises(DataError) as error:
        _flickr(root, tmp_path / "cache").setup("fit")
    assert str(error.value) == (f"train: 0 photos (the hash split of 2 photos gave none); "
                                f"nothing to train on: add photos to {root} (about 94% of them "
                                "land in train)")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        _fit(root, tmp_path)
    assert exit_.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[-1] == f"error: {error.value}"


def test_testing_an_empty_split_says_so(tmp_path, kaggle_copy):
    root = kaggle_copy(tmp_path / "kaggle", FORTY)
    dm = _flickr(root, tmp_path / "cache", test_split="val")
    with pytest.raises(DataError, match=r"^val: 0 photos \(the hash split of 40 photos gave "
                                        r"none\); nothing to test: add photos to "):
        dm.setup("test")
    with pytest.raises(DataError, match="nothing to validate"):
        dm.setup("validate")
    assert "there is nothing to test" in dm.data_summary()


def test_generated_data_says_it_is_generated(tmp_path):
    source = ShapesSource(root=str(tmp_path / "shapes"), num_train=20, num_val=0, num_test=4)
    dm = CaptionDataModule(source=source, num_workers=0, batch_size=4)
    summary = dm.data_summary()
    assert "split: generated" in summary and "  train: 20 photos, 20 captions" in summary
    assert ("  val: 0 photos (num_val=0); validation is off: set "
            "--data.source.init_args.num_val above 0") in summary
