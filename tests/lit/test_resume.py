"""Exact resume: a run killed mid-epoch (SIGKILL) or preempted (SIGTERM) and resumed from
``last.ckpt`` ends with the weights and validation figures of the run that was never stopped.

Real ``scripts/train.py fit`` subprocesses, as a user runs them: 256 shapes pictures, batches of
16 (16 steps an epoch), 2 epochs, ``last.ckpt`` every 4 steps, dropout on (so the RNG state
matters). Each interrupted run is held by :class:`pause.PauseAt` at step 22, in the second epoch,
two steps after the last save, so the kill loses work that the resume must redo identically.
Bit-exact on CPU in fp32 with one thread: the comparisons are ``torch.equal`` and equal strings.
"""

from __future__ import annotations

import csv
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import TINY_MODEL
from tiny_run import start_paused, tiny_shapes

REPO = Path(__file__).resolve().parents[2]
PAUSE_STEP, SAVE_EVERY, STEPS = 22, 4, 32
VAL_KEYS = ("val/loss", "val/loss_text", "val/top1", "val/top5", "val/top5_text")


def _command(shapes: Path, run: Path, *extra: str) -> list[str]:
    data = tiny_shapes(shapes, num_train=256)
    data[data.index("--data.batch_size") + 1] = "16"
    return [
        sys.executable, str(REPO / "scripts" / "train.py"), "fit", *TINY_MODEL, *data,
        "--model.net.text.dropout", "0.1",
        "--trainer.accelerator", "cpu", "--trainer.max_epochs", "2",
        "--trainer.enable_progress_bar", "false", "--trainer.log_every_n_steps", "4",
        "--checkpoint.dirpath", str(run / "checkpoints"),
        "--last_checkpoint.every_n_train_steps", str(SAVE_EVERY), *extra,
    ]


def _env() -> dict[str, str]:
    path = os.pathsep.join([str(REPO / "src"), str(Path(__file__).parent)])
    return {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONPATH": path}


def _run(command: list[str], cwd: Path) -> subprocess.CompletedProcess:
    cwd.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(command, cwd=cwd, env=_env(), capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def _start_paused(command: list[str], run: Path) -> subprocess.Popen:
    """Start a run that holds at PAUSE_STEP; return once it is there."""
    return start_paused(command, run, _env(), PAUSE_STEP)


def _outcome(run: Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """(final weights, figures of the last validation) of a run folder."""
    last = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    assert last["global_step"] == STEPS
    rows = [r for log in sorted(run.rglob("metrics.csv")) for r in csv.DictReader(log.open())]
    final = [r for r in rows if r.get("val/loss")][-1]
    return last["state_dict"], {k: final[k] for k in VAL_KEYS}


def _step(run: Path) -> int:
    return torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["global_step"]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    root = tmp_path_factory.mktemp("resume")
    shapes, run = root / "shapes", root / "uninterrupted"
    _run(_command(shapes, run), run)
    return shapes, _outcome(run)


def _assert_same(resumed, reference) -> None:
    (weights, figures), (ref_weights, ref_figures) = resumed, reference
    assert figures == ref_figures
    assert weights.keys() == ref_weights.keys()
    different = [k for k in weights if not torch.equal(weights[k], ref_weights[k])]
    assert not different, different


def test_sigkill_mid_epoch_then_resume_is_exact(uninterrupted, tmp_path):
    shapes, reference = uninterrupted
    command = _command(shapes, tmp_path)
    process = _start_paused(command, tmp_path)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    assert process.returncode == -signal.SIGKILL
    saved = _step(tmp_path)
    assert saved == PAUSE_STEP // SAVE_EVERY * SAVE_EVERY  # 20: mid-epoch, 2 steps lost

    _run([*command, "--ckpt_path", str(tmp_path / "checkpoints" / "last.ckpt")], tmp_path)
    _assert_same(_outcome(tmp_path), reference)


def test_sigterm_saves_last_exits_cleanly_then_requeued_resume_is_exact(uninterrupted, tmp_path):
    shapes, reference = uninterrupted
    command = _command(shapes, tmp_path)
    process = _start_paused(command, tmp_path)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 0, stderr[-3000:]
    assert "SIGTERM received: wrote" in stderr
    assert _step(tmp_path) == PAUSE_STEP + 1  # the batch in flight finished, then saved

    # Resume the way a requeued SLURM job does: Lightning looks for hpc_ckpt_<N>.ckpt in the
    # default root dir (here the working folder) when asked for "hpc" (or, under SLURM, when no
    # --ckpt_path is given); its SIGUSR1 handler writes that file with the same dump as last.ckpt.
    shutil.copy(tmp_path / "checkpoints" / "last.ckpt", tmp_path / "hpc_ckpt_1.ckpt")
    _run([*command, "--ckpt_path", "hpc"], tmp_path)
    _assert_same(_outcome(tmp_path), reference)
