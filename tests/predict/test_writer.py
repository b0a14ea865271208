"""`scripts/train.py predict` writes JSON Lines through PredictionWriter, whole or not at all."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from vitbert.lit.writer import PredictionWriter, _plain


def test_train_py_predict_writes_one_line_per_example(trained, tiny_cli_args, tmp_path,
                                                      monkeypatch):
    from vitbert.cli import main

    monkeypatch.chdir(tmp_path)
    out = tmp_path / "runs" / "predictions.jsonl"
    main(["predict", "--ckpt_path", str(trained.ckpt), "--prediction_writer.output", str(out),
          "--trainer.logger", "false", *tiny_cli_args])
    lines = out.read_text().splitlines()
    assert len(lines) == 16  # --data.source.init_args.num_test
    example = json.loads(lines[0])
    assert list(example) == ["index", "masked_text", "masks"]
    mask = example["masks"][0]
    assert {"position", "truth", "with_image", "text_only"} <= set(mask)
    assert len(mask["with_image"]) == len(mask["text_only"]) == 5
    assert "[MASK]" in example["masked_text"]
    assert sorted(json.loads(line)["index"] for line in lines) == list(range(16))
    assert [p.name for p in out.parent.iterdir()] == ["predictions.jsonl"]  # no temporary left


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
