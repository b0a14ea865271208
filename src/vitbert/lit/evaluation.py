"""Figures a callback computes over a split's pictures, beside the per-batch metrics.

Captions (:mod:`vitbert.lit.captioning`), the binding swap tests (:mod:`vitbert.lit.binding`) and
retrieval (:mod:`vitbert.lit.retrieval`) each need a whole split at once (every caption of a
picture, every picture against every caption), so they run when an epoch ends rather than per
batch: at each validation on a fixed sample of ``num_images`` pictures (never during the sanity
check; in ``fit``, every ``every_n_epochs``-th epoch and the last), at test on every picture. This
class owns that schedule; a subclass owns its figures.
"""

from __future__ import annotations

from typing import Any

import lightning as L
import torch
from lightning.pytorch.trainer.states import TrainerFn


class SplitEvaluation(L.Callback):
    """Log ``{stage}/{prefix}{name}`` for each figure :meth:`figures` returns, at the end of each
    validation (``num_images`` pictures) and test (all of them); ``num_images`` 0 turns it off.
    In ``fit``, ``every_n_epochs`` > 1 skips the validations in between (the fit's last epoch is
    always measured): for figures that cost much of an epoch's time."""

    prefix = ""

    def __init__(self, num_images: int, every_n_epochs: int = 1) -> None:
        if every_n_epochs < 1:
            raise ValueError(f"every_n_epochs={every_n_epochs}: use 1 (every validation) or more")
        self.num_images = num_images
        self.every_n_epochs = every_n_epochs

    def figures(self, trainer: L.Trainer, pl_module: L.LightningModule, dataset: Any,
                limit: int | None) -> dict[str, float] | None:
        """The figures over ``dataset``'s first ``limit`` pictures (None: all), or None when this
        model has nothing to measure here."""
        raise NotImplementedError

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not trainer.sanity_checking and self.due(trainer):
            self._log(trainer, pl_module, "val", self.num_images)

    def due(self, trainer: L.Trainer) -> bool:
        """Whether this validation is measured: always outside ``fit``; in it, at the end of every
        ``every_n_epochs``-th epoch and at the fit's last validation (no other comes before
        ``max_epochs`` at the trainer's ``check_val_every_n_epoch``, or ``max_steps`` is
        reached)."""
        if trainer.state.fn != TrainerFn.FITTING:
            return True
        epochs = trainer.current_epoch + 1
        next_validation = epochs + (trainer.check_val_every_n_epoch or 1)
        last = ((trainer.max_epochs is not None and 0 < trainer.max_epochs < next_validation)
                or 0 < trainer.max_steps <= trainer.global_step)
        return last or epochs % self.every_n_epochs == 0

    def on_test_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._log(trainer, pl_module, "test", None)

    @torch.no_grad()
    def _log(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str,
             limit: int | None) -> None:
        datamodule = getattr(trainer, "datamodule", None)
        if not self.num_images or datamodule is None or pl_module.tokenizer is None:
            return
        dataset = datamodule.dataset(getattr(datamodule, f"{stage}_split", stage))
        figures = self.figures(trainer, pl_module, dataset, limit)
        if figures:
            # Every process holds the same figures (each reads the whole sample, or gathers
            # what the others wrote): averaging them changes nothing and tells Lightning so.
            pl_module.log_dict({f"{stage}/{self.prefix}{name}": value
                                for name, value in figures.items()}, sync_dist=True)
