"""Command-line pieces for tiny training runs, shared by the training and DDP tests."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest


def tiny_shapes(root: Path, num_train: int = 512) -> list[str]:
    """The generated shapes data, small: 64 validation and test pictures, batches of 64."""
    return [
        "--data.source.init_args.root", str(root),
        "--data.source.init_args.num_train", str(num_train),
        "--data.source.init_args.num_val", "64", "--data.source.init_args.num_test", "64",
        "--data.batch_size", "64", "--data.num_workers", "0",
    ]


def start_paused(command: list[str], cwd: Path, env: dict[str, str], step: int,
                 **popen) -> subprocess.Popen:
    """Start ``command`` (a ``train.py fit``) held at ``step`` by ``pause.PauseAt``; return the
    process once it is there (the kill and preemption tests then signal it)."""
    marker = cwd / "paused"
    pause = {"class_path": "pause.PauseAt", "init_args": {"step": step, "marker": str(marker)}}
    cwd.mkdir(parents=True, exist_ok=True)
    process = subprocess.Popen([*command, f"--trainer.callbacks+={json.dumps(pause)}"], cwd=cwd,
                               env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True, **popen)
    deadline = time.monotonic() + 180
    while not marker.exists():
        if process.poll() is not None:
            pytest.fail(f"the run ended before step {step}:\n{process.stderr.read()[-3000:]}")
        assert time.monotonic() < deadline, "the run never reached the pause"
        time.sleep(0.1)
    return process
