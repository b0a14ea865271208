"""Two CPU processes under Lightning's DDP (gloo): metrics are synchronised, one checkpoint written.

``strategy=ddp`` re-launches the training script for rank 1, so it runs as a real command, the
way a user starts it. Synchronisation is checked against a single-process evaluation of the same
checkpoint: if each rank logged only its own half of the validation set, the figures would differ.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import TINY_MODEL
from tiny_run import tiny_shapes

from vitbert.cli import main

REPO = Path(__file__).resolve().parents[2]


def test_two_process_ddp_synchronises_metrics(tmp_path, monkeypatch):
    data_args = tiny_shapes(tmp_path / "shapes", num_train=256)
    # With the shapes data's levers (vitbert.shapes.BindingLevers, a network of its own class):
    # every rank builds and steps the same subclass.
    levers = ["--model.net.extension", json.dumps({
        "class_path": "vitbert.shapes.BindingLevers",
        "init_args": {"hue_dim": 8, "places": True, "lookup_heads": 2, "share_window": 2,
                      "lookup_place": True}})]
    common = [*TINY_MODEL, *levers, *data_args]
    command = [
        sys.executable, str(REPO / "scripts" / "train.py"), "fit", *common,
        "--trainer.accelerator", "cpu", "--trainer.devices", "2", "--trainer.strategy", "ddp",
        "--trainer.max_steps", "4", "--trainer.val_check_interval", "2",
        "--trainer.enable_progress_bar", "false", "--trainer.log_every_n_steps", "1",
    ]  # checkpoints in the run's own folder: every rank agrees on it, rank 0 links runs/latest
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=280)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "world_size: 2" in done.stderr or "distributed_backend=gloo" in done.stderr
    # Every epoch-level figure is logged as synchronised (Lightning warns of any that is not).
    assert "sync_dist=True" not in done.stderr, done.stderr[-3000:]

    folder = tmp_path / "runs" / "latest" / "checkpoints"
    assert folder.resolve() == tmp_path / "runs" / "version_0" / "checkpoints"
    checkpoints = sorted(p.name for p in folder.iterdir())
    # last.ckpt holds the final step whether or not the last validation improved (Lightning's
    # save_last alone refreshes it only with a new best).
    assert "last.ckpt" in checkpoints and len([c for c in checkpoints if c.startswith("best")]) == 1
    last = torch.load(folder / "last.ckpt", weights_only=True)
    assert last["global_step"] == 4

    rows = list(csv.DictReader(next((tmp_path / "runs").rglob("metrics.csv")).open()))
    logged = [r for r in rows if r.get("val/top1")][-1]
    assert int(logged["step"]) == 3  # the last validation, after step 4 (0-based step index)

    monkeypatch.chdir(tmp_path)
    single = main([
        "validate", *common, "--trainer.enable_progress_bar", "false",
        "--ckpt_path", str(folder / "last.ckpt"),
    ])
    figures = single.trainer.callback_metrics
    # Losses are continuous: synchronised means equal to float noise; one rank's half would not.
    for name in ("val/loss", "val/loss_text"):
        assert float(logged[name]) == pytest.approx(float(figures[name]), abs=1e-4), name
    # Accuracies count argmax hits; a barely trained model has near-ties that other batch
    # paddings can flip, so allow one target (64 captions hold about 100 targets).
    for name in ("val/top1", "val/top5_text"):
        assert float(logged[name]) == pytest.approx(float(figures[name]), abs=0.015), name
    # Caption figures: each process wrote half the captions; gathered, they are the captions
    # of all 64 images that one process writes. A half scores otherwise (CIDEr-D 7.7e-5 against
    # 1.1e-4 when each process scored its own); 10% leaves room for a near-tie word that
    # another batch size flips.
    for name in ("val/bleu4", "val/cider"):
        assert float(logged[name]) == pytest.approx(float(figures[name]), rel=0.1, abs=1e-9), name
