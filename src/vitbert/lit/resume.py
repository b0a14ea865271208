"""Exact resume and preemption: the RNG states in the checkpoint, and SIGTERM → last.ckpt.

Lightning restores the weights, the optimizer, the schedule, the loop counters and (through
``state_dict``) the training loader's position (:mod:`vitbert.data.resume`); it does not restore
the random number generators, so dropout after a resume would draw other numbers than the run
that was never stopped. :class:`ResumeState` stores torch's (CPU and CUDA), numpy's and Python's
generator states in every checkpoint and puts them back right before the first training batch
after a resume: the exact point where they were saved, since a checkpoint is written at a batch's
end and nothing between then and the next batch draws from them (the loaders have their own
generators).

Preemption (SLURM, spot instances, ``docker stop``) sends SIGTERM. Lightning's signal connector
sets ``trainer.received_sigterm`` and stops at the next batch end; it writes nothing itself
outside SLURM (under SLURM with ``auto_requeue`` it writes ``hpc_ckpt_N.ckpt`` into the default
root dir and requeues). :class:`ResumeState` writes ``last.ckpt`` there first, so the run can be
resumed with ``--ckpt_path <dirpath>/last.ckpt`` wherever it ran.

The states are stored as tensors, ints and tuples only, so checkpoints keep loading with
``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch
from lightning.pytorch.utilities import rank_zero_warn
from lightning.pytorch.utilities.exceptions import SIGTERMException

from vitbert.lit.checkpoints import LastCheckpoint

STATE_KEY = "rng_states"


def collect_rng_states() -> dict[str, Any]:
    """The global generators' states, in types ``torch.load(weights_only=True)`` accepts."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    states: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": (kind, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, gauss),
        "python": random.getstate(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def set_rng_states(states: dict[str, Any]) -> None:
    """Put back what :func:`collect_rng_states` returned."""
    torch.set_rng_state(states["torch"])
    kind, keys, pos, has_gauss, gauss = states["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, gauss))
    version, internal, gauss_next = states["python"]
    random.setstate((version, tuple(internal), gauss_next))
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


class ResumeState(L.Callback):
    """Save the RNG states with every checkpoint, restore them on resume; on SIGTERM, write
    ``last.ckpt`` (through ``last_checkpoint``, a :class:`~vitbert.lit.checkpoints.LastCheckpoint`)
    and let Lightning stop the run cleanly."""

    def __init__(self) -> None:
        self._pending: dict[str, Any] | None = None
        self._loader_states: list[dict[str, Any]] = []

    def state_dict(self) -> dict[str, Any]:
        return {STATE_KEY: collect_rng_states()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        # Applied at the next training batch: restoring now would leave the draws made while the
        # trainer sets up (and any validation-only use of the file) in between.
        self._pending = state_dict.get(STATE_KEY)

    def on_load_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule,
                           checkpoint: dict[str, Any]) -> None:
        fit_loop = checkpoint.get("loops", {}).get("fit_loop", {})
        self._loader_states = fit_loop.get("state_dict", {}).get("combined_loader", [])

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # Lightning restores the loaders' states only if it builds them after the checkpoint is
        # read; `estimated_stepping_batches` in configure_optimizers builds them before, and the
        # states are then dropped (Lightning-AI/pytorch-lightning#20550). Apply them here, before
        # the first batch is drawn (a ResumableLoader starts its epoch lazily, on that draw).
        states, self._loader_states = self._loader_states, []
        loaders = trainer.fit_loop._combined_loader
        flattened = loaders.flattened if loaders is not None else []
        stateful = [dl for dl in flattened if hasattr(dl, "load_state_dict")]
        if states and len(states) == len(stateful):
            for dl, state in zip(stateful, states, strict=True):
                dl.load_state_dict(state)

    def on_train_batch_start(self, trainer: L.Trainer, *args: Any) -> None:
        if self._pending is not None:
            set_rng_states(self._pending)
            self._pending = None

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        # Lightning's handler only sets the flag; alone, a single process would train on to the
        # end of the epoch. Every rank takes part in the decision (a rank that saw no signal must
        # still join the checkpoint's barrier), then all save and stop at this same batch.
        stop = trainer.strategy.reduce_boolean_decision(bool(trainer.received_sigterm), all=False)
        if not stop:
            return
        path = _save_last(trainer)
        rank_zero_warn(f"SIGTERM received: wrote {path}; resume with --ckpt_path {path}")
        raise SIGTERMException  # a SystemExit with status 0, as Lightning ends on SIGTERM


def _save_last(trainer: L.Trainer) -> Path:
    """``last.ckpt`` where :class:`LastCheckpoint` keeps it, else in the run's own folder."""
    last = next((c for c in trainer.callbacks if isinstance(c, LastCheckpoint)), None)
    if last is None:
        last = LastCheckpoint()
    return last.save(trainer)
