"""The data module and its sources: vocabulary before any Trainer, batches, deterministic
evaluation masks, the CLI wiring (sizes linked from the model), one cache default."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch

from vitbert.data import CaptionedPhotos
from vitbert.data.cache import DataError
from vitbert.data.datamodule import CaptionDataModule
from vitbert.shapes import ShapesSource


def _shapes(tmp_path, **kw):
    source = ShapesSource(root=str(tmp_path / "shapes"), num_train=300, num_val=64, num_test=40)
    return CaptionDataModule(source=source, **{"num_workers": 0, "batch_size": 16, **kw})


def test_num_tokens_works_right_after_init_and_the_tokenizer_is_cached(tmp_path):
    dm = _shapes(tmp_path)
    n = dm.num_tokens  # no prepare_data, no setup, no Trainer
    assert 30 < n < 200 and n == len(dm.tokenizer)
    assert dm.pad_token_id == dm.tokenizer.pad_token_id == 0
    # The model logs vocab_size = num_tokens; a second, different vocab_size here would make
    # Lightning's hparam merge fail at fit time.
    assert "vocab_size" not in dm.hparams
    assert dm.hparams["source"] == {
        "class_path": "vitbert.shapes.source.ShapesSource",
        "init_args": {"root": str(tmp_path / "shapes"), "num_train": 300, "num_val": 64,
                      "num_test": 40, "seed": 0}}
    cached = list((tmp_path / "shapes").glob("tokenizer-*.json"))
    assert len(cached) == 1
    again = _shapes(tmp_path)
    assert again.tokenizer.get_vocab() == dm.tokenizer.get_vocab()
    own = _shapes(tmp_path, tokenizer=str(cached[0]))
    assert own.num_tokens == n


def test_batches_follow_the_contract(tmp_path):
    dm = _shapes(tmp_path, image_size=24)
    dm.prepare_data()
    dm.setup("fit")
    b = next(iter(dm.train_dataloader()))
    assert b["images"].shape == (16, 3, 24, 24) and b["images"].dtype == torch.uint8
    B, T = b["input_ids"].shape
    assert B == 16 and b["attention_mask"].shape == (B, T) == b["labels"].shape
    assert b["index"].dtype == torch.long
    assert (b["labels"] != -100).any(1).all()
    i = int(b["index"][0])
    ids = dm.tokenizer(dm.caption(i, "train"))["input_ids"]
    labels = b["labels"][0, : len(ids)]
    assert (labels[labels != -100] == torch.tensor(ids)[labels != -100]).all()


def test_validation_masks_repeat_between_epochs_and_runs(tmp_path):
    dm = _shapes(tmp_path)
    dm.setup("validate")
    first = [b["input_ids"] for b in dm.val_dataloader()]
    second = [b["input_ids"] for b in _shapes(tmp_path).val_dataloader()]
    assert all(torch.equal(a, b) for a, b in zip(first, second, strict=True))
    t1 = next(iter(dm.train_dataloader()))
    t2 = next(iter(dm.train_dataloader()))
    assert not torch.equal(t1["labels"], t2["labels"])  # training masks are fresh


def test_predict_split_and_captions(tmp_path):
    dm = _shapes(tmp_path, predict_split="val")
    n = sum(len(b["index"]) for b in dm.predict_dataloader())
    assert n == 64
    assert dm.caption(3, "val") == dm.dataset("val").captions[3]
    with pytest.raises(DataError, match="predict_split"):
        _shapes(tmp_path, predict_split="validation")


def test_flickr30k_datamodule_end_to_end(flickr_root, tmp_path):
    root = flickr_root("karpathy")
    source = CaptionedPhotos(root=str(root), cache_dir=str(tmp_path / "cache"),
                             prepare_workers=0, max_bad_fraction=0.5)
    dm = CaptionDataModule(source=source, image_size=32, num_workers=0, batch_size=4,
                           vocab_size=100, min_frequency=1, group_by_photo=True)
    assert dm.num_tokens > 10  # from the annotations alone, before any image is decoded
    assert not (tmp_path / "cache" / "images.npy").exists()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dm.prepare_data()
    dm.setup("fit")
    batches = list(dm.train_dataloader())
    b = batches[0]
    assert b["images"][b["image_index"]].shape == (4, 3, 32, 32)  # each caption's photo
    # Five captions a photo, kept together (group_by_photo): 4 captions span at most 2 photos,
    # each stacked once; every training caption comes once an epoch.
    assert all(len(b["images"]) == len(b["image_id"].unique()) <= 2 for b in batches)
    assert sorted(i for b in batches for i in b["index"].tolist()) == list(
        range(len(dm.dataset("train"))))
    assert len(dm.dataset("val")) > 0


def test_arguments_are_keywords_only(tmp_path):
    with pytest.raises(TypeError):
        ShapesSource(str(tmp_path))  # type: ignore[misc]
    with pytest.raises(TypeError):
        CaptionDataModule(ShapesSource(root=str(tmp_path)))  # type: ignore[misc]


def test_lightning_cli_can_read_the_signatures():
    from jsonargparse import ArgumentParser

    p = ArgumentParser()
    p.add_class_arguments(CaptionDataModule, "data")
    for source, setting in (("vitbert.shapes.ShapesSource", "num_train=8"),
                            ("vitbert.data.CaptionedPhotos", "root=/x")):
        cfg = p.parse_args([f"--data.source={source}",
                            f"--data.source.init_args.{setting}",
                            "--data.batch_size=8", "--data.whole_word_masking=true"])
        assert cfg.data.source.class_path == source
        assert cfg.data.batch_size == 8 and cfg.data.whole_word_masking is True
    assert cfg.data.source.init_args.root == "/x"
    help_text = p.format_help()
    assert "Shared machinery" not in help_text and "Captioned pictures" in help_text


def test_cli_sets_image_size_and_caption_length_once_on_the_model(tmp_path, monkeypatch):
    from vitbert.cli import DEFAULT_CONFIG, VitBertCLI
    from vitbert.lit.module import MaskedLMModule

    monkeypatch.chdir(tmp_path)
    cli = VitBertCLI(MaskedLMModule, CaptionDataModule, run=False, args=[
        "--config", str(DEFAULT_CONFIG), "--model.net.text.max_len", "12",
        "--model.net.image.image_size", "24", "--model.net.image.patch_size", "4",
        "--data.source.init_args.root", str(tmp_path / "shapes"),
        "--data.source.init_args.num_train", "64", "--data.source.init_args.num_val", "16",
        "--data.source.init_args.num_test", "16", "--data.num_workers", "0"])
    dm = cli.datamodule
    assert (dm.max_length, dm.image_size) == (12, 24)
    assert isinstance(dm.source, ShapesSource) and dm.source.num_train == 64
    assert cli.model.net.config.vocab_size == dm.num_tokens
    b = next(iter(dm.train_dataloader()))
    # Shapes captions run to ~16 pieces: cut to the model's 12, at the model's image size.
    assert b["input_ids"].shape[1] == 12 and b["images"].shape[-1] == 24


def test_flickr30k_configs_read_the_cache_prepare_data_builds_by_default():
    import yaml

    from vitbert.data import captioned_photos

    configs = sorted((Path(__file__).resolve().parents[2] / "configs").glob("flickr30k*.yaml"))
    assert len(configs) >= 3
    for path in configs:
        source = yaml.safe_load(path.read_text())["data"]["source"]
        assert source["class_path"] == "vitbert.data.CaptionedPhotos"
        assert source["init_args"]["cache_dir"] == captioned_photos.DEFAULT_CACHE_DIR, path.name
        assert source["init_args"]["root"] == captioned_photos.DEFAULT_ROOT, path.name
    assert CaptionedPhotos().cache_dir == Path(captioned_photos.DEFAULT_CACHE_DIR)
