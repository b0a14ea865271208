"""Streamed shards under two CPU processes (DDP, gloo), through scripts/train.py as a user runs
it: each rank trains on its own photos, as many as the other's, in another order each epoch;
and a run killed mid-epoch (SIGKILL, after a checkpoint) and resumed trains each rank on the
very photos of the run never stopped and ends with the same weights (vitbert.streaming.source).

The resume is tested, not trusted: litdata keeps its position in the loader's state_dict, which
Lightning saves from rank zero alone and restores on every rank (litdata #775 and Lightning
#20550 are ways this has broken in silence before).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from helpers import TINY_MODEL, objectives
from tiny_run import start_paused

sys.path.insert(0, str(Path(__file__).parents[1] / "data"))
from shard_photos import karpathy_copy  # tests/data/shard_photos.py, on the path above

from vitbert.streaming.shards import write_shards

REPO = Path(__file__).resolve().parents[2]
TRAIN_PHOTOS, STEPS_PER_EPOCH, EPOCHS = 24, 6, 2  # 2 photos a batch, 12 a rank an epoch
PAUSE_STEP, SAVE_EVERY = 9, 4  # held in epoch 2 (steps 6-11), one step after the save at 8


def _command(shards: Path, run: Path, *extra: str) -> list[str]:
    record = {"class_path": "record_photos.RecordPhotos", "init_args": {"folder": str(run)}}
    return [
        # The twin contrast reads twin photos from an image cache, which shards do not have.
        sys.executable, str(REPO / "scripts" / "train.py"), "fit", *TINY_MODEL,
        *objectives("itc", "words", "captions", "mlm"),
        "--model.net.image.image_size", "16", "--model.net.image.patch_size", "8",
        "--model.net.text.dropout", "0.1",
        "--data.source", "vitbert.streaming.StreamingSource",
        "--data.source.init_args.shards", str(shards),
        "--data.batch_size", "10", "--data.num_workers", "1",
        "--trainer.accelerator", "cpu", "--trainer.devices", "2", "--trainer.strategy", "ddp",
        "--trainer.max_epochs", str(EPOCHS), "--trainer.enable_progress_bar", "false",
        "--trainer.log_every_n_steps", "2", "--trainer.limit_val_batches", "0",
        "--checkpoint.dirpath", str(run / "checkpoints"),
        "--last_checkpoint.every_n_train_steps", str(SAVE_EVERY),
        f"--trainer.callbacks+={json.dumps(record)}", *extra,
    ]


def _env() -> dict[str, str]:
    path = os.pathsep.join([str(REPO / "src"), str(Path(__file__).parent)])
    return {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONPATH": path}


def _photos(run: Path) -> dict[int, dict[int, list[int]]]:
    """rank → step → the photos of that step's batch (a step recorded twice: the later)."""
    return {rank: {r["step"]: r["photos"] for r in map(json.loads,
                                                       (run / f"rank{rank}.jsonl").open())}
            for rank in (0, 1)}


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("streaming_ddp")
    write_shards(karpathy_copy(tmp / "flickr", n=40), tmp / "shards", workers=0)
    run = tmp / "uninterrupted"
    run.mkdir()
    done = subprocess.run(_command(tmp / "shards", run), cwd=run, env=_env(),
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    return tmp / "shards", run


def test_ranks_train_on_disjoint_equal_shares_in_a_new_order_each_epoch(uninterrupted):
    _, run = uninterrupted
    photos = _photos(run)
    assert [sorted(photos[r]) for r in (0, 1)] == [list(range(STEPS_PER_EPOCH * EPOCHS))] * 2
    for epoch in range(EPOCHS):
        steps = range(epoch * STEPS_PER_EPOCH, (epoch + 1) * STEPS_PER_EPOCH)
        mine = [[p for s in steps for p in photos[rank][s]] for rank in (0, 1)]
        assert [len(m) for m in mine] == [TRAIN_PHOTOS // 2] * 2  # equal shares, no repeat
        assert len(set(mine[0] + mine[1])) == TRAIN_PHOTOS  # disjoint: every photo once
    for rank in (0, 1):
        epoch1 = [photos[rank][s] for s in range(STEPS_PER_EPOCH)]
        epoch2 = [photos[rank][s + STEPS_PER_EPOCH] for s in range(STEPS_PER_EPOCH)]
        assert epoch1 != epoch2


def test_sigkill_mid_epoch_then_resume_replays_the_same_photos(uninterrupted, tmp_path):
    shards, reference = uninterrupted
    # Its own session: the kill reaches the launcher and the rank it started.
    command = _command(shards, tmp_path)
    process = start_paused(command, tmp_path, _env(), PAUSE_STEP, start_new_session=True)
    time.sleep(0.5)  # both ranks at the pause
    os.killpg(process.pid, signal.SIGKILL)  # the launcher and the rank it started
    process.wait(timeout=30)
    last = tmp_path / "checkpoints" / "last.ckpt"
    assert torch.load(last, weights_only=True)["global_step"] == 8

    done = subprocess.run([*command, "--ckpt_path", str(last)], cwd=tmp_path, env=_env(),
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    assert _photos(tmp_path) == _photos(reference)  # steps 8-11 replayed, per rank
    resumed = torch.load(last, weights_only=True)
    expected = torch.load(reference / "checkpoints" / "last.ckpt", weights_only=True)
    assert resumed["global_step"] == expected["global_step"] == STEPS_PER_EPOCH * EPOCHS
    weights = resumed["state_dict"]
    different = [k for k in weights if not torch.equal(weights[k], expected["state_dict"][k])]
    assert not different, different
