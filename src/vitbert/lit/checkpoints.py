"""One folder per run: ``runs/version_N/`` holds a run's checkpoints beside its logs and config.

A second run, a fine-tune or a resume gets a folder of its own (Lightning numbers them from the
first logger), so it never overwrites what an earlier run wrote. ``runs/latest`` is a link to the
newest run that has written a checkpoint, so the commands a user copies stay the same from run to
run::

    python scripts/train.py fit                                          # → runs/version_0/
    python scripts/predict.py --ckpt runs/latest/checkpoints/last.ckpt …
    python scripts/train.py fit --model.init_from runs/latest/checkpoints/last.ckpt  # → version_1

The link moves when a checkpoint is written, not when a run starts: a run stopped before its
first checkpoint leaves ``latest`` at a run that has one.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn

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
