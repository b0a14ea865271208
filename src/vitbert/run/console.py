"""What a run prints about itself: the model's size when it starts, its progress, a few example
guesses at each validation, the figures when it ends.

Progress that reads well in a log file: Lightning's progress bars redraw one terminal line;
redirected to a file (``fit > run.log``, a SLURM job's output) they write nothing useful for
minutes. :class:`LogProgress` writes a plain line at most every ``every_seconds`` instead: the step,
the speed, the time left and the loss. The CLI turns it on exactly when stdout is not a terminal,
and the bar otherwise.
"""

from __future__ import annotations

import math
import sys
import time
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import ModelSummary
from lightning.pytorch.utilities import rank_zero_only
from lightning.pytorch.utilities.model_summary import get_human_readable_count

from vitbert.lit.conditions import ANOTHER_PHOTO, CONDITIONS, TEXT_ONLY
from vitbert.lit.metrics import SKIPPED, TOP_K
from vitbert.lit.retrieval import KS as RETRIEVAL_KS

# Table columns: (metric name before the condition's suffix, after it).
COLUMNS = [("loss", "")] + [(f"top{k}", "") for k in TOP_K] + [
    (f"top{k}", "_content") for k in TOP_K]
GAINS = (("image_gain_top1", ANOTHER_PHOTO), ("image_gain_vs_text_top1", TEXT_ONLY))


def format_figures(figures: dict[str, float], stage: str = "val") -> str:
    """Rows: the conditions; columns: loss and top-k (all pieces, content words); then the gains.

    The headline gain is with the photo minus another image's photo (what the photo's content
    adds); with the photo minus text only follows on its own line. Then the whole-split
    evaluations a run made: binding swap tests, retrieval, captions.
    """
    header = f"{'':<26}" + "".join(f"{base + content:>14}" for base, content in COLUMNS)
    lines = [header, "-" * len(header)]
    for condition in CONDITIONS:
        cells = []
        for base, content in COLUMNS:
            value = figures.get(f"{stage}/{base}{condition.suffix}{content}")
            cells.append("-" if value is None else f"{value:.4f}" if base == "loss"
                         else f"{100 * value:.1f}%")
        lines.append(f"{condition.description:<26}" + "".join(f"{c:>14}" for c in cells))
    for name, against in GAINS:
        gains = [f"{100 * figures[f'{stage}/{name}{c}']:+.1f} points ({what})"
                 for c, what in (("", "all pieces"), ("_content", "content words"))
                 if f"{stage}/{name}{c}" in figures]
        if gains:
            lines.append(f"image gain at top-1 against {against.description}: " + ", ".join(gains))
    skipped = int(figures.get(f"{stage}/{SKIPPED}", 0))
    if skipped:
        lines.append(f"({skipped} captions had no other image in their batch and are not in the "
                     f"'{ANOTHER_PHOTO.description}' row)")
    lines += format_binding_figures(figures, stage)
    lines += format_retrieval_figures(figures, stage)
    lines += format_caption_figures(figures, stage)
    return "\n".join(lines)


def format_caption_figures(figures: dict[str, float], stage: str = "val") -> list[str]:
    """One line each, with the photo, from no image and reranked: BLEU-4 and CIDEr-D."""
    lines = []
    for suffix, description in (("", "captions, with the photo"), ("_text", "captions, no image"),
                                ("_reranked", "captions, reranked")):
        if f"{stage}/cider{suffix}" not in figures:
            continue
        lines.append(f"{description:<26}BLEU-4 {100 * figures[f'{stage}/bleu4{suffix}']:.1f}   "
                     f"CIDEr-D {100 * figures[f'{stage}/cider{suffix}']:.1f}")
    return lines


# The binding scores (a data set's swap tests, logged as binding_*), with their row labels.
BINDING_ROWS = (("pll", "pseudo-log-likelihood, photo"),
                ("pll_text", "pseudo-log-likelihood, text"),
                ("fill", "fill-mask, photo"))


