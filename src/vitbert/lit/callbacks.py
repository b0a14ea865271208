"""The training module's example predictions at each validation (the image tower held still is
`vitbert.lit.frozen`'s)."""

from __future__ import annotations

from typing import Any

import lightning as L


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

