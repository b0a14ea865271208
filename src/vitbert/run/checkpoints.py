"""Checkpoints: one folder per run, ``last.ckpt`` always current, exact resume and preemption.

``runs/version_N/`` holds a run's checkpoints beside its logs and config.

A second run, a fine-tune or a resume gets a folder of its own (Lightning numbers them from the
first logger), so it never overwrites what an earlier run wrote. ``runs/latest`` is a link to the
newest run that has written a checkpoint, so the commands a user copies stay the same from run to
run::

    python scripts/train.py fit                                          # → runs/version_0/
    python scripts/predict.py --ckpt runs/latest/checkpoints/last.ckpt …
    python scripts/train.py fit --model.init_from runs/latest/checkpoints/last.ckpt  # → version_1

The link moves when a checkpoint is written, not when a run starts: a run stopped before its
first checkpoint leaves ``latest`` at a run that has one.

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

import os
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from lightning.pytorch.utilities.exceptions import SIGTERMException

LATEST = "latest"
CHECKPOINT_FOLDER = "checkpoints"


def run_checkpoint_folder(trainer: L.Trainer) -> Path:
    """Where the run's checkpoints go: the best-checkpoint callback's folder (Lightning resolves
    an unset one to ``<log dir>/checkpoints``, the same on every rank), else that default."""
    best = trainer.checkpoint_callback
    if best is not None and best.dirpath:
        return Path(best.dirpath)
    return Path(trainer.log_dir or trainer.default_root_dir) / CHECKPOINT_FOLDER


def point_latest_at(run_dir: Path) -> Path:
    """Make ``<runs>/latest`` a relative link to ``run_dir``, replaced in one step (a reader
    never finds it missing). Raises OSError where links cannot be made, or where ``latest`` is
    something else, which is the user's and stays (then say so, not fail)."""
    link = run_dir.parent / LATEST
    if link.exists() and not link.is_symlink():
        raise FileExistsError(f"{link} is not a link made by a run")
    staged = run_dir.parent / f".{LATEST}.{os.getpid()}"
    staged.unlink(missing_ok=True)
    staged.symlink_to(run_dir.name, target_is_directory=True)
    os.replace(staged, link)  # rename(2) replaces the old link itself, never what it points to
    return link


def _shown(path: Path) -> str:
    """``path`` relative to the working directory when it lies under it (shorter to copy)."""
    try:
        return str(path.absolute().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


class LastCheckpoint(L.Callback):
    """Keep ``<run>/checkpoints/last.ckpt`` current: every N steps, after every validation, at the
    end; point ``runs/latest`` at the run; print the path as the fit's last line.

    Lightning's ``ModelCheckpoint(save_last=True)`` refreshes ``last.ckpt`` only when it also
    writes a top-k checkpoint, so once validation stops improving, ``last.ckpt`` goes stale and
    ``--ckpt_path last.ckpt`` would resume from an older step. This callback writes it
    unconditionally (``trainer.save_checkpoint``: every rank calls it, rank 0 writes).

    Args:
        dirpath: the folder; unset (the default), the run's own (:func:`run_checkpoint_folder`).
            Linked to the best-checkpoint callback's by the CLI.
        every_n_train_steps: also save this often, so a killed run loses at most this many steps.
    """

    FILENAME = "last.ckpt"

    def __init__(self, dirpath: str | None = None, every_n_train_steps: int = 200) -> None:
        self.dirpath = dirpath
        self.every_n_train_steps = every_n_train_steps
        self._written: Path | None = None  # this run's last.ckpt, once written
        self._run_dir: Path | None = None  # the run's folder (trainer.log_dir), read once

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._written = self._run_dir = None  # a new fit, a new folder

    def folder(self, trainer: L.Trainer) -> Path:
        return Path(self.dirpath) if self.dirpath else run_checkpoint_folder(trainer)

    def save(self, trainer: L.Trainer) -> Path:
        """Write it now (every rank calls this). Lightning writes to a temporary file and renames
        it, so a kill or a full disk mid-write leaves the previous last.ckpt whole."""
        path = self.folder(trainer) / self.FILENAME
        try:
            # Everything, to resume from; said explicitly (left unset, Lightning logs a warning).
            trainer.save_checkpoint(path, weights_only=False)
        except OSError as error:  # a full disk, a read-only or vanished folder
            raise OSError(error.errno, f"cannot write {path} ({error.strerror or error}); free "
                          "some space or pass a writable --checkpoint.dirpath. The previous "
                          f"{self.FILENAME}, if any, is untouched") from error
        if self._written is None:
            # trainer.log_dir is a collective under DDP (a broadcast): read here, where every
            # rank is, and once, never in teardown, which a failed rank may not reach.
            self._run_dir = Path(trainer.log_dir) if trainer.logger is not None else None
            self._written = path
            if trainer.is_global_zero:
                self._link_latest(path)
        return path

    def _link_latest(self, path: Path) -> None:
        """``runs/latest`` → this run, when the checkpoint lies in the run's own folder (a
        ``--checkpoint.dirpath`` chosen by hand is the user's layout: no link is made there)."""
        run_dir = self._run_dir
        if run_dir is None or path.parent.resolve() != (run_dir / CHECKPOINT_FOLDER).resolve():
            return
        try:
            point_latest_at(run_dir)
        except OSError as error:
            rank_zero_warn(f"could not point {run_dir.parent / LATEST} at {run_dir} ({error}); "
                           f"use {path} itself")

    def _save(self, trainer: L.Trainer) -> None:
        if trainer.fast_dev_run or trainer.sanity_checking:
            return
        self.save(trainer)

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        step = trainer.global_step
        if self.every_n_train_steps and step and step % self.every_n_train_steps == 0:
            self._save(trainer)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.state.fn == "fit":
            self._save(trainer)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._save(trainer)

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        """The last line of a fit (after the figures; also after an interrupted one)."""
        path = self._written
        if stage != "fit" or path is None or not trainer.is_global_zero:
            return
        also = ""
        if self._run_dir is not None:
            latest = self._run_dir.parent / LATEST / CHECKPOINT_FOLDER / self.FILENAME
            also = f" (also {_shown(latest)})" if latest.exists() and latest.samefile(path) else ""
        rank_zero_info(f"newest checkpoint: {_shown(path)}{also}")


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
    ``last.ckpt`` (through ``last_checkpoint``, a :class:`~vitbert.run.checkpoints.LastCheckpoint`)
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
        stateful = [dl for dl in _flattened(trainer.train_dataloader)
                    if hasattr(dl, "load_state_dict")]
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


def _flattened(loaders: Any) -> list[Any]:
    """The loaders of ``trainer.train_dataloader`` (one, or a list or dict of them, nested), in
    the order Lightning's combined loader keeps their states."""
    if loaders is None:
        return []
    if isinstance(loaders, Mapping):
        return [dl for value in loaders.values() for dl in _flattened(value)]
    if isinstance(loaders, list | tuple):
        return [dl for item in loaders for dl in _flattened(item)]
    return [loaders]


def _save_last(trainer: L.Trainer) -> Path:
    """``last.ckpt`` where :class:`LastCheckpoint` keeps it, else in the run's own folder."""
    last = next((c for c in trainer.callbacks if isinstance(c, LastCheckpoint)), None)
    if last is None:
        last = LastCheckpoint()
    return last.save(trainer)
