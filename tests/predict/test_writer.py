"""`scripts/train.py predict` writes JSON Lines through PredictionWriter, whole or not at all."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from vitbert.run.predictions import PredictionWriter, _plain


def test_train_py_predict_writes_one_line_per_example(trained, tiny_cli_args, tmp_path,
                                                      monkeypatch):
    from vitbert import FillMask
    from vitbert.cli import main

    monkeypatch.chdir(tmp_path)
    out = tmp_path / "runs" / "predictions.jsonl"
    main(["predict", "--ckpt_path", str(trained.ckpt), "--prediction_writer.output", str(out),
          "--trainer.logger", "false", *tiny_cli_args])
    lines = out.read_text().splitlines()
    assert len(lines) == 16  # --data.source.init_args.num_test
    records = [json.loads(line) for line in lines]
    example = records[0]
    # The record of scripts/predict.py --json (FillMask.compare), plus the truth and the control.
    assert list(example) == ["index", "image_id", "text", "masks"]
    assert not any(t in example["text"] for t in ("[CLS]", "[SEP]", "[PAD]"))
    assert example["text"].count("[MASK]") == len(example["masks"]) >= 1
    mask = example["masks"][0]
    assert list(mask) == ["index", "truth", "with_image", "another_image", "text_only"]
    assert [m["index"] for m in example["masks"]] == list(range(len(example["masks"])))
    for reading in ("with_image", "another_image", "text_only"):
        assert len(mask[reading]) == 5
        assert set(mask[reading][0]) == {"score", "token", "token_str"}
    assert sorted(r["index"] for r in records) == list(range(16))
    assert [p.name for p in out.parent.iterdir()] == ["predictions.jsonl"]  # no temporary left

    # The same guesses as FillMask.compare on the same text and photo.
    fill_mask = FillMask.from_checkpoint(trained.ckpt, device="cpu")
    photos = np.load(trained.root / "shapes" / "images.npy", mmap_mode="r")  # (R, 3, S, S)
    photo = np.ascontiguousarray(photos[example["image_id"]].transpose(1, 2, 0))  # (S, S, 3)
    compared = fill_mask.compare(example["text"], photo, top_k=5)
    for ours, theirs in zip(example["masks"], compared["masks"], strict=True):
        for reading in ("with_image", "text_only"):
            assert [g["token"] for g in ours[reading]] == [g["token"] for g in theirs[reading]]
            assert [g["score"] for g in ours[reading]] == pytest.approx(
                [g["score"] for g in theirs[reading]], abs=1e-4)


def test_predictions_go_to_the_run_folder_by_default(trained, tiny_cli_args, tmp_path,
                                                     monkeypatch):
    from vitbert.cli import main

    monkeypatch.chdir(tmp_path)
    cli = main(["predict", "--ckpt_path", str(trained.ckpt), *tiny_cli_args])
    written = list(tmp_path.rglob("predictions.jsonl"))
    assert written == [Path(cli.trainer.log_dir).resolve() / "predictions.jsonl"]
    assert written[0].parent != tmp_path and "runs" in written[0].parts


def test_a_failed_run_leaves_the_previous_file_untouched(tmp_path):
    out = tmp_path / "predictions.jsonl"
    out.write_text('{"from": "the last run"}\n')
    trainer = SimpleNamespace(world_size=1, global_rank=0)
    writer = PredictionWriter(out)
    writer.on_predict_start(trainer, None)
    writer.write_on_batch_end(trainer, None, [{"index": 0}], None, None, 0, 0)
    writer.on_exception(trainer, None, RuntimeError("out of memory"))
    assert out.read_text() == '{"from": "the last run"}\n'
    assert [p.name for p in tmp_path.iterdir()] == ["predictions.jsonl"]


def test_each_rank_writes_its_own_file(tmp_path):
    writer = PredictionWriter(tmp_path / "p.jsonl")
    trainer = SimpleNamespace(world_size=2, global_rank=1)
    writer.on_predict_start(trainer, None)
    writer.write_on_batch_end(trainer, None, [{"index": 3}, {"index": 5}], None, None, 0, 0)
    writer.on_predict_end(trainer, None)
    assert (tmp_path / "p.rank1.jsonl").read_text() == '{"index": 3}\n{"index": 5}\n'
    with pytest.raises(TypeError, match="cannot write a object to JSON"):
        json.dumps(object(), default=_plain)
