"""Progress that reads well in a log file.

Lightning's progress bars redraw one terminal line; redirected to a file (``fit > run.log``,
a SLURM job's output) they write nothing useful for minutes. :class:`LogProgress` writes a plain
line at most every ``every_seconds`` instead: the step, the speed, the time left and the loss.
The CLI turns it on exactly when stdout is not a terminal, and the bar otherwise.
"""

from __future__ import annotations

import math
import sys
import time
from typing import Any

import lightning as L
from lightning.pytorch.utilities import rank_zero_only


def format_duration(seconds: float) -> str:
    """``h:mm:ss`` (or ``m:ss`` under an hour); ``?`` when unknown."""
    if not math.isfinite(seconds) or seconds < 0:
        return "?"
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class LogProgress(L.Callback):
    """A line like ``step 120/939 (13%) | 2.10 steps/s | ETA 6:30 | loss 1.234`` every N seconds.

    The first line comes after the first step (so a user sees at once that training runs) and the
    last one when training ends; the speed is measured since the run (or the resume) started.
    """

    def __init__(self, every_seconds: float = 20.0, stream: Any = None) -> None:
        super().__init__()
        self.every_seconds = every_seconds
        self.stream = stream
        self._start_time = 0.0
        self._start_step = 0
        self._last_print = -math.inf
        self._epoch = 0

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._start_time, self._start_step = time.monotonic(), trainer.global_step
        self._last_print = -math.inf

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *args) -> None:
        now = time.monotonic()  # one reading a step: lines come every_seconds + one step apart
        self._epoch = trainer.current_epoch  # at the end Lightning has counted one more
        if now - self._last_print >= self.every_seconds:
            self._report(trainer, now)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._report(trainer, time.monotonic())

    @rank_zero_only
    def _report(self, trainer: L.Trainer, now: float) -> None:
        self._last_print = now
        step, total = trainer.global_step, trainer.estimated_stepping_batches
        done = step - self._start_step
        rate = done / max(now - self._start_time, 1e-9)
        epoch = f"epoch {self._epoch + 1}"
        if trainer.max_epochs and trainer.max_epochs > 0:
            epoch += f"/{trainer.max_epochs}"
        parts = [epoch]
        if math.isfinite(total) and total > 0:
            parts.append(f"step {step}/{int(total)} ({step / total:.0%})")
            parts.append(f"ETA {format_duration((total - step) / rate if rate > 0 else math.inf)}")
        else:
            parts.append(f"step {step}")
        parts.append(f"{rate:.2f} steps/s")
        for key, label in (("train/loss", "loss"), ("train/generation_loss", "caption loss"),
                           ("train/itm_loss", "matching loss"), ("train/word_loss", "word loss")):
            value = trainer.callback_metrics.get(key)  # MLM, and the other objectives'
            if value is not None:
                parts.append(f"{label} {float(value):.4f}")
        print(" | ".join(parts), file=self.stream or sys.stdout, flush=True)
