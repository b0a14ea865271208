"""The training system: MLM loss, metrics, optimiser and schedule around an injected VitBert.

The LightningModule wires parts together and contains none of them: the network is
:class:`vitbert.models.VitBert`, the metrics are :class:`vitbert.lit.metrics.MaskedLMMetrics`,
the parameter groups come from :func:`vitbert.lit.optim.parameter_groups`. Saved hyperparameters
are plain values (dicts, numbers, strings), so every checkpoint loads with
``torch.load(weights_only=True)``; the tokenizer travels inside the checkpoint as its JSON text.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
from torch import Tensor

from vitbert.data.tokenizer import tokenizer_from_json, tokenizer_to_json
from vitbert.io import TOKENIZER_KEY, initialize
from vitbert.lit.metrics import MaskedLMMetrics
from vitbert.lit.optim import OptimizerConfig, build_optimizer, warmup_cosine
from vitbert.models import VitBert, VitBertConfig

IGNORE_INDEX = -100


class MaskedLMModule(L.LightningModule):
    """Masked-language modelling on captions, with the photo as extra context.

    Args:
        net: the architecture (image tower, text tower, how many image tokens).
        vocab_size: linked from the data module (the tokenizer's size); overrides ``net``'s.
        pad_token_id: linked from the data module.
        optimizer: AdamW, weight-decay groups, per-group learning-rate multipliers, schedule.
        init_from: a checkpoint (``.ckpt``) or exported folder to start from, weights only:
            a fresh optimizer and schedule (fine-tuning). Rows of the word embedding are matched
            by token text, so the vocabulary may differ. Ignored when resuming (``--ckpt_path``).
        freeze_image_tower_steps: keep the image tower fixed for the first N optimiser steps
            (lets a fresh projector and text tower settle before a pretrained tower is moved).
        num_examples: example predictions printed at each validation.
    """

    def __init__(
        self,
        net: VitBertConfig = VitBertConfig(),  # noqa: B008 (plain values, never mutated)
        vocab_size: int = 0,
        pad_token_id: int = 0,
        optimizer: OptimizerConfig = OptimizerConfig(),  # noqa: B008
        init_from: str | None = None,
        freeze_image_tower_steps: int = 0,
        num_examples: int = 4,
    ) -> None:
        super().__init__()
        net = _as_config(net)
        optimizer = _as_optimizer_config(optimizer)
        if vocab_size:
            net = dataclasses.replace(net, vocab_size=vocab_size, pad_token_id=pad_token_id)
        # Plain values only: the checkpoint must load with weights_only=True.
        self.save_hyperparameters(
            {
                "net": net.to_dict(),
                "vocab_size": net.vocab_size,
                "pad_token_id": net.pad_token_id,
                "optimizer": dataclasses.asdict(optimizer),
                "init_from": init_from,
                "freeze_image_tower_steps": freeze_image_tower_steps,
                "num_examples": num_examples,
            }
        )
        self.optimizer_config = optimizer
        # Pretrained image weights are loaded in setup("fit") of a fresh run only: a resumed run
        # or a loaded checkpoint gets every weight from its file, with no download.
        self.net = VitBert(net)
        self.val_metrics = MaskedLMMetrics(net.vocab_size)
        self.test_metrics = MaskedLMMetrics(net.vocab_size)
        self.tokenizer = None  # set from the data module, or restored from a checkpoint
        self._example_batch: dict[str, Any] | None = None

    # ----------------------------------------------------------------------------------------
    # Setup: tokenizer, fine-tuning start point

    def setup(self, stage: str) -> None:
        datamodule = getattr(self.trainer, "datamodule", None) if self._trainer else None
        if datamodule is not None and getattr(datamodule, "tokenizer", None) is not None:
            self.tokenizer = datamodule.tokenizer
        resuming = self._trainer is not None and self.trainer.ckpt_path is not None
        if stage != "fit" or resuming:
            return
        report = initialize(self.net, self.hparams.init_from, self.tokenizer)
        if report and self.trainer.is_global_zero:
            print(report)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        if self.tokenizer is not None:
            checkpoint[TOKENIZER_KEY] = tokenizer_to_json(self.tokenizer)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        if TOKENIZER_KEY in checkpoint and self.tokenizer is None:
            self.tokenizer = tokenizer_from_json(checkpoint[TOKENIZER_KEY])

    # ----------------------------------------------------------------------------------------
    # Steps

    def forward(self, batch: dict[str, Tensor], images: Tensor | None) -> Tensor:
        """Logits (M, V) at the masked positions of ``batch``, seeing ``images`` (or nothing)."""
        return self.net(
            batch["input_ids"],
            batch["attention_mask"],
            images=images,
            target_mask=batch["labels"] != IGNORE_INDEX,
        )

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        logits = self(batch, batch["images"])  # (M, V)
        targets = batch["labels"][batch["labels"] != IGNORE_INDEX]  # (M,)
        loss = F.cross_entropy(logits.float(), targets)
        self.log("train/loss", loss, prog_bar=True, batch_size=len(batch["input_ids"]))
        return loss

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        self._evaluate(batch, self.val_metrics)
        if batch_idx == 0:
            self._example_batch = batch

    def test_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        self._evaluate(batch, self.test_metrics)

    def _evaluate(self, batch: dict[str, Tensor], metrics: MaskedLMMetrics) -> None:
        targets_at = batch["labels"] != IGNORE_INDEX
        targets, is_content = batch["labels"][targets_at], batch["content_mask"][targets_at]
        mismatched = batch["images"].roll(1, dims=0)  # each caption meets its neighbour's photo
        for suffix, images in (("", batch["images"]), ("_text", None), ("_mismatch", mismatched)):
            metrics.update(suffix, self(batch, images), targets, is_content)

    def on_validation_epoch_end(self) -> None:
        self._log_figures("val", self.val_metrics)
        if self._example_batch is not None and self.hparams.num_examples:
            if self.trainer.is_global_zero and not self.trainer.sanity_checking:
                self._print_examples(self._example_batch)
            self._example_batch = None

    def on_test_epoch_end(self) -> None:
        self._log_figures("test", self.test_metrics)

    def _log_figures(self, stage: str, metrics: MaskedLMMetrics) -> None:
        figures = metrics.compute()  # already synchronised across ranks
        metrics.reset()
        self.log_dict({f"{stage}/{name}": value for name, value in figures.items()})

    def predict_step(self, batch: dict[str, Tensor], batch_idx: int) -> list[dict[str, Any]]:
        """Top-5 guesses at every masked piece, with the photo and from the text alone."""
        return self._describe_predictions(batch, top_k=5)

    # ----------------------------------------------------------------------------------------
    # Example predictions

    @torch.no_grad()
    def _describe_predictions(self, batch: dict[str, Tensor], top_k: int) -> list[dict[str, Any]]:
        """Every target shown as [MASK] (not BERT's 10% random / 10% kept) and guessed twice."""
        targets_at = batch["labels"] != IGNORE_INDEX  # (B, T)
        if self.tokenizer is not None:
            masked = batch["input_ids"].masked_fill(targets_at, self.tokenizer.mask_token_id)
            batch = {**batch, "input_ids": masked}
        # Probabilities over the whole vocabulary, then the k best: (M, k) each.
        with_image = self(batch, batch["images"]).float().softmax(-1).topk(top_k, dim=-1)
        text_only = self(batch, None).float().softmax(-1).topk(top_k, dim=-1)
        rows, cols = targets_at.nonzero(as_tuple=True)
        decode = self._decode_token
        described = []
        for i in range(len(batch["input_ids"])):
            length = int(batch["attention_mask"][i].sum())
            masks = []
            for m in (rows == i).nonzero(as_tuple=True)[0].tolist():
                masks.append(
                    {
                        "position": int(cols[m]),
                        "truth": decode(batch["labels"][i, cols[m]]),
                        "with_image": [decode(t) for t in with_image.indices[m]],
                        "with_image_scores": with_image.values[m].tolist(),
                        "text_only": [decode(t) for t in text_only.indices[m]],
                        "text_only_scores": text_only.values[m].tolist(),
                    }
                )
            described.append(
                {
                    "index": int(batch["index"][i]),
                    "masked_text": self._decode_ids(batch["input_ids"][i, :length]),
                    "masks": masks,
                }
            )
        return described

    def _decode_token(self, token_id: Tensor | int) -> str:
        if self.tokenizer is None:
            return str(int(token_id))
        return self.tokenizer.convert_ids_to_tokens(int(token_id))

    def _decode_ids(self, ids: Tensor) -> str:
        if self.tokenizer is None:
            return " ".join(str(int(t)) for t in ids)
        return self.tokenizer.decode(ids.tolist(), skip_special_tokens=False)

    def _print_examples(self, batch: dict[str, Tensor]) -> None:
        count = self.hparams.num_examples
        sample = {key: value[:count] for key, value in batch.items()}
        lines = [f"Example predictions after step {self.global_step}:"]
        for example in self._describe_predictions(sample, top_k=5):
            lines.append(f"  {example['masked_text']}")
            for mask in example["masks"][:2]:
                lines.append(
                    f"    truth {mask['truth']!r:>12}  photo: {' '.join(mask['with_image'])}"
                    f"  |  text: {' '.join(mask['text_only'])}"
                )
        print("\n".join(lines))

    # ----------------------------------------------------------------------------------------
    # Optimisation

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        frozen_for = self.hparams.freeze_image_tower_steps
        if frozen_for:
            self.net.image_tower.requires_grad_(self.global_step >= frozen_for)

    def configure_optimizers(self):
        trainer = self.trainer
        clips_under_amp = bool(trainer.gradient_clip_val) and "mixed" in str(trainer.precision)
        optimizer = build_optimizer(self.net, self.optimizer_config, not clips_under_amp)
        total_steps = max(int(self.trainer.estimated_stepping_batches), 1)
        schedule = warmup_cosine(optimizer, self.optimizer_config, total_steps)
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": schedule, "interval": "step"},
        }


def _as_config(net: VitBertConfig | dict) -> VitBertConfig:
    return net if isinstance(net, VitBertConfig) else VitBertConfig.from_dict(net)


def _as_optimizer_config(optimizer: OptimizerConfig | dict) -> OptimizerConfig:
    return optimizer if isinstance(optimizer, OptimizerConfig) else OptimizerConfig(**optimizer)


