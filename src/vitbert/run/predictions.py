"""What ``scripts/train.py predict`` writes.

:class:`PredictionWriter` writes the predictions to a JSON Lines file, one example a line. Each
line is one record from :meth:`vitbert.lit.module.MaskedLMModule.predict_step`, in the shape
of ``scripts/predict.py --json`` (:mod:`vitbert.decoding`): the example's index in the split, its
image id, its masked text, and per masked piece the truth and the top-5 guesses (score, token,
token_str) with the photo, with another image's photo and from the text alone. JSON Lines because
a split of 150,000 captions is streamed a batch at a time (nothing accumulates here) and is read
back a line at a time (``pandas.read_json(path, lines=True)``, ``jq``).

The file appears only when the run finishes: lines go to a temporary file beside it, renamed at the
end. An interrupted or failed run leaves the previous file (if any) untouched and no partial one.
"""

from __future__ import annotations

import json
from contextlib import ExitStack
from pathlib import Path
from typing import IO, Any

import lightning as L
from lightning.pytorch.callbacks import BasePredictionWriter

from vitbert.data.files import atomic_open


def _plain(value: Any) -> Any:
    """JSON fallback for tensors and numpy values that a predict_step might return."""
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"cannot write a {type(value).__name__} to JSON")


class PredictionWriter(BasePredictionWriter):
    """Stream predictions to ``output`` (JSON Lines), atomically.

    Args:
        output: the file to write; its folder is created. By default ``predictions.jsonl`` in the
            run's folder (``runs/version_N/``), or in the trainer's root folder when
            there is no logger. With several processes (DDP) each rank writes its own
            ``<stem>.rank<R><suffix>``, since ranks see disjoint examples.
    """

    FILENAME = "predictions.jsonl"

    def __init__(self, output: str | Path | None = None) -> None:
        super().__init__(write_interval="batch")
        self.output = Path(output) if output is not None else None
        self._file: IO[str] | None = None
        self._open: ExitStack | None = None  # holds the atomic_open of the file being written
        self._count = 0

    def target(self, trainer: L.Trainer) -> Path:
        output = self.output
        if output is None:
            folder = getattr(trainer, "log_dir", None) or trainer.default_root_dir
            output = Path(folder) / self.FILENAME
        if trainer.world_size == 1:
            return output
        return output.with_name(f"{output.stem}.rank{trainer.global_rank}{output.suffix}")

    def on_predict_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._open = ExitStack()
        self._file = self._open.enter_context(
            atomic_open(self.target(trainer), "w", encoding="utf-8"))
        self._count = 0

    def write_on_batch_end(self, trainer, pl_module, prediction, batch_indices, batch, batch_idx,
                           dataloader_idx) -> None:
        assert self._file is not None, "on_predict_start opens the file"
        examples = prediction if isinstance(prediction, list) else [prediction]
        for example in examples:
            self._file.write(json.dumps(example, default=_plain, ensure_ascii=False) + "\n")
        self._count += len(examples)

    def on_predict_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        assert self._open is not None
        self._open.close()  # the file is whole at its target now, or absent
        self._file = self._open = None
        print(f"Wrote {self._count} predictions to {self.target(trainer)}")

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule,
                     exception: BaseException) -> None:
        self._discard()

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._discard()  # a run that ended without on_predict_end leaves nothing behind

    def _discard(self) -> None:
        if self._open is not None:  # closing as if failed: the temporary file is removed
            self._open.__exit__(RuntimeError, RuntimeError("prediction stopped"), None)
        self._file = self._open = None
