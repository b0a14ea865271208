"""``python scripts/train.py {fit,validate,test,predict}``: LightningCLI over the project's parts.

Every setting is a typed constructor argument of :class:`~vitbert.lit.module.MaskedLMModule`,
a data module, or the Trainer, so ``--help`` lists them all and a YAML file in ``configs/`` can set
any of them. Without ``--config`` the embedded default (``configs/default.yaml``) is used: it
generates its data and trains on a CPU in minutes. Values the model needs from the data (the
tokenizer's vocabulary size and padding id) are linked, never written twice; the image size and
the longest caption are set once, on the model, and passed to the data.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

from jsonargparse import set_parsing_settings
from lightning.pytorch.callbacks import LearningRateMonitor, ModelCheckpoint
from lightning.pytorch.cli import LightningCLI

from vitbert.cli_errors import check_ckpt_path, explain
from vitbert.data.datamodule import CaptionDataModule
from vitbert.lit.callbacks import LastCheckpoint
from vitbert.lit.captioning import CaptionEvaluation
from vitbert.lit.module import MaskedLMModule
from vitbert.lit.progress import LogProgress
from vitbert.lit.summary import ValidationSummary
from vitbert.lit.writer import PredictionWriter

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CONFIG = REPO_ROOT / "configs" / "default.yaml"
CONFIG_FLAGS = ("--config", "-c")


def _loggers() -> list[dict]:
    """CSV logs always; TensorBoard as well when it is installed."""
    loggers = [{"class_path": "lightning.pytorch.loggers.CSVLogger",
                "init_args": {"save_dir": "logs", "name": "vitbert"}}]
    try:
        import tensorboard  # noqa: F401
    except ImportError:
        return loggers
    loggers.append({"class_path": "lightning.pytorch.loggers.TensorBoardLogger",
                    "init_args": {"save_dir": "logs", "name": "vitbert"}})
    return loggers


# Messages from the libraries that a user of this project cannot act on: printed by every run,
# they bury the lines that matter. Matched by their text, so nothing else is hidden.
UNACTIONABLE_WARNINGS = (
    "LightningCLI's args parameter is intended",  # main() passes sys.argv on, with --config added
    r"`isinstance\(treespec, LeafSpec\)` is deprecated",  # inside Lightning, with a newer torch
)
UNACTIONABLE_LOG_LINES = ("try installing [litlogger]",)  # an advert, printed by every Trainer


class _DropLines(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not any(text in record.getMessage() for text in UNACTIONABLE_LOG_LINES)


@contextlib.contextmanager
def quiet_library_chatter() -> Iterator[None]:
    """Hide :data:`UNACTIONABLE_WARNINGS` and :data:`UNACTIONABLE_LOG_LINES` while the CLI runs."""
    drop = _DropLines()
    loggers = [logging.getLogger(name) for name in ("lightning.pytorch.utilities.rank_zero",
                                                    "lightning_fabric.utilities.rank_zero")]
    with warnings.catch_warnings():
        for text in UNACTIONABLE_WARNINGS:
            warnings.filterwarnings("ignore", message=text)
        for logger in loggers:
            logger.addFilter(drop)
        try:
            yield
        finally:
            for logger in loggers:
                logger.removeFilter(drop)


def _progress() -> dict:
    """The bar in a terminal; in a log file (stdout redirected) a plain line every 20 s."""
    if sys.stdout.isatty():
        return {"enable_progress_bar": True, "callbacks": []}
    return {"enable_progress_bar": False, "callbacks": [LogProgress(every_seconds=20.0)]}


class VitBertCLI(LightningCLI):
    def add_arguments_to_parser(self, parser) -> None:
        parser.add_lightning_class_args(ModelCheckpoint, "checkpoint")
        parser.set_defaults(
            {
                "checkpoint.dirpath": "checkpoints",
                "checkpoint.filename": "best-step{step}",
                "checkpoint.monitor": "val/top5",
                "checkpoint.mode": "max",
                "checkpoint.auto_insert_metric_name": False,
            }
        )
        # last.ckpt, always current (see LastCheckpoint for why not save_last=True).
        parser.add_lightning_class_args(LastCheckpoint, "last_checkpoint")
        parser.link_arguments("checkpoint.dirpath", "last_checkpoint.dirpath")
        # `predict` streams its results to --prediction_writer.output (JSON Lines, atomically).
        parser.add_lightning_class_args(PredictionWriter, "prediction_writer")
        # BLEU-4 / CIDEr-D of generated captions at validation and test (generation runs only).
        parser.add_lightning_class_args(CaptionEvaluation, "captions")
        # Sizes the data must agree with are set once, on the model.
        parser.link_arguments("model.net.image.image_size", "data.image_size")
        parser.link_arguments("model.net.text.max_len", "data.max_length")
        parser.link_arguments("data.num_tokens", "model.vocab_size", apply_on="instantiate")
        parser.link_arguments("data.pad_token_id", "model.pad_token_id", apply_on="instantiate")


def main(args: list[str] | None = None) -> VitBertCLI:
    """Run the CLI; a mistake the user can fix exits 2 with one line (``--debug``: traceback)."""
    args = list(sys.argv[1:] if args is None else args)
    debug = "--debug" in args
    args = [a for a in args if a != "--debug"]
    subcommands = {"fit", "validate", "test", "predict"}
    if args and args[0] in subcommands and not any(a.split("=")[0] in CONFIG_FLAGS for a in args):
        # No config given: the embedded default, which runs anywhere in minutes.
        args[1:1] = ["--config", str(DEFAULT_CONFIG)]
    try:
        with quiet_library_chatter():
            check_ckpt_path(args)
            return _cli(args)
    except Exception as error:
        message = explain(error, args)
        if message is None or debug:
            raise
        print(f"error: {message}", file=sys.stderr)
        sys.exit(2)


def _cli(args: list[str]) -> VitBertCLI:
    # The config dataclasses document each field in a docstring under it; --help shows them.
    set_parsing_settings(docstring_parse_attribute_docstrings=True)
    progress = _progress()
    return VitBertCLI(
        MaskedLMModule,
        CaptionDataModule,
        subclass_mode_data=False,  # one data module; the source varies
        trainer_defaults={
            "logger": _loggers(),
            "enable_progress_bar": progress["enable_progress_bar"],
            "callbacks": [ValidationSummary(), LearningRateMonitor(logging_interval="step"),
                          *progress["callbacks"]],
        },
        save_config_kwargs={"overwrite": True},
        auto_configure_optimizers=False,  # the module builds its own AdamW groups and schedule
        parser_kwargs={"description": __doc__.split("\n\n")[0]},
        args=args,
    )
