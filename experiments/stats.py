"""Catching a *stalled* parameter in the course experiments (``scripts/experiments/``).

:class:`ParameterStatsCallback` catches a parameter whose weights barely move although the task
needs them to grow. Adam moves every weight by about ``lr`` per step whatever its gradient, so a
table that must reach large values (the relative-offset bias) can take ``value / lr`` steps to get
there; the loss alone does not show this, the per-group statistics do.
:func:`plot_parameter_stats` draws them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import lightning as L
import torch
from torch import Tensor, nn


class ParameterStatsCallback(L.Callback):
    """Log, per parameter group, ``max |w|`` and the update ratio ``‖Δw‖ / ‖w‖`` every step.

    ``Δw`` is the change made by one optimizer step and ``‖w‖`` the norm *after* it, each over
    all the group's parameters flattened into one vector (after, so that a zero-initialised table
    gives a finite ratio of 1 on its first step rather than ∞). A healthy group moves ~1e-3 of
    itself per step; a stalled one shows a tiny ratio while ``max |w|`` stays near its start.

    Groups are either the optimizer's param groups (named by their ``"name"`` key, else
    ``group0``, ``group1``, …), or, when ``groups`` is given, named sets of parameters: a mapping
    from a group name to regular expressions matched (``re.search``) against the module's
    parameter names, e.g. ``{"position_bias": [r"\\.table$"]}``.

    Logged keys: ``{prefix}{group}/max_abs`` and ``{prefix}{group}/update_ratio``. With
    ``keep_history`` each step's values are also appended to :attr:`history` (a list of dicts with
    a ``step`` key), which is what :func:`plot_parameter_stats` takes.

    Outside Lightning (a plain loop), call :meth:`before_step` right before ``optimizer.step()``
    and :meth:`after_step` right after it; it returns the same dict.
    """

    def __init__(
        self,
        groups: Mapping[str, str | Sequence[str]] | None = None,
        every_n_steps: int = 1,
        prefix: str = "params/",
        keep_history: bool = False,
    ) -> None:
        super().__init__()
        self.group_patterns = (
            {k: [v] if isinstance(v, str) else list(v) for k, v in groups.items()}
            if groups is not None else None
        )
        self.every_n_steps = every_n_steps
        self.prefix = prefix
        self.keep_history = keep_history
        self.history: list[dict[str, float]] = []
        self._step = 0
        self._groups: dict[str, list[Tensor]] = {}
        self._before: dict[str, Tensor] | None = None

    # ---- the measurement, usable from any loop ------------------------------------------------

    def resolve_groups(
        self, optimizer: torch.optim.Optimizer | None = None, module: nn.Module | None = None
    ) -> dict[str, list[Tensor]]:
        """Name → parameters, from the ``groups`` patterns (needs ``module``) or the optimizer."""
        if self.group_patterns is not None:
            if module is None:
                raise ValueError("named groups need the module to match parameter names")
            named = list(module.named_parameters())
            return {
                group: [p for name, p in named if any(re.search(pat, name) for pat in patterns)]
                for group, patterns in self.group_patterns.items()
            }
        if optimizer is None:
            raise ValueError("without named groups the optimizer's param groups are used")
        return {
            str(g.get("name", f"group{i}")): list(g["params"])
            for i, g in enumerate(optimizer.param_groups)
        }

    def before_step(
        self, optimizer: torch.optim.Optimizer | None = None, module: nn.Module | None = None
    ) -> None:
        """Snapshot the weights (only on steps that will be measured)."""
        self._before = None
        if self._step % self.every_n_steps:
            return
        self._groups = {k: v for k, v in self.resolve_groups(optimizer, module).items() if v}
        self._before = {k: _flat(ps).clone() for k, ps in self._groups.items()}

    def after_step(self) -> dict[str, float]:
        """Compare with the snapshot; returns ``{key: value}`` (empty on skipped steps)."""
        step, self._step = self._step, self._step + 1
        if self._before is None:
            return {}
        stats: dict[str, float] = {}
        for name, params in self._groups.items():
            w = _flat(params)
            delta = (w - self._before[name]).norm()
            stats[f"{self.prefix}{name}/max_abs"] = w.abs().max().item()
            stats[f"{self.prefix}{name}/update_ratio"] = (delta / w.norm().clamp_min(1e-12)).item()
        self._before = None
        if self.keep_history:
            self.history.append({"step": float(step), **stats})
        return stats

    # ---- Lightning hooks ----------------------------------------------------------------------

    def on_before_optimizer_step(
        self, trainer: L.Trainer, pl_module: L.LightningModule, optimizer: torch.optim.Optimizer
    ) -> None:
        # Lightning calls this inside ``optimizer.step(closure)`` after the closure has run,
        # i.e. after backward and before the weights change.
        self._step = trainer.global_step
        self.before_step(optimizer, pl_module)

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
        batch_idx: int,
    ) -> None:
        if self._before is None:  # no optimizer step this batch (accumulation) or not measured
            return
        stats = self.after_step()
        pl_module.log_dict(stats, on_step=True, on_epoch=False)


def _flat(params: Iterable[Tensor]) -> Tensor:
    return torch.cat([p.detach().float().reshape(-1) for p in params])


def plot_parameter_stats(
    histories: Mapping[str, Sequence[Mapping[str, float]]], group: str, path: str | Path,
    prefix: str = "params/", title: str | None = None,
) -> Path:
    """Two panels over steps for one group: ``‖Δw‖/‖w‖`` (log scale) and ``max |w|``.

    ``histories`` maps a run label (e.g. "bias, lr 1e-3") to a callback's :attr:`history`, so
    a stalled run and a healthy one can be put side by side. Returns the written path.
    """
    from matplotlib.figure import Figure  # no pyplot: no global backend or figure state

    fig = Figure(figsize=(10, 3.6))
    ax_ratio, ax_max = fig.subplots(1, 2)
    for label, history in histories.items():
        steps = [h["step"] for h in history]
        ax_ratio.plot(steps, [h[f"{prefix}{group}/update_ratio"] for h in history], label=label,
                      lw=0.8)
        ax_max.plot(steps, [h[f"{prefix}{group}/max_abs"] for h in history], label=label)
    ax_ratio.set_yscale("log")
    ax_ratio.set(xlabel="optimizer step", ylabel="‖Δw‖ / ‖w‖", title=f"{group}: update ratio")
    ax_max.set(xlabel="optimizer step", ylabel="max |w|", title=f"{group}: largest weight")
    ax_max.legend()
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    return path
