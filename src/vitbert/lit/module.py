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
from lightning.pytorch.utilities import rank_zero_warn
from torch import Tensor, nn

from vitbert.data.masking import IGNORE_INDEX
from vitbert.data.tokenizer import tokenizer_to_json
from vitbert.decoding import prediction_records, show_targets_as_mask
from vitbert.io import TOKENIZER_KEY, initialize, stored_tokenizer
from vitbert.lit.callbacks import ExamplePredictions, FrozenImageTower
from vitbert.lit.conditions import Batch, read
from vitbert.lit.loss import masked_logits
from vitbert.lit.metrics import MaskedLMMetrics
from vitbert.lit.objectives import SWAPPED_COLOUR_WORDS, itm_loss, training_loss, word_ids
from vitbert.lit.optim import OptimizerConfig, configure_optimizers
from vitbert.models import ITMHead, VitBert, VitBertConfig, WordDetectorHead, preset


class MaskedLMModule(L.LightningModule):
    """Masked-language modelling on captions, with the photo as extra context.

    Args:
        net: the architecture (image tower, text tower, how many image tokens, the word
            pointer); by default the ``default`` preset, the embedded default's.
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
            :func:`vitbert.lit.objectives.word_detection_loss`); 0: no head, no change. 10 is
            the embedded default's: without it the tower never learns the shapes there.
        word_detection_colour_swaps: the share of each batch's photos whose word detection is
            also asked of a copy with the colour channels swapped, for the words other than
            colour names (:func:`vitbert.lit.objectives.colour_swapped_word_loss`: shape features
            apart from colour); one more tower pass over that share. Used with the word
            detection only; 0: none. 1 (every photo) is the embedded default's: its tower then
            names the shapes of the colour-shape pairs training holds out as well as the others,
            and with the word pointer its test captions pass 80% all right (README); it costs
            half as much training time again.
        pointer_tower_weight: weight of the word pointer's tower side
            (:func:`vitbert.lit.objectives.pointer_tower_loss`: the tokens where a colour points
            learn to name the shape written after it); with ``net.pointer`` only; 0: none. 1 is
            the embedded default's: with it 2 epochs train the pointer at every seed measured,
            where 3 without it left one seed at 84–92% (README).
    """

    def __init__(self, net: VitBertConfig = preset("default"),  # noqa: B008 (plain, unchanged)
                 vocab_size: int = 0, pad_token_id: int = 0,
                 optimizer: OptimizerConfig = OptimizerConfig(),  # noqa: B008
                 init_from: str | None = None, freeze_image_tower_steps: int = 0,
                 num_examples: int = 3, freeze_image_tower: bool = False,
                 generation_probability: float = 0.3, itm_weight: float = 0.0,
                 word_detection_weight: float = 10.0,
                 word_detection_colour_swaps: float = 1.0,
                 pointer_tower_weight: float = 1.0) -> None:
        super().__init__()
        if not 0.0 <= word_detection_colour_swaps <= 1.0:
            raise ValueError(f"model.word_detection_colour_swaps is a share of the photos, "
                             f"between 0 and 1; got {word_detection_colour_swaps}")
        net = net if isinstance(net, VitBertConfig) else VitBertConfig.from_dict(net)
        if freeze_image_tower and net.pointer.enabled:
            raise ValueError("model.net.pointer reads the photos' pixels, which a frozen tower's "
                             "feature cache does not keep: train with model.freeze_image_tower "
                             "false, or without the pointer (empty key_words)")
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
        self._colour_words: tuple[Any, Tensor] | None = None  # (tokenizer, its colour ids)
        self.trained_steps = 0  # the step a loaded checkpoint was trained to

    def setup(self, stage: str) -> None:
        datamodule = getattr(self.trainer, "datamodule", None) if self._trainer else None
        if datamodule is not None and getattr(datamodule, "tokenizer", None) is not None:
            self.tokenizer = datamodule.tokenizer
        resuming = self._trainer is not None and self.trainer.ckpt_path is not None
        if stage == "fit" and not resuming:
            report = initialize(self.net, self.hparams.init_from, self.tokenizer)
            if report and self.trainer.is_global_zero:
                print(report)
        if self.net.pointer is not None and self.tokenizer is not None:
            # This tokenizer's ids, whatever init_from held; a resumed checkpoint's load after.
            missing = self.net.pointer.bind(self.tokenizer)
            if missing:
                rank_zero_warn(f"model.net.pointer: {', '.join(missing)} are not words of the "
                               "tokenizer's vocabulary (one piece each): the word pointer never "
                               "points from or to them. Name words the captions use, or set "
                               "key_words and value_words to [] for no pointer.")

    @property
    def colour_word_ids(self) -> Tensor:
        """(K,) the ids of the colour names a channel swap changes (``SWAPPED_COLOUR_WORDS``) in
        the tokenizer's vocabulary, looked up once per tokenizer: what swapped copies are not
        asked for."""
        if self._colour_words is None or self._colour_words[0] is not self.tokenizer:
            self._colour_words = (self.tokenizer, word_ids(self.tokenizer, SWAPPED_COLOUR_WORDS))
        return self._colour_words[1]

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        if self.tokenizer is not None:
            checkpoint[TOKENIZER_KEY] = tokenizer_to_json(self.tokenizer)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.trained_steps = int(checkpoint.get("global_step", 0))
        self.tokenizer = stored_tokenizer(checkpoint, self.tokenizer)

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
                                    self.word_head, hp.word_detection_weight,
                                    hp.word_detection_colour_swaps, self.colour_word_ids,
                                    hp.pointer_tower_weight)
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
