"""Pretraining the image tower alone: which fractal class is this picture?

The tower is the caption model's own (:func:`vitbert.models.vit.build_image_tower` with the same
:class:`~vitbert.models.config.ImageTowerConfig`, the same pixel normalisation), with a linear
classifier on its pooled output (the mean of the patch tokens, or the class token). Trained with
cross-entropy and label smoothing, AdamW and the warmup + cosine schedule of the caption runs.
At the end of ``fit`` the tower alone is written to ``export_to`` under timm's names, the file
``model.net.image.pretrained`` loads; the classifier stays in the checkpoint.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import lightning as L
import torch.nn.functional as F
from lightning.pytorch.utilities import rank_zero_info
from torch import Tensor, nn
from torchmetrics.classification import MulticlassAccuracy

from vitbert.io.timm import save_image_weights
from vitbert.lit.optim import OptimizerConfig, configure_optimizers
from vitbert.models.config import ImageTowerConfig
from vitbert.models.vit import build_image_tower, init_transformer_weights


class TowerClassifier(nn.Module):
    """Image tower → pooled vector (B, D) → class logits (B, C)."""

    def __init__(self, image: ImageTowerConfig, num_classes: int) -> None:
        super().__init__()
        self.tower = build_image_tower(image)
        self.head = nn.Linear(image.dim, num_classes)
        init_transformer_weights(self.head)

    def forward(self, images: Tensor) -> Tensor:
        pooled, _ = self.tower(self.tower.normalize(images))  # (B, D)
        return self.head(pooled)  # (B, C)


class TowerPretraining(L.LightningModule):
    """Classify generated images with the caption model's image tower, then save the tower.

    Args:
        image: the tower, exactly as the caption config that will load it describes it
            (``model.net.image``; its ``pretrained`` is ignored here).
        num_classes: linked from the data module.
        optimizer: AdamW and its warmup + cosine schedule.
        label_smoothing: cross-entropy label smoothing (the usual 0.1).
        export_to: where the tower's weights go at the end of ``fit`` (safetensors, timm's
            names); null = the checkpoint only.
    """

    def __init__(self, image: ImageTowerConfig, num_classes: int = 1000,
                 optimizer: OptimizerConfig | None = None, label_smoothing: float = 0.1,
                 export_to: str | None = None) -> None:
        super().__init__()
        # A checkpoint holds the configs as plain dicts (it loads with weights_only=True).
        image = image if isinstance(image, ImageTowerConfig) else ImageTowerConfig(**image)
        optimizer = optimizer or OptimizerConfig()
        optimizer = (optimizer if isinstance(optimizer, OptimizerConfig)
                     else OptimizerConfig(**optimizer))
        self.save_hyperparameters(ignore=["image", "optimizer"])
        self.hparams.update(image=dataclasses.asdict(image),
                            optimizer=dataclasses.asdict(optimizer))
        self.model = TowerClassifier(image, num_classes)
        self.optimizer_config = optimizer
        self.label_smoothing = label_smoothing
        self.export_to = export_to
        self.train_accuracy = MulticlassAccuracy(num_classes, average="micro")
        self.val_top1 = MulticlassAccuracy(num_classes, average="micro")
        self.val_top5 = MulticlassAccuracy(num_classes, top_k=min(5, num_classes),
                                           average="micro")

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        images, labels = batch
        logits = self.model(images)
        loss = F.cross_entropy(logits, labels, label_smoothing=self.label_smoothing)
        self.train_accuracy(logits, labels)
        self.log("train/loss", loss, prog_bar=True)
        self.log("train/top1", self.train_accuracy, prog_bar=True)
        return loss

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        images, labels = batch
        logits = self.model(images)
        self.val_top1(logits, labels)
        self.val_top5(logits, labels)
        self.log("val/loss", F.cross_entropy(logits, labels), sync_dist=True)
        self.log("val/top1", self.val_top1, prog_bar=True)
        self.log("val/top5", self.val_top5)

    def on_validation_epoch_end(self) -> None:
        if not self.trainer.sanity_checking:
            rank_zero_info(f"held-out fractal instances, step {self.global_step}: "
                           f"top-1 {self.val_top1.compute():.1%}, "
                           f"top-5 {self.val_top5.compute():.1%}")

    def configure_optimizers(self) -> dict:
        return configure_optimizers(self.model, self.optimizer_config, self.trainer)

    def on_fit_end(self) -> None:
        if self.export_to and self.trainer.is_global_zero:
            count = save_image_weights(self.model.tower, Path(self.export_to))
            rank_zero_info(f"image tower ({count} tensors): {self.export_to}; a caption run "
                           f"starts from it with --model.net.image.pretrained {self.export_to}")
