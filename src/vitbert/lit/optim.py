"""AdamW with weight-decay groups and per-group learning rates, and a warmup + cosine schedule.

Weight decay pulls weights towards zero; that is right for the matrices of linear layers and
wrong for LayerNorm gains, biases, embedding tables, position tables and class tokens, whose
"zero" is not a neutral value. Learning rates differ by part: a pretrained tower wants a gentler
rate than the freshly initialised layers around it (the projector, the heads), which must learn
from nothing in the same steps.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from transformers import get_cosine_with_min_lr_schedule_with_warmup

from vitbert.nn import LearnedPosition

# Modules whose parameters are never decayed, whatever their shape.
NO_DECAY_MODULES = (
    nn.LayerNorm,
    nn.Embedding,
    nn.modules.batchnorm._BatchNorm,
    LearnedPosition,
)


@dataclass
class OptimizerConfig:
    """AdamW and its schedule. The defaults are the embedded default's (configs/default.yaml).

    Attributes:
        lr: peak learning rate, reached after ``warmup_steps`` (2e-3 suits the small models
            trained from scratch; a pretrained 768-wide tower wants about 2e-4).
        weight_decay: decoupled decay for the matrices of linear and conv layers.
        betas: Adam's moment decay rates.
        eps: Adam's denominator guard.
        warmup_steps: linear warmup from 0; 0 or a fraction < 1 of the total steps is allowed.
        min_lr_ratio: the cosine decays to ``lr * min_lr_ratio`` at the last step.
        image_tower_lr_mult: learning-rate factor for the image tower (e.g. 0.1 when pretrained).
        text_tower_lr_mult: learning-rate factor for the text tower (its embeddings, the tied
            decoder matrix among them, and its encoder; e.g. 0.05 for a pretrained BERT).
    """

    lr: float = 2e-3
    weight_decay: float = 0.05
    betas: tuple[float, float] = (0.9, 0.98)
    eps: float = 1e-8
    warmup_steps: float = 0.05
    min_lr_ratio: float = 0.05
    image_tower_lr_mult: float = 1.0
    text_tower_lr_mult: float = 1.0


def parameter_groups(model: nn.Module, config: OptimizerConfig, heads: nn.Module | None = None
                     ) -> list[dict]:
    """Split trainable parameters by (decay or not) × (learning-rate multiplier).

    Tied parameters (the MLM decoder and the word embedding) appear once: ``named_parameters``
    removes duplicates, and a parameter owned by any no-decay module is not decayed. ``heads``
    are trained beside ``model`` by the same rules (the objectives' heads); their
    parameters and ``model``'s are then named ``heads.*`` and ``model.*``.
    """
    towers = {"image_tower": config.image_tower_lr_mult, "text": config.text_tower_lr_mult}
    lr_mult = {id(p): mult for part, mult in towers.items() if hasattr(model, part)
               for p in getattr(model, part).parameters()}
    if heads is not None:
        model = nn.ModuleDict({"model": model, "heads": heads})
    no_decay = {
        id(p)
        for module in model.modules()
        if isinstance(module, NO_DECAY_MODULES)
        for p in module.parameters(recurse=False)
    }

    groups: dict[tuple[bool, float], dict] = {}
    for name, p in model.named_parameters():
        decay = not (id(p) in no_decay or p.ndim < 2 or name.endswith(("bias", "cls_token")))
        mult = lr_mult.get(id(p), 1.0)
        # A readable name for LearningRateMonitor and the experiments' ParameterStatsCallback.
        label = ("decay" if decay else "no_decay") + (f"_lr_x{mult:g}" if mult != 1 else "")
        group = groups.setdefault(
            (decay, mult),
            {
                "name": label,
                "params": [],
                "names": [],
                "weight_decay": config.weight_decay if decay else 0.0,
                "lr_mult": mult,
            },
        )
        group["params"].append(p)
        group["names"].append(name)
    return list(groups.values())


def build_optimizer(
    model: nn.Module, config: OptimizerConfig, allow_fused: bool = True,
    heads: nn.Module | None = None,
) -> torch.optim.AdamW:
    """AdamW over :func:`parameter_groups`, fused when allowed.

    The fused kernel does the whole update in one pass (CUDA, and the CPU since PyTorch 2.4).
    It unscales gradients itself, so Lightning refuses it when gradients are clipped under mixed
    precision: the caller passes ``allow_fused=False`` then, and gets the multi-tensor kernel.
    """
    groups = parameter_groups(model, config, heads)
    for group in groups:
        group["lr"] = config.lr * group["lr_mult"]
    device = next(model.parameters()).device.type
    fused = allow_fused and device in ("cuda", "cpu")
    return torch.optim.AdamW(
        groups, lr=config.lr, betas=config.betas, eps=config.eps, fused=fused, foreach=not fused
    )


def warmup_cosine(
    optimizer: torch.optim.Optimizer, config: OptimizerConfig, total_steps: int
) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warmup to the peak, then a cosine down to ``min_lr_ratio`` of it (every group's own
    peak), from transformers. Its warmup rises from 0 (step s has ``s / warmup`` of the peak),
    one step behind the ``(s + 1) / warmup`` this project used before; from the peak on the
    curves are equal (``tests/lit/test_optim.py``)."""
    warmup = config.warmup_steps
    warmup = int(warmup * total_steps) if 0 < warmup < 1 else int(warmup)
    return get_cosine_with_min_lr_schedule_with_warmup(
        optimizer, num_warmup_steps=warmup, num_training_steps=total_steps,
        min_lr_rate=config.min_lr_ratio)


def configure_optimizers(model: nn.Module, config: OptimizerConfig, trainer,
                         heads: nn.Module | None = None) -> dict:
    """What a LightningModule's ``configure_optimizers`` returns: AdamW over ``model`` (and
    ``heads``), and the warmup + cosine schedule over the run's steps, stepped every step."""
    clips_under_amp = bool(trainer.gradient_clip_val) and "mixed" in str(trainer.precision)
    optimizer = build_optimizer(model, config, not clips_under_amp, heads)
    steps = max(int(trainer.estimated_stepping_batches), 1)
    schedule = warmup_cosine(optimizer, config, steps)
    return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}
