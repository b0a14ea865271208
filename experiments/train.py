"""A plain PyTorch training loop for the small experiments.

Lightning's per-step machinery costs more than these models do on a CPU, so the experiments use
this loop: data held in memory as tensors, Adam, cross-entropy, test accuracy at the end. The
:class:`~experiments.stats.ParameterStatsCallback` plugs in through its plain-loop API, so
the stalled-parameter diagnostics are the same code the main (Lightning) training uses.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from experiments.stats import ParameterStatsCallback


@dataclass
class RunResult:
    test_acc: float
    train_loss: list[float] = field(default_factory=list)  # mean per epoch
    seconds: float = 0.0  # wall clock
    cpu_seconds: float = 0.0  # this process's CPU time: what the run costs on an idle machine


def named_param_groups(
    model: nn.Module, lr: float, special: dict[str, float] | None = None
) -> list[dict]:
    """Optimizer groups: each ``special`` name suffix → its own group at ``lr × multiplier``.

    E.g. ``{"bias.table": 10.0}`` gives the relative-offset bias table ten times the learning
    rate. Every group carries a ``"name"``, which is how the stats callback labels it.
    """
    special = special or {}
    groups = {name: {"name": name, "params": [], "lr": lr * mult} for name, mult in special.items()}
    rest = {"name": "rest", "params": [], "lr": lr}
    for pname, p in model.named_parameters():
        match = next((s for s in special if pname.endswith(s)), None)
        (groups[match] if match else rest)["params"].append(p)
    return [g for g in [rest, *groups.values()] if g["params"]]


@torch.no_grad()
def accuracy(model: nn.Module, images: Tensor, labels: Tensor, batch_size: int = 500) -> float:
    model.eval()
    correct = 0
    for i in range(0, len(images), batch_size):
        logits = model(images[i:i + batch_size])
        correct += int((logits.argmax(-1) == labels[i:i + batch_size]).sum())
    return correct / len(images)


def train_classifier(
    model: nn.Module,
    train: tuple[Tensor, Tensor],
    test: tuple[Tensor, Tensor],
    epochs: int,
    lr: float = 1e-3,
    batch_size: int = 128,
    seed: int = 0,
    lr_mult: dict[str, float] | None = None,
    stats: ParameterStatsCallback | None = None,
) -> RunResult:
    """Adam on cross-entropy for ``epochs`` passes; returns the final test accuracy.

    ``lr_mult`` gives named parameters their own learning rate (see :func:`named_param_groups`);
    ``stats`` (if given) measures every optimizer step.
    """
    start, start_cpu = time.perf_counter(), time.process_time()
    gen = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.Adam(named_param_groups(model, lr, lr_mult))
    images, labels = train
    losses = []
    for _ in range(epochs):
        model.train()
        order = torch.randperm(len(images), generator=gen)
        total, count = 0.0, 0
        for i in range(0, len(images), batch_size):
            idx = order[i:i + batch_size]
            loss = F.cross_entropy(model(images[idx]), labels[idx])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if stats is not None:
                stats.before_step(optimizer, model)
            optimizer.step()
            if stats is not None:
                stats.after_step()
            total, count = total + loss.item() * len(idx), count + len(idx)
        losses.append(total / count)
    acc = accuracy(model, *test)
    return RunResult(acc, losses, time.perf_counter() - start, time.process_time() - start_cpu)
