"""The DataModules: vocabulary before any Trainer, batches, deterministic evaluation masks."""

from __future__ import annotations

import warnings

import pytest
import torch

from vitbert.data.cache import DataError
from vitbert.data.datamodule import Flickr30kDataModule, ShapesDataModule


def _shapes(tmp_path, **kw):
    kw = {"root": str(tmp_path / "shapes"), "num_train": 300, "num_val": 64, "num_test": 40,
          "num_workers": 0, "batch_size": 16, **kw}
    return ShapesDataModule(**kw)


def test_num_tokens_works_right_after_init_and_the_tokenizer_is_cached(tmp_path):
    dm = _shapes(tmp_path)
    n = dm.num_tokens  # no prepare_data, no setup, no Trainer
    assert 30 < n < 200 and n == len(dm.tokenizer)
    assert dm.pad_token_id == dm.tokenizer.pad_token_id == 0
    # The model logs vocab_size = num_tokens; a second, different vocab_size here would make
    # Lightning's hparam merge fail at fit time.
    assert "vocab_size" not in dm.hparams and dm.hparams["num_train"] == 300
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
    dm = Flickr30kDataModule(root=str(root), cache_dir=str(tmp_path / "cache"), image_size=32,
                             num_workers=0, batch_size=4, prepare_workers=0,
                             max_bad_fraction=0.5, vocab_size=100, min_frequency=1)
    assert dm.num_tokens > 10  # from the annotations alone, before any image is decoded
    assert not (tmp_path / "cache" / "images.npy").exists()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dm.prepare_data()
    dm.setup("fit")
    b = next(iter(dm.train_dataloader()))
    assert b["images"].shape == (4, 3, 32, 32)
    assert len(dm.dataset("val")) > 0


def test_lightning_cli_can_read_the_signatures():
    from jsonargparse import ArgumentParser

    for cls in (ShapesDataModule, Flickr30kDataModule):
        p = ArgumentParser()
        p.add_class_arguments(cls, "data")
        cfg = p.parse_args(["--data.batch_size=8", "--data.whole_word_masking=true"])
        assert cfg.data.batch_size == 8 and cfg.data.whole_word_masking is True
