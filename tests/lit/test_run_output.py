"""What `train.py fit` writes when its output goes to a file (`fit > run.log`, a cluster job):
progress lines often enough to see it run, and no warning a user cannot act on."""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from helpers import TINY_MODEL
from tiny_run import tiny_shapes

from vitbert.cli import main
from vitbert.run import console

REPO = Path(__file__).resolve().parents[2]
SECONDS_PER_STEP = 6.0  # the fake clock: LogProgress reads it once a step


def tiny_fit_args(tmp: Path, steps: int) -> list[str]:
    return ["fit", *TINY_MODEL, *tiny_shapes(tmp / "shapes", num_train=1024),
            "--trainer.max_steps", str(steps), "--trainer.limit_val_batches", "1",
            "--trainer.log_every_n_steps", "2",
            "--trainer.accelerator", "cpu", "--checkpoint.dirpath", str(tmp / "checkpoints")]


def test_a_redirected_log_shows_progress_at_least_every_30_seconds(tmp_path, monkeypatch):
    """Slow steps (a fake clock: 6 s a step): a line every 20 s and a step of it, with the step,
    the speed, the time left and the loss; the bar is off since stdout is a file."""
    monkeypatch.chdir(tmp_path)
    readings = iter(range(10**6))
    clock = SimpleNamespace(monotonic=lambda: SECONDS_PER_STEP * next(readings))
    monkeypatch.setattr(console, "time", clock)
    log = tmp_path / "run.log"
    with log.open("w") as stdout, contextlib.redirect_stdout(stdout):
        main(tiny_fit_args(tmp_path, steps=16))
    lines = [line for line in log.read_text().splitlines() if line.startswith("epoch ")]
    steps = [int(re.search(r"step (\d+)/16", line).group(1)) for line in lines]
    assert steps[0] == 1 and steps[-1] == 16  # at once, and at the end
    assert lines[-1].startswith("epoch 1/3 |")  # 1024 pictures in batches of 64: 16 steps
    # A line is due once 20 s have passed: every 4th step (24 s), not every step.
    gaps = [b - a for a, b in itertools.pairwise(steps)][:-1]  # the last: at the end
    assert gaps and all(gap == 4 for gap in gaps), steps
    assert 4 * SECONDS_PER_STEP <= 30
    assert all(" steps/s | " in line and "ETA " in line and "loss " in line for line in lines)


def test_a_fresh_fit_prints_no_warning(tmp_path):
    """A first run (no data, no checkpoints yet) through scripts/train.py, all output to a file."""
    log = tmp_path / "run.log"
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    with log.open("w") as out:
        done = subprocess.run([sys.executable, str(REPO / "scripts" / "train.py"),
                               *tiny_fit_args(tmp_path, steps=4)],
                              cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT,
                              timeout=600)
    text = log.read_text()
    assert done.returncode == 0, text
    assert "generating the shapes data set" in text  # it was a fresh run
    assert "step 4/4" in text
    warnings = [line for line in text.splitlines() if re.search("warn", line, re.IGNORECASE)]
    assert not warnings, "\n".join(warnings)
    assert "FLOPs" not in text  # Lightning's summary counts none here; one line instead
    assert re.search(r"^Model: [\d.]+ K parameters \([\d.]+ K trainable, ", text, re.MULTILINE)
