"""A callback for the kill and preemption tests: hold a real training run at a given step.

The test process needs the run to be *inside* an epoch, past a saved ``last.ckpt``, when it
sends its signal; a tiny run would otherwise finish before the signal lands. At the start of the
batch after ``step`` the callback writes ``marker`` and waits (up to ``timeout`` s) for SIGTERM,
which Lightning's handler turns into ``trainer.received_sigterm``; SIGKILL needs no cooperation.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import lightning as L


class PauseAt(L.Callback):
    def __init__(self, step: int, marker: str, timeout: float = 120.0) -> None:
        self.step, self.marker, self.timeout = step, marker, timeout

    def on_train_batch_start(self, trainer: L.Trainer, *args: Any) -> None:
        if trainer.global_step != self.step:
            return
        Path(self.marker).write_text(str(self.step))
        deadline = time.monotonic() + self.timeout
        while not trainer.received_sigterm and time.monotonic() < deadline:
            time.sleep(0.02)
