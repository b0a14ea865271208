"""The training system around a VitBert: MLM loss, metrics under each condition, optimiser.

It wires parts together and contains none of them: the network :mod:`vitbert.models`, the losses
:mod:`vitbert.lit.loss` and :mod:`vitbert.lit.objectives` (generation, image-text matching,
word detection), the conditions :mod:`vitbert.lit.conditions`, the metrics
:mod:`vitbert.lit.metrics`, the optimiser :mod:`vitbert.lit.optim`, guesses :mod:`vitbert.decoding`.
Saved hyperparameters are plain values (``torch.load(weights_only=True)`` reads a checkpoint).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import lightning as L
from torch import Tensor, nn

from vitbert.data.masking import IGNORE_INDEX
from vitbert.data.tokenizer import tokenizer_to_json
from vitbert.decoding import prediction_records, show_targets_as_mask
from vitbert.io import (
    REMOVED_WEIGHTS,
    TOKENIZER_KEY,
    CheckpointError,
    drop_removed_weights,
    initialize,
    stored_tokenizer,
)
from vitbert.lit.callbacks import ExamplePredictions, FrozenImageTower
from vitbert.lit.conditions import Batch, read
from vitbert.lit.loss import masked_logits
from vitbert.lit.metrics import MaskedLMMetrics
from vitbert.lit.negatives import SwapNegatives
from vitbert.lit.objectives import itm_loss, training_loss
from vitbert.lit.optim import OptimizerConfig, configure_optimizers
from vitbert.models import ITMHead, VitBert, VitBertConfig, WordDetectorHead


class MaskedLMModule(L.LightningModule):
    """Masked-language modelling on captions, with the photo as extra context.

    Args:
        net: the architecture (image tower, text tower, how many image tokens); by default the
            dataclass defaults (configs/default.yaml adds a local attention window).
        vocab_size: linked from the data module (the tokenizer's size); overrides ``net``'s.
        pad_token_id: linked from the data module.
        optimizer: AdamW, weight-decay groups, per-group learning-rate multipliers, schedule.
        init_from: a checkpoint (``.ckpt``) or exported folder to start from, weights only:
            a fresh optimizer and schedule (fine-tuning). Rows of the word embedding are matched
            by token text, so the vocabulary may differ. Ignored when resuming (``--ckpt_path``).
        freeze_image_tower_steps: keep the image tower fixed for the first N optimiser steps
            (lets a fresh projector and text tower settle before a pretrained tower is moved).
        freeze_image_tower: keep the image tower fixed for the whole run; its output per photo is
            then computed once at fit start into a feature cache beside the image cache
            (`vitbert.data.features`) and training never runs the tower.
        num_examples: example predictions printed at each validation.
        generation_probability: the share of training batches turned into seq2seq (caption
            generation) batches, see :mod:`vitbert.lit.objectives`; 0 trains MLM alone (and
            draws no random number, so an MLM-only run is exactly what it was before). 0.3 is
            the embedded default's: at 0.5 some seeds never learnt to read the colours.
        itm_weight: weight of the image-text matching loss (``itm_head``, ``val/itm_accuracy``,
            :mod:`vitbert.lit.objectives`) added on every training batch; 0: no head, no change.
        word_detection_weight: weight of the word detection loss (``word_head``: which content
            words a photo's captions use, from the image tower alone; see
            :func:`vitbert.lit.objectives.word_detection_loss`); 0: no head, no change.
            configs/default.yaml sets 10: without it the tower never learns the shapes there.
        itm_swap_negatives: the matching head also learns to reject each caption with two of
            its words swapped, words the training captions use in the same places
            (:mod:`vitbert.lit.negatives`; NegCLIP's hard negatives, made without a word list);
            with ``itm_weight`` only.
    """

    def __init__(self, net: VitBertConfig = VitBertConfig(),  # noqa: B008 (plain, unchanged)
                 vocab_size: int = 0, pad_token_id: int = 0,
                 optimizer: OptimizerConfig = OptimizerConfig(),  # noqa: B008
                 init_from: str | None = None, freeze_image_tower_steps: int = 0,
                 num_examples: int = 3, freeze_image_tower: bool = False,
                 generation_probability: float = 0.3, itm_weight: float = 0.0,
                 word_detection_weight: float = 0.0, itm_swap_negatives: bool = False) -> None:
        super().__init__()
        net = net if isinstance(net, VitBertConfig) else VitBertConfig.from_dict(net)
        if vocab_size:
            net = dataclasses.replace(net, vocab_size=vocab_size, pad_token_id=pad_token_id)
        if not isinstance(optimizer, OptimizerConfig):  # a checkpoint's plain dict
            optimizer = OptimizerConfig(**optimizer)
        self.optimizer_config = optimizer
        # Plain values only (a checkpoint loads with weights_only=True): the configs as dicts.
        self.save_hyperparameters(ignore=["net", "optimizer"])
        self.hparams.update(net=net.to_dict(), vocab_size=net.vocab_size,
                            pad_token_id=net.pad_token_id, optimizer=dataclasses.asdict(optimizer))
        self.net = VitBert(net)
        self.net.image_tower.requires_grad_(not freeze_image_tower)
        self.itm_head = ITMHead(net.text.dim) if itm_weight else None
        self.word_head = (WordDetectorHead(net.image.dim, net.vocab_size)
                          if word_detection_weight else None)
        self.val_metrics = MaskedLMMetrics(net.vocab_size)
        self.test_metrics = MaskedLMMetrics(net.vocab_size)
        self.tokenizer = None  # set from the data module, or restored from a checkpoint
        self.swaps: SwapNegatives | None = None  # from the training captions, at fit start
        self.trained_steps = 0  # the step a loaded checkpoint was trained to

    def setup(self, stage: str) -> None:
        datamodule = getattr(self.trainer, "datamodule", None) if self._trainer else None
        if datamodule is not None and getattr(datamodule, "tokenizer", None) is not None:
            self.tokenizer = datamodule.tokenizer
        resuming = self._trainer is not None and self.trainer.ckpt_path is not None
        if stage == "fit" and self.hparams.itm_swap_negatives and self.itm_head is not None:
            self.swaps = SwapNegatives.from_captions(self.tokenizer,
                                                     datamodule.dataset("train").captions)
        if stage == "fit" and not resuming:
            heads = {"word_head": self.word_head, "itm_head": self.itm_head}  # io.HEADS
            report = initialize(self.net, self.hparams.init_from, self.tokenizer, heads)
            if report and self.trainer.is_global_zero:
                print(report)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        if self.tokenizer is not None:
            checkpoint[TOKENIZER_KEY] = tokenizer_to_json(self.tokenizer)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.trained_steps = int(checkpoint.get("global_step", 0))
        self.tokenizer = stored_tokenizer(checkpoint, self.tokenizer)
        weights = checkpoint["state_dict"]
        if self._trainer is not None and self.trainer.state.fn == "fit" and any(
                key.startswith("net." + REMOVED_WEIGHTS) for key in weights):
            # Its optimizer state holds the removed weights too, and its run trained with them.
            raise CheckpointError(f"--ckpt_path {self.trainer.ckpt_path}: this checkpoint's word "
                                  f"pointer was removed, so its run cannot resume; start a new "
                                  f"run from its weights with --model.init_from instead")
        checkpoint["state_dict"] = drop_removed_weights(weights, prefix="net.")

    def configure_callbacks(self) -> list[L.Callback]:
        hp = self.hparams
        freezing = FrozenImageTower(hp.freeze_image_tower_steps, hp.freeze_image_tower)
        return [freezing] + ([ExamplePredictions(hp.num_examples)] if hp.num_examples else [])

    def forward(self, batch: Batch, images: Tensor | None) -> Tensor:
        return masked_logits(self.net, batch, images)

    def training_step(self, batch: Batch, batch_idx: int) -> Tensor:
        hp = self.hparams
        loss, parts = training_loss(self.net, batch, hp.generation_probability,
                                    self.tokenizer.mask_token_id, self.itm_head, hp.itm_weight,
                                    self.word_head, hp.word_detection_weight, self.swaps)
        self.log_dict(parts, prog_bar=True, batch_size=len(batch["input_ids"]))
        return loss

    def validation_step(self, batch: Batch, batch_idx: int) -> None:
        self._evaluate(batch, self.val_metrics)
        if self.itm_head is not None:
            _, accuracy = itm_loss(self.net, self.itm_head, batch)  # matched or not, per pair
            self.log("val/itm_accuracy", accuracy, batch_size=len(batch["input_ids"]))

    def test_step(self, batch: Batch, batch_idx: int) -> None:
        self._evaluate(batch, self.test_metrics)

    def _evaluate(self, batch: Batch, metrics: MaskedLMMetrics) -> None:
        """Every caption read under each condition; figures per condition (lit/metrics.py)."""
        for condition, (logits, reads) in read(self, batch).items():
            targets_at = (batch["labels"] != IGNORE_INDEX) & reads[:, None]  # (B, T)
            metrics.update(condition, logits, batch["labels"][targets_at],
                           batch["content_mask"][targets_at], skipped=int((~reads).sum()))

    def on_validation_epoch_end(self) -> None:
        self._log_figures("val", self.val_metrics)

    def on_test_epoch_end(self) -> None:
        self._log_figures("test", self.test_metrics)

    def _log_figures(self, stage: str, metrics: MaskedLMMetrics) -> None:
        figures = metrics.compute()  # already synchronised across ranks
        self.log_dict({f"{stage}/{name}": value for name, value in figures.items()})
        metrics.reset()

    def predict_step(self, batch: Batch, batch_idx: int = 0) -> list[dict[str, Any]]:
        """Per caption, the top-5 guesses at every target in each condition (vitbert.decoding)."""
        batch = show_targets_as_mask(batch, self.tokenizer.mask_token_id)
        readings = {condition.key: reading for condition, reading in read(self, batch).items()}
        return prediction_records(self.tokenizer, batch, readings, k=5)

    def configure_optimizers(self) -> dict:
        heads = [head for head in (self.itm_head, self.word_head) if head is not None]
        return configure_optimizers(self.net, self.optimizer_config, self.trainer,
                                    nn.ModuleList(heads) if heads else None)
