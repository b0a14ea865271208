"""`vitbert.streaming.StreamingSource`: litdata shards as CaptionDataModule's source. Every caption
once an epoch with its photo's captions together, photos decoded in the loader workers, masks
from (seed, epoch, caption), another order next epoch, val in written order, and a short fit
through the real CLI (vitbert.streaming.source)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers import TINY_MODEL
from litdata import StreamingDataset
from shard_photos import karpathy_copy

from vitbert.cli import main
from vitbert.data import DataError
from vitbert.data.cache import decode_image
from vitbert.data.datamodule import CaptionDataModule
from vitbert.streaming import StreamingSource
from vitbert.streaming.shards import write_shards


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("streaming")
    # 40 photos (5 captions each): 24 train, 8 val, 8 test; a 41st, truncated, is skipped.
    write_shards(karpathy_copy(tmp / "flickr", n=40), tmp / "shards", workers=0)
    return tmp / "shards"


def _module(shards: Path, **settings) -> CaptionDataModule:
    dm = CaptionDataModule(source=StreamingSource(shards=str(shards), seed=7), image_size=16,
                           batch_size=10, pin_memory=False, **settings)
    dm.setup("fit")
    return dm


def _epoch(loader) -> list[dict[str, torch.Tensor]]:
    return list(loader)


def test_an_epoch_is_every_caption_once_with_its_photo(shards):
    dm = _module(shards, num_workers=1)  # decoded in a worker process
    loader = dm.train_dataloader()
    first, second = _epoch(loader), _epoch(loader)
    for batches in (first, second):
        indices = torch.cat([b["index"] for b in batches]).tolist()
        assert sorted(indices) == list(range(24 * 5))  # every caption of the 24 photos
        for b in batches:  # 2 photos a batch (10 captions / 5 a photo), each photo once
            assert b["images"].shape == (2, 3, 16, 16)
            assert b["image_index"].tolist() == [0] * 5 + [1] * 5
            assert len(set(b["image_id"].tolist())) == 2
    photos = [b["image_id"].tolist() for b in first]
    assert photos != [b["image_id"].tolist() for b in second]  # another order, epoch 2

    # The pixels are the cache's decode + resize of the photo's bytes.
    place = int(first[0]["image_id"][0])
    sample = next(s for s in StreamingDataset(str(shards / "train")) if s["photo"] == place)
    folder = shards.parent / "flickr" / "flickr30k-images"
    assert torch.equal(first[0]["images"][0],
                       torch.from_numpy(decode_image(folder / sample["key"], 16)))

    # Masks depend on (seed, epoch, caption) only: a new loader replays epoch 1's exactly.
    again = _epoch(_module(shards, num_workers=0).train_dataloader())
    for a, b in zip(first, again, strict=True):
        assert torch.equal(a["index"], b["index"]) and torch.equal(a["labels"], b["labels"])
    masks = {int(i): lab for b in first for i, lab in zip(b["index"], b["labels"], strict=True)}
    later = {int(i): lab for b in second for i, lab in zip(b["index"], b["labels"], strict=True)}
    assert any(not torch.equal(masks[i], later[i]) for i in masks)  # fresh masks, epoch 2


def test_validation_reads_the_val_shards_in_order(shards):
    dm = _module(shards, num_workers=0)
    assert dm.split_sizes()["val"] == (8, 40)
    batches = list(dm.val_dataloader())
    assert torch.cat([b["index"] for b in batches]).tolist() == list(range(40))
    assert torch.cat([b["image_id"] for b in batches]).tolist() == [p for p in range(8)
                                                                     for _ in range(5)]
    val = dm.dataset("val")  # what the caption and binding evaluations read
    written = [c for s in StreamingDataset(str(shards / "val")) for c in s["captions"].split("\n")]
    assert val.captions == written and dm.caption(7, "val") == written[7]
    assert val.rows.tolist() == [p for p in range(8) for _ in range(5)]


def test_the_frozen_tower_feature_cache_stops_with_one_line(shards):
    dm = _module(shards, num_workers=0)
    with pytest.raises(DataError, match=r"without one: .*model\.freeze_image\.steps"):
        dm.check_image_features()


def test_a_short_fit_through_the_cli(shards, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cli = main([
        "fit", *TINY_MODEL, "--model.net.image.image_size", "16",
        "--model.net.image.patch_size", "8",
        "--data.source", "vitbert.streaming.StreamingSource",
        "--data.source.init_args.shards", str(shards),
        "--data.batch_size", "10", "--data.num_workers", "0",
        "--trainer.max_epochs", "1", "--trainer.log_every_n_steps", "2",
        "--trainer.enable_progress_bar", "false",
    ])
    assert cli.trainer.global_step == 12  # 24 photos, 2 a batch
    figures = cli.trainer.callback_metrics
    assert {"val/top1", "val/top1_mismatch", "val/top1_text"} <= set(figures)
    assert cli.model.tokenizer.get_vocab() == cli.datamodule.tokenizer.get_vocab()
    assert cli.datamodule.hparams["source"]["init_args"]["shards"] == str(shards)