def format_binding_figures(figures: dict[str, float], stage: str = "val") -> list[str]:
    """The swap tests as a small table: a row per score, a column per kind of swap, then all
    kinds pooled; nothing when the run made no binding test."""
    prefix = f"{stage}/binding_pll_"
    kinds = sorted(key[len(prefix):] for key in figures
                   if key.startswith(prefix) and not key.startswith(f"{prefix}text"))
    if not kinds:
        return []
    columns = [*kinds, "all"]
    lines = [f"{'binding: true caption wins (chance 50%)':<40}"
             + "".join(f"{kind:>10}" for kind in columns)]
    for score, label in BINDING_ROWS:
        names = [f"{stage}/binding_{score}_{kind}" for kind in kinds] + [
            f"{stage}/binding_{score}"]
        if any(name in figures for name in names):
            lines.append(f"  {label:<38}" + "".join(
                f"{100 * figures[name]:>9.1f}%" if name in figures else f"{'-':>10}"
                for name in names))
    return lines


def format_retrieval_figures(figures: dict[str, float], stage: str = "val") -> list[str]:
    """Retrieval (:mod:`vitbert.lit.retrieval`) as a small table: a row per direction, R@1, R@5,
    R@10, and the chance level k / photos; nothing when the run measured no retrieval."""
    prefix = f"{stage}/retrieval_"
    if f"{prefix}rsum" not in figures:
        return []
    images, captions = int(figures[f"{prefix}images"]), int(figures[f"{prefix}captions"])
    lines = [f"{f'retrieval: {images} photos, {captions} captions':<40}"
             + "".join(f"{f'R@{k}':>10}" for k in RETRIEVAL_KS) + f"{'rsum':>10}"]
    for direction, label in (("text_to_image", "text → image"), ("image_to_text", "image → text")):
        lines.append(f"  {label:<38}" + "".join(
            f"{100 * figures[f'{prefix}{direction}_r{k}']:>9.1f}%" for k in RETRIEVAL_KS))
    lines[-1] += f"{figures[f'{prefix}rsum']:>10.1f}"  # both directions' six, once
    lines.append(f"  {'chance (k / photos)':<38}" + "".join(
        f"{_chance(100 * min(1.0, k / images)):>10}" for k in RETRIEVAL_KS))
    return lines


def _chance(percent: float) -> str:
    """A chance level to the digits that show it: 0.05% and 0.25% at R@1 and R@5 of 2,000 photos,
    not 0.1% and 0.2%."""
    return f"{percent:.1f}%" if percent >= 1 else f"{percent:.2g}%"


class ValidationSummary(L.Callback):
    """Prints the figures as one table: the last validation's when ``fit`` ends, and the result of
    ``validate`` or ``test`` (which then skip Lightning's own alphabetical table, see cli.py).

    The step is the one the weights were trained to: the trainer's in ``fit``, the loaded
    checkpoint's (``pl_module.trained_steps``) in ``validate`` and ``test``.
    """

    @rank_zero_only
    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._print(trainer, "val", "Validation", trainer.global_step)

    @rank_zero_only
    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.state.fn == "validate":
            self._print(trainer, "val", "Validation", getattr(pl_module, "trained_steps", 0))

    @rank_zero_only
    def on_test_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._print(trainer, "test", "Test", getattr(pl_module, "trained_steps", 0))

    @staticmethod
    def _print(trainer: L.Trainer, stage: str, title: str, step: int) -> None:
        figures = {k: float(v) for k, v in trainer.callback_metrics.items()
                   if k.startswith(f"{stage}/")}
        if not figures:
            return
        note = "" if step or trainer.state.fn == "fit" else " (untrained: no --ckpt_path given)"
        print(f"\n{title} after {step} steps{note}:\n{format_figures(figures, stage)}")


class ParameterCount(ModelSummary):
    """One line for the model's size, in place of Lightning's summary table.

    Lightning's table lists the metric modules (0 parameters) and a FLOPs column and total that
    read 0 for this module (Lightning counts FLOPs through ``example_input_array``, and a batch
    here is a dict), and warns under bf16-mixed that its size estimate is wrong; this counts the
    parameters and their bytes as stored. ``scripts/describe_model.py`` describes the parts.
    """

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not trainer.is_global_zero:
            return
        params = list(pl_module.parameters())
        total = sum(p.numel() for p in params)
        trainable = sum(p.numel() for p in params if p.requires_grad)
        megabytes = sum(p.numel() * p.element_size() for p in params) / 1e6
        print(f"Model: {get_human_readable_count(total)} parameters "
              f"({get_human_readable_count(trainable)} trainable, {megabytes:.1f} MB)", flush=True)


