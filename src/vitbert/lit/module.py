"""The training system around a VitBert: MLM loss, metrics under each condition, optimiser.

It wires parts together and contains none of them: the network (:mod:`vitbert.models`), the
losses (:mod:`vitbert.lit.loss`, :mod:`vitbert.lit.objectives`, :mod:`vitbert.lit.contrastive`),
the conditions, the metrics, the optimiser (``lit.conditions``, ``lit.metrics``, ``lit.optim``),
guesses (:mod:`vitbert.decoding`), what a checkpoint holds (:mod:`vitbert.lit.checkpoint_hooks`).
Saved hyperparameters are plain values (``torch.load(weights_only=True)`` reads a checkpoint).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import lightning as L
from torch import Tensor, nn

from vitbert.decoding import prediction_records, show_targets_as_mask
from vitbert.io import initialize
from vitbert.lit.callbacks import ExamplePredictions, FrozenImageTower
from vitbert.lit.checkpoint_hooks import CheckpointHooks
from vitbert.lit.conditions import Batch, read
from vitbert.lit.contrastive import with_contrastive_heads
from vitbert.lit.focus import PieceDifficulty
from vitbert.lit.loss import masked_logits
from vitbert.lit.metrics import MaskedLMMetrics
from vitbert.lit.negatives import SwapNegatives
from vitbert.lit.objectives import itm_loss, training_loss
from vitbert.lit.optim import OptimizerConfig, configure_optimizers
from vitbert.lit.twins import check_twin_settings
from vitbert.models import ITMHead, VitBert, VitBertConfig, WordDetectorHead


class MaskedLMModule(CheckpointHooks, L.LightningModule):
    """Masked-language modelling on captions, with the photo as extra context.

    Args:
        net: the architecture (image tower, text tower, how many image tokens).
        vocab_size: linked from the data module (the tokenizer's size); overrides ``net``'s.
        pad_token_id: linked from the data module.
        optimizer: AdamW, weight-decay groups, per-group learning-rate multipliers, schedule.
        init_from: a checkpoint (``.ckpt``) or exported folder to start from, weights only (heads
            included): a fresh optimizer and schedule (fine-tuning). Word rows are matched by
            token text, so the vocabulary may differ. Ignored when resuming (``--ckpt_path``).
        freeze_image_tower_steps: keep the image tower fixed for the first N optimiser steps
            (lets a fresh projector and text tower settle before a pretrained tower is moved).
        freeze_image_tower: keep the image tower fixed for the whole run; its output per photo is
            computed once into a feature cache (`vitbert.data.features`).
        num_examples: example predictions printed at each validation.
        generation_probability: the share of training batches that teach writing captions
            (seq2seq mask, :mod:`vitbert.lit.objectives`); 0 trains MLM alone.
        itm_weight: weight of the image-text matching loss (``itm_head``, ``val/itm_accuracy``);
            0: no head, no change.
        word_detection_weight: weight of the word detection loss (``word_head``: which content
            words a photo's captions use, from the image tower alone); 0: no head, no change.
        itm_swap_negatives: the matching head also learns to reject each caption with two of
            its words swapped (:mod:`vitbert.lit.negatives`: NegCLIP's hard negatives, made
            without a word list); with ``itm_weight`` only.
        itc_weight: weight of the contrastive loss (:mod:`vitbert.lit.contrastive`: photos and
            captions embedded apart, for retrieval); builds the heads (``net.itc_dim``, else 128).
        twin_weight: weight of the twin contrast (:mod:`vitbert.lit.twins`: in MLM batches, a
            hidden word of a caption likelier under its own photo than under a twin's, whose
            caption exchanges two of its words; binding). Needs ``data.twin_photos: true``.
        focus_weight: weight of the focused loss: each MLM batch's captions are trained a
            second time with one content piece hidden, drawn in proportion to the model's
            running loss on it, the rest of the caption in view (:mod:`vitbert.lit.focus`: the
            words it has not learnt yet, with what they need to be learnt), beside their random
            targets; 0: random masking alone.
        focus_start: the fraction of the run's optimiser steps after which captions are
            focused (the running losses are measured from the first step): random masking
            first teaches the words that the focused ones are read beside. Until then the
            read sharing (``net.lookup_share_window``), which carries what the focused
            relation words need, is held at its start (zero): the recipe measured in
            docs/binding.md.
        focus_fraction: the share of each masked-language batch's captions that get a focused
            copy (the first ones; the loader shuffles): the copy is a second encoder pass, and
            half the captions cost half of it.
    """

    def __init__(self, net: VitBertConfig = VitBertConfig(),  # noqa: B008 (plain, unchanged)
                 vocab_size: int = 0, pad_token_id: int = 0,
                 optimizer: OptimizerConfig = OptimizerConfig(),  # noqa: B008
                 init_from: str | None = None, freeze_image_tower_steps: int = 0,
                 num_examples: int = 3, freeze_image_tower: bool = False,
                 generation_probability: float = 0.3, itm_weight: float = 0.0,
                 word_detection_weight: float = 0.0, itm_swap_negatives: bool = False,
                 itc_weight: float = 0.0, twin_weight: float = 0.0,
                 focus_weight: float = 0.0, focus_start: float = 0.0,
                 focus_fraction: float = 1.0) -> None:
        super().__init__()
        net = with_contrastive_heads(
            net if isinstance(net, VitBertConfig) else VitBertConfig.from_dict(net), itc_weight)
        if vocab_size:
            net = dataclasses.replace(net, vocab_size=vocab_size, pad_token_id=pad_token_id)
        self.optimizer_config = optimizer = (  # a checkpoint holds it as a plain dict
            optimizer if isinstance(optimizer, OptimizerConfig) else OptimizerConfig(**optimizer))
        # Plain values only (a checkpoint loads with weights_only=True): the configs as dicts.
        self.save_hyperparameters(ignore=["net", "optimizer"])
        self.hparams.update(net=net.to_dict(), vocab_size=net.vocab_size,
                            pad_token_id=net.pad_token_id, optimizer=dataclasses.asdict(optimizer))
        self.net = VitBert(net)
        self.net.image_tower.requires_grad_(not freeze_image_tower)
        self.itm_head = ITMHead(net.text.dim) if itm_weight else None
        self.word_head = (WordDetectorHead(net.image.dim, net.vocab_size)
                          if word_detection_weight else None)
        if not 0.0 <= focus_start < 1.0:
            raise ValueError(f"focus_start={focus_start} is a fraction of the run's steps: use 0 "
                             f"(from the first) up to below 1")
        if focus_weight < 0:
            raise ValueError(f"focus_weight={focus_weight} weighs a loss: use 0 (off) or more, "
                             f"e.g. 2")
        if not 0.0 < focus_fraction <= 1.0:
            raise ValueError(f"focus_fraction={focus_fraction} is the share of a batch's captions "
                             f"that get a focused copy: use a value in (0, 1], e.g. 0.5")
        self.difficulty = PieceDifficulty(net.vocab_size) if focus_weight else None
        self.val_metrics = MaskedLMMetrics(net.vocab_size)
        self.test_metrics = MaskedLMMetrics(net.vocab_size)
        self.tokenizer = None  # set from the data module, or restored from a checkpoint
        self.swaps: SwapNegatives | None = None  # from the training captions, at fit start
        self.trained_steps = 0  # the step a loaded checkpoint was trained to

    def setup(self, stage: str) -> None:
        datamodule = getattr(self.trainer, "datamodule", None) if self._trainer else None
        if datamodule is not None and getattr(datamodule, "tokenizer", None) is not None:
            self.tokenizer = datamodule.tokenizer
        if stage == "fit" and datamodule is not None:
            check_twin_settings(self.hparams.twin_weight, getattr(datamodule, "twin_photos", False),
                                self.net.config.neighbour_lookup_heads)
        if stage == "fit" and self.hparams.itm_swap_negatives and self.itm_head is not None:
            self.swaps = SwapNegatives.from_captions(self.tokenizer,
                                                     datamodule.dataset("train").captions)
        if stage == "fit" and self.trainer.ckpt_path is None:  # not resuming
            heads = {"word_head": self.word_head, "itm_head": self.itm_head}  # io.HEADS
            report = initialize(self.net, self.hparams.init_from, self.tokenizer, heads)
            if report and self.trainer.is_global_zero:
                print(report)

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
                                    self.word_head, hp.word_detection_weight, self.swaps,
                                    hp.itc_weight, hp.twin_weight, self.difficulty,
                                    hp.focus_weight if self.focusing else 0.0,
                                    hp.focus_fraction)
        self.log_dict(parts, prog_bar=True, batch_size=len(batch["input_ids"]))
        return loss

    def on_before_optimizer_step(self, optimizer: Any) -> None:
        # The read sharing waits for the focus: a zero gradient keeps its zero weights where they
        # are under AdamW (no step, no decay), and unlike requires_grad it leaves DDP's buckets
        # as they were built.
        if self.difficulty is not None and self.net.read_sharing is not None and not self.focusing:
            for param in self.net.read_sharing.parameters():
                if param.grad is not None:
                    param.grad.zero_()

    @property
    def focusing(self) -> bool:
        """Whether this training step focuses captions (``focus_weight`` after ``focus_start``)."""
        start = self.hparams.focus_start * self.trainer.estimated_stepping_batches
        return self.difficulty is not None and self.global_step >= start

    def validation_step(self, batch: Batch, batch_idx: int) -> None:
        self.val_metrics.update_readings(read(self, batch), batch["labels"], batch["content_mask"])
        if self.itm_head is not None:
            _, accuracy = itm_loss(self.net, self.itm_head, batch)  # matched or not, per pair
            self.log("val/itm_accuracy", accuracy, batch_size=len(batch["input_ids"]),
                     sync_dist=True)  # each process's mean over its batches, then over processes

    def test_step(self, batch: Batch, batch_idx: int) -> None:
        self.test_metrics.update_readings(read(self, batch), batch["labels"], batch["content_mask"])

    def on_validation_epoch_end(self) -> None:
        # compute() has synchronised the figures already: every process holds the same, and
        # averaging them again changes nothing (and tells Lightning so).
        self.log_dict(self.val_metrics.logged("val"), sync_dist=True)

    def on_test_epoch_end(self) -> None:
        self.log_dict(self.test_metrics.logged("test"), sync_dist=True)

    def predict_step(self, batch: Batch, batch_idx: int = 0) -> list[dict[str, Any]]:
        """Per caption, the top-5 guesses at every target in each condition (vitbert.decoding)."""
        batch = show_targets_as_mask(batch, self.tokenizer.mask_token_id)
        readings = {condition.key: reading for condition, reading in read(self, batch).items()}
        return prediction_records(self.tokenizer, batch, readings, k=5)

    def configure_optimizers(self) -> dict:
        heads = [head for head in (self.itm_head, self.word_head) if head is not None]
        return configure_optimizers(self.net, self.optimizer_config, self.trainer,
                                    nn.ModuleList(heads) if heads else None)
