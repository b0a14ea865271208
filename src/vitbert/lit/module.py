"""The training system around a VitBert: the objectives, metrics under each condition, optimiser.

It wires parts together and contains none of them: the network (:mod:`vitbert.models`), the
losses (:mod:`vitbert.lit.objectives`, a list), the conditions and metrics (``lit.conditions``,
``lit.metrics``), the optimiser (``lit.optim``), guesses (:mod:`vitbert.decoding`). Saved
hyperparameters are plain values (``torch.load(weights_only=True)`` reads a checkpoint): the
network's config as a dict, each objective as its ``{"class_path", "init_args"}``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import lightning as L
from torch import Tensor, nn

from vitbert.data.tokenizer import tokenizer_to_json
from vitbert.decoding import prediction_records, show_targets_as_mask
from vitbert.io import TOKENIZER_KEY, initialize, stored_tokenizer
from vitbert.lit.conditions import read
from vitbert.lit.frozen import FrozenImageTower, ImageFreeze, frozen_module, image_freeze
from vitbert.lit.metrics import MaskedLMMetrics
from vitbert.lit.objectives import (
    Batch,
    MaskedLM,
    Objective,
    TrainingStep,
    build_objective,
    image_features,
    writes_captions,
)
from vitbert.lit.optim import OptimizerConfig, configure_optimizers
from vitbert.models import ConfigError, VitBertConfig, build_network


class MaskedLMModule(L.LightningModule):
    """Training on captions with the photo as extra context, by a list of objectives.

    Args:
        net: the architecture (image tower, text tower, how many image tokens).
        objectives: the losses to sum, each with its weight (:mod:`vitbert.lit.objectives`);
            unset, masked-language modelling alone.
        optimizer: AdamW, weight-decay groups, per-group learning-rate multipliers, schedule.
        vocab_size: linked from the data module (the tokenizer's size); overrides ``net``'s.
        pad_token_id: linked from the data module.
        init_from: a checkpoint (``.ckpt``) or exported folder to start from, weights only (heads
            included): a fresh optimizer and schedule (fine-tuning). Word rows are matched by
            token text, so the vocabulary may differ. Ignored when resuming (``--ckpt_path``).
        freeze_image: which part of the image tower is held fixed, and for how long:
            ``{part: tower | backbone, steps: N | null}``, the whole tower or a hybrid tower's
            CNN, for its first N optimiser steps or (null) the whole run, its output per photo
            then computed once into a feature cache; unset, nothing is.
            ``--model.freeze_image.help`` explains each field (`vitbert.lit.frozen`).
    """

    def __init__(self, net: VitBertConfig = VitBertConfig(),  # noqa: B008 (plain, unchanged)
                 objectives: list[Objective] | None = None,
                 optimizer: OptimizerConfig = OptimizerConfig(),  # noqa: B008
                 vocab_size: int = 0, pad_token_id: int = 0, init_from: str | None = None,
                 freeze_image: ImageFreeze | None = None) -> None:
        super().__init__()
        net = net if isinstance(net, VitBertConfig) else VitBertConfig.from_dict(net)
        if vocab_size:
            net = dataclasses.replace(net, vocab_size=vocab_size, pad_token_id=pad_token_id)
        self.optimizer_config = optimizer = (  # a checkpoint holds it as a plain dict
            optimizer if isinstance(optimizer, OptimizerConfig) else OptimizerConfig(**optimizer))
        self.objectives = [build_objective(o) for o in (objectives or [MaskedLM()])]
        names = [type(o).__name__ for o in self.objectives]
        if len(set(names)) < len(names):
            raise ConfigError(f"model.objectives lists one objective twice ({', '.join(names)}): "
                              f"give each once, with the weight it should have")
        # Plain values only (a checkpoint loads with weights_only=True): configs as dicts.
        self.freeze_image = freeze = image_freeze(freeze_image)  # a checkpoint holds a dict
        self.save_hyperparameters(ignore=["net", "optimizer", "objectives", "freeze_image"])
        self.hparams.update(net=net.to_dict(), vocab_size=net.vocab_size,
                            pad_token_id=net.pad_token_id, optimizer=dataclasses.asdict(optimizer),
                            objectives=[o.settings() for o in self.objectives],
                            freeze_image=dataclasses.asdict(freeze) if freeze else None)
        self.net = build_network(net)
        if freeze is not None:  # a part there is none of stops here, before any fit
            frozen = frozen_module(self.net, freeze.part)
            if freeze.whole_run:  # else FrozenImageTower holds it for its steps
                frozen.requires_grad_(False)
        # The objectives' heads are the module's own, under the names checkpoints keep them by.
        self.heads: dict[str, nn.Module] = {}
        for objective in self.objectives:
            for name, module in objective.build(self.net).items():
                self.add_module(name, module)
                self.heads[name] = module
        self.val_metrics = MaskedLMMetrics(net.vocab_size)
        self.test_metrics = MaskedLMMetrics(net.vocab_size)
        self.tokenizer = None  # set from the data module, or restored from a checkpoint
        self.trained_steps = 0  # the step a loaded checkpoint was trained to

    def setup(self, stage: str) -> None:
        datamodule = self.trainer.datamodule  # setup is called by the trainer
        if datamodule is not None and getattr(datamodule, "tokenizer", None) is not None:
            self.tokenizer = datamodule.tokenizer
        if stage == "fit" and self.trainer.ckpt_path is None:  # a fresh run, not a resume
            report = initialize(self.net, self.hparams.init_from, self.tokenizer, self.heads)
            if report and self.trainer.is_global_zero:
                print(report)

    def configure_callbacks(self) -> list[L.Callback]:
        return [FrozenImageTower(self.freeze_image)]

    def training_step(self, batch: Batch, batch_idx: int) -> Tensor:
        claimed_by = next((o for o in self.objectives if o.claims_batch()), None)
        step = TrainingStep(batch, image_features(self.net, batch), self.tokenizer.mask_token_id,
                            claimed_by)
        losses = {o: loss for o in self.objectives if (loss := o(self.net, step)) is not None}
        self.log_dict({f"train/{o.name}": loss for o, loss in losses.items()},
                      prog_bar=True, batch_size=len(batch["input_ids"]))
        return sum(o.weight * loss for o, loss in losses.items())

    @property
    def writes_captions(self) -> bool:
        """Whether an objective teaches the model to write captions (the caption figures are then
        written at validation and test)."""
        return writes_captions(self.objectives)

    def validation_step(self, batch: Batch, batch_idx: int) -> None:
        self.val_metrics.update_readings(read(self.net, batch, image_features(self.net, batch)),
                                         batch["labels"], batch["content_mask"])

    def test_step(self, batch: Batch, batch_idx: int) -> None:
        self.test_metrics.update_readings(read(self.net, batch, image_features(self.net, batch)),
                                          batch["labels"], batch["content_mask"])

    def on_validation_epoch_end(self) -> None:
        # compute() has synchronised the figures already: every process holds the same, and
        # averaging them again changes nothing (and tells Lightning so).
        self.log_dict(self.val_metrics.logged("val"), sync_dist=True)

    def on_test_epoch_end(self) -> None:
        self.log_dict(self.test_metrics.logged("test"), sync_dist=True)

    def predict_step(self, batch: Batch, batch_idx: int = 0) -> list[dict[str, Any]]:
        """Per caption, the top-5 guesses at every target in each condition (vitbert.decoding)."""
        batch = show_targets_as_mask(batch, self.tokenizer.mask_token_id)
        readings = read(self.net, batch, image_features(self.net, batch))
        return prediction_records(self.tokenizer, batch,
                                  {condition.key: reading for condition, reading in
                                   readings.items()}, k=5)

    def configure_optimizers(self) -> dict:
        heads = nn.ModuleList(self.heads.values()) if self.heads else None
        return configure_optimizers(self.net, self.optimizer_config, self.trainer, heads)

    # -- what a checkpoint holds beside the weights ------------------------------------------------

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        if self.tokenizer is not None:  # as JSON: the file loads with weights_only=True
            checkpoint[TOKENIZER_KEY] = tokenizer_to_json(self.tokenizer)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.trained_steps = int(checkpoint.get("global_step", 0))
        self.tokenizer = stored_tokenizer(checkpoint, self.tokenizer)