def format_duration(seconds: float) -> str:
    """``h:mm:ss`` (or ``m:ss`` under an hour); ``?`` when unknown."""
    if not math.isfinite(seconds) or seconds < 0:
        return "?"
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class LogProgress(L.Callback):
    """A line like ``step 120/939 (13%) | 2.10 steps/s | ETA 6:30 | loss 1.234`` every N seconds.

    The first line comes after the first step (so a user sees at once that training runs) and the
    last one when training ends; the speed is measured since the run (or the resume) started.
    """

    def __init__(self, every_seconds: float = 20.0, stream: Any = None) -> None:
        super().__init__()
        self.every_seconds = every_seconds
        self.stream = stream
        self._start_time = 0.0
        self._start_step = 0
        self._last_print = -math.inf
        self._epoch = 0

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._start_time, self._start_step = time.monotonic(), trainer.global_step
        self._last_print = -math.inf

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *args) -> None:
        now = time.monotonic()  # one reading a step: lines come every_seconds + one step apart
        self._epoch = trainer.current_epoch  # at the end Lightning has counted one more
        if now - self._last_print >= self.every_seconds:
            self._report(trainer, now)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._report(trainer, time.monotonic())

    @rank_zero_only
    def _report(self, trainer: L.Trainer, now: float) -> None:
        self._last_print = now
        step, total = trainer.global_step, trainer.estimated_stepping_batches
        done = step - self._start_step
        rate = done / max(now - self._start_time, 1e-9)
        epoch = f"epoch {self._epoch + 1}"
        if trainer.max_epochs and trainer.max_epochs > 0:
            epoch += f"/{trainer.max_epochs}"
        parts = [epoch]
        if math.isfinite(total) and total > 0:
            parts.append(f"step {step}/{int(total)} ({step / total:.0%})")
            parts.append(f"ETA {format_duration((total - step) / rate if rate > 0 else math.inf)}")
        else:
            parts.append(f"step {step}")
        parts.append(f"{rate:.2f} steps/s")
        for key, label in (("train/loss", "loss"), ("train/generation_loss", "caption loss"),
                           ("train/word_loss", "word loss")):
            value = trainer.callback_metrics.get(key)  # MLM, and the other objectives'
            if value is not None:
                parts.append(f"{label} {float(value):.4f}")
        print(" | ".join(parts), file=self.stream or sys.stdout, flush=True)


class ExamplePredictions(L.Callback):
    """Print a few captions of the first validation batch with the model's guesses at each target
    (``num_examples`` of them; 0: none).

    One line per target: the truth, then the top 5 under each condition (with the photo, another
    image's photo, text only), read by ``pl_module.predict_step`` (:mod:`vitbert.decoding`), so
    they are the guesses ``train.py predict`` and ``scripts/predict.py`` would give. The step is
    the one the weights were trained to: the trainer's in ``fit``, the checkpoint's otherwise.
    """

    def __init__(self, num_examples: int = 3) -> None:
        self.num_examples = num_examples
        self._batch: dict[str, Any] | None = None

    def on_validation_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule,
                                outputs: Any, batch: Any, batch_idx: int,
                                dataloader_idx: int = 0) -> None:
        if batch_idx == 0 and dataloader_idx == 0 and self.num_examples:
            self._batch = batch

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        batch, self._batch = self._batch, None
        if batch is None or trainer.sanity_checking or not trainer.is_global_zero:
            return
        if getattr(pl_module, "tokenizer", None) is None:
            return
        step = max(trainer.global_step, getattr(pl_module, "trained_steps", 0))
        records = pl_module.predict_step(batch, 0)[: self.num_examples]
        print(format_examples(records, step))


def format_examples(records: list[dict[str, Any]], step: int) -> str:
    """The printout of :class:`ExamplePredictions` for prediction records (vitbert.decoding)."""
    lines = [f"Example predictions after step {step} (top 5: photo | another photo | text):"]
    for record in records:
        lines.append(f"  {record['text']}")
        for mask in record["masks"]:
            readings = [" ".join(g["token_str"] for g in guesses) if guesses else "-"
                        for guesses in (mask["with_image"], mask["another_image"],
                                        mask["text_only"])]
            lines.append(f"    [MASK] {mask['index'] + 1}: truth {mask['truth']!r:<12} "
                         + "  |  ".join(readings))
    return "\n".join(lines)
