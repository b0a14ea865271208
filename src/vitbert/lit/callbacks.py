"""The training module's callbacks: example predictions at each validation, the image tower held
still, and what ``scripts/train.py predict`` writes.

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


class ExamplePredictions(L.Callback):
    """Print a few captions of the first validation batch with the model's guesses at each target.

    One line per target: the truth, then the top 5 under each condition (with the photo, another
    image's photo, text only), read by ``pl_module.predict_step`` (:mod:`vitbert.decoding`), so
    they are the guesses ``train.py predict`` and ``scripts/predict.py`` would give. The step is
    the one the weights were trained to: the trainer's in ``fit``, the checkpoint's otherwise.
    """

    def __init__(self, num_examples: int = 4) -> None:
        self.num_examples = num_examples
        self._batch: dict[str, Any] | None = None

    def on_validation_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule,
                                outputs: Any, batch: Any, batch_idx: int,
                                dataloader_idx: int = 0) -> None:
        if batch_idx == 0 and dataloader_idx == 0:
            self._batch = batch

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        batch, self._batch = self._batch, None
        if batch is None or trainer.sanity_checking or not trainer.is_global_zero:
            return
        if getattr(pl_module, "tokenizer", None) is None:
            return
        step = max(trainer.global_step, getattr(pl_module, "trained_steps", 0))
        records = pl_module.predict_step(batch, 0)[: self.num_examples]
        print(format_examples(records, step))


def format_examples(records: list[dict[str, Any]], step: int) -> str:
    """The printout of :class:`ExamplePredictions` for prediction records (vitbert.decoding)."""
    lines = [f"Example predictions after step {step} (top 5: photo | another photo | text):"]
    for record in records:
        lines.append(f"  {record['text']}")
        for mask in record["masks"]:
            readings = [" ".join(g["token_str"] for g in guesses) if guesses else "-"
                        for guesses in (mask["with_image"], mask["another_image"],
                                        mask["text_only"])]
            lines.append(f"    [MASK] {mask['index'] + 1}: truth {mask['truth']!r:<12} "
                         + "  |  ".join(readings))
    return "\n".join(lines)


class FrozenImageTower(L.Callback):
    """Keeps the image tower, or its CNN backbone, fixed: for the first ``steps`` optimiser steps,
    or, ``frozen`` ("tower" or "backbone"), for the whole run.

    The first lets a fresh projector and text tower settle before a pretrained tower is moved.
    The second makes the part a fixed function of the photo, so its output is computed once per
    photo into the feature cache (``vitbert.data.features``) at fit start, after every weight
    load (pretrained, fine-tune, resume), and training never runs it; a frozen backbone stays in
    eval mode (its BatchNorm statistics are the pretrained ones) wherever it does run.
    """

    def __init__(self, steps: int = 0, frozen: str | None = None) -> None:
        super().__init__()
        self.steps, self.frozen = steps, frozen

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.frozen:
            from vitbert.data.features import attach_image_features

            attach_image_features(trainer, pl_module.net, self.frozen)

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, *args) -> None:
        tower = pl_module.net.image_tower
        if self.steps and self.frozen != "tower":
            tower.requires_grad_(trainer.global_step >= self.steps)
        if self.frozen == "backbone":
            tower.patch_embed.backbone.requires_grad_(False).eval()


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
