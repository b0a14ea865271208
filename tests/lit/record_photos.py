"""A callback for the streaming DDP tests: write down which photos each rank trains on.

At every training batch it appends ``{"epoch", "step", "photos"}`` (the batch's photo places in
the split, in order of first appearance) to ``<folder>/rank<R>.jsonl``, so the test reads each
rank's sequence of photos after the run, a killed and resumed one included.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import lightning as L


class RecordPhotos(L.Callback):
    def __init__(self, folder: str) -> None:
        self.folder = Path(folder)

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: Any, batch: Any,
                             batch_idx: int) -> None:
        photos = list(dict.fromkeys(batch["image_id"].tolist()))
        record = {"epoch": trainer.current_epoch, "step": trainer.global_step, "photos": photos}
        self.folder.mkdir(parents=True, exist_ok=True)
        with open(self.folder / f"rank{trainer.global_rank}.jsonl", "a") as fh:
            fh.write(json.dumps(record) + "\n")
