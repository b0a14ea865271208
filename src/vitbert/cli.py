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
import importlib
import json
import logging
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import yaml
from jsonargparse import ArgumentError, set_parsing_settings
from lightning.pytorch.callbacks import LearningRateMonitor, ModelCheckpoint, ModelSummary
from lightning.pytorch.cli import LightningCLI

from vitbert.cli_errors import check_ckpt_path, check_image_weights, explain
from vitbert.data.datamodule import CaptionDataModule
from vitbert.io import CheckpointError
from vitbert.io.bert import bert_folder, text_tower_config
from vitbert.io.files import load_tensors_file
from vitbert.lit.evaluation import CaptionEvaluation
from vitbert.lit.module import MaskedLMModule
from vitbert.lit.retrieval import RetrievalEvaluation
from vitbert.models import TextTowerConfig, VitBertConfig
from vitbert.run.checkpoints import LastCheckpoint, ResumeState
from vitbert.run.console import (
    ExamplePredictions,
    LogProgress,
    ParameterCount,
    ValidationSummary,
)
from vitbert.run.predictions import PredictionWriter

REPO_ROOT = Path(__file__).resolve().parents[2]
CONFIGS = REPO_ROOT / "configs"
DEFAULT_CONFIG = CONFIGS / "default.yaml"
CONFIG_FLAGS = ("--config", "-c")
# The data a run trains on when it names none: generated captioned pictures, which need no
# download (the embedded default, configs/default.yaml).
EMBEDDED_SOURCE = "vitbert.shapes.ShapesSource"


# Every run gets a folder of its own, runs/version_N/: logs, config, checkpoints, predictions
# (vitbert.run.checkpoints; runs/latest links to the newest run with a checkpoint).
RUNS_DIR = "runs"
T = TypeVar("T")


def loggers(runs_dir: str = RUNS_DIR) -> list[dict]:
    """CSV logs always; TensorBoard as well when it is installed; both in the run's folder."""
    chosen = [{"class_path": "lightning.pytorch.loggers.CSVLogger",
               "init_args": {"save_dir": runs_dir, "name": ""}}]
    try:
        import tensorboard  # noqa: F401
    except ImportError:
        return chosen
    chosen.append({"class_path": "lightning.pytorch.loggers.TensorBoardLogger",
                   "init_args": {"save_dir": runs_dir, "name": ""}})
    return chosen


# Messages from the libraries that a user of this project cannot act on: printed by every run,
# they bury the lines that matter. Matched by their text, so nothing else is hidden.
UNACTIONABLE_WARNINGS = (
    "LightningCLI's args parameter is intended",  # main() passes sys.argv on, with --config added
    r"`isinstance\(treespec, LeafSpec\)` is deprecated",  # inside Lightning, with a newer torch
    # A run that stops before its first validation (--trainer.max_steps under an epoch) has no
    # val/top5 yet; a misspelt --checkpoint.monitor still fails once a validation has run.
    r"`ModelCheckpoint\(monitor=.*\)` could not find the monitored key",
)
UNACTIONABLE_LOG_LINES = ("try installing [litlogger]",)  # an advert, printed by every Trainer
# validate / test / predict read a checkpoint written elsewhere and save none: which of the
# checkpoint callback's records are reloaded does not matter to them.
EVALUATION_WARNINGS = ("The dirpath has changed from",)


class _DropLines(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not any(text in record.getMessage() for text in UNACTIONABLE_LOG_LINES)


@contextlib.contextmanager
def quiet_library_chatter(evaluating: bool = False) -> Iterator[None]:
    """Hide :data:`UNACTIONABLE_WARNINGS` and :data:`UNACTIONABLE_LOG_LINES` while the CLI runs
    (and :data:`EVALUATION_WARNINGS` when ``evaluating``: not ``fit``)."""
    drop = _DropLines()
    loggers = [logging.getLogger(name) for name in ("lightning.pytorch.utilities.rank_zero",
                                                    "lightning_fabric.utilities.rank_zero")]
    with warnings.catch_warnings():
        for text in UNACTIONABLE_WARNINGS + (EVALUATION_WARNINGS if evaluating else ()):
            warnings.filterwarnings("ignore", message=text)
        for logger in loggers:
            logger.addFilter(drop)
        try:
            yield
        finally:
            for logger in loggers:
                logger.removeFilter(drop)


def progress_settings() -> dict:
    """The bar in a terminal; in a log file (stdout redirected) a plain line every 20 s."""
    if sys.stdout.isatty():
        return {"enable_progress_bar": True, "callbacks": []}
    return {"enable_progress_bar": False, "callbacks": [LogProgress(every_seconds=20.0)]}


# Model settings the data module fills in at instantiation (the tokenizer's): a checkpoint's
# differ from the parsed placeholder on every resume, and say nothing the user chose.
LINKED_FROM_DATA = ("vocab_size", "pad_token_id")


class ProjectCLI(LightningCLI):
    """What every command line of the project shares: the best checkpoint by
    :attr:`checkpoint_monitor` and ``last.ckpt`` in the run's folder, Lightning's model summary as
    one line, and ``--ckpt_path`` read with ``torch.load(weights_only=True)``."""

    checkpoint_monitor = "val/top5"  # the validation figure that picks the best checkpoint

    def add_arguments_to_parser(self, parser) -> None:
        parser.add_lightning_class_args(ModelCheckpoint, "checkpoint")
        parser.set_defaults(
            {
                # dirpath unset: the run's own folder, runs/version_N/checkpoints/.
                "checkpoint.filename": "best-step{step}",
                "checkpoint.monitor": self.checkpoint_monitor,
                "checkpoint.mode": "max",
                "checkpoint.auto_insert_metric_name": False,
            }
        )
        # last.ckpt, always current (see LastCheckpoint for why not save_last=True).
        parser.add_lightning_class_args(LastCheckpoint, "last_checkpoint")
        parser.link_arguments("checkpoint.dirpath", "last_checkpoint.dirpath")

    def instantiate_trainer(self, **kwargs):
        trainer = super().instantiate_trainer(**kwargs)
        # Lightning's own summary (when enabled) becomes one line without the FLOPs that read 0.
        trainer.callbacks = [ParameterCount() if isinstance(cb, ModelSummary) else cb
                             for cb in trainer.callbacks]
        return trainer

    def _load_weights_only(self) -> None:
        """``--ckpt_path`` is read with ``torch.load(weights_only=True)``: a checkpoint whose
        pickle would run code is refused, whatever torch's default (False before 2.6)."""
        config = self.config_init[self.subcommand]
        if config.get("weights_only") is None:
            config["weights_only"] = True

    before_fit = before_validate = before_test = before_predict = _load_weights_only


class VitBertCLI(ProjectCLI):
    def setup_parser(self, add_subcommands: bool, main_kwargs: dict, subparser_kwargs: dict):
        super().setup_parser(add_subcommands, main_kwargs, subparser_kwargs)
        if add_subcommands:
            # ValidationSummary prints the figures as a table of conditions × metrics instead
            # of Lightning's one row per metric, sorted by name (--verbose true shows both).
            self.parser.set_defaults({"validate.verbose": False, "test.verbose": False})

    def add_arguments_to_parser(self, parser) -> None:
        super().add_arguments_to_parser(parser)
        # A few captions of the first validation batch, each target's top 5 under each condition.
        parser.add_lightning_class_args(ExamplePredictions, "examples")
        # `predict` streams its results to --prediction_writer.output (JSON Lines, atomically).
        parser.add_lightning_class_args(PredictionWriter, "prediction_writer")
        # BLEU-4 / CIDEr-D of generated captions at validation and test (generation runs only).
        parser.add_lightning_class_args(CaptionEvaluation, "captions")
        # Image-text retrieval R@k both ways at validation (a sample) and test (every picture),
        # for a model with contrastive heads (--model.net.itc_dim).
        parser.add_lightning_class_args(RetrievalEvaluation, "retrieval")
        # Data: the embedded pictures, unless a config or the command line names a source.
        parser.set_defaults({"data.source": {"class_path": EMBEDDED_SOURCE}})
        # Sizes the data must agree with are set once, on the model.
        parser.link_arguments("model.net.image.image_size", "data.image_size")
        parser.link_arguments("model.net.text.max_len", "data.max_length")
        parser.link_arguments("data.num_tokens", "model.vocab_size", apply_on="instantiate")
        parser.link_arguments("data.pad_token_id", "model.pad_token_id", apply_on="instantiate")

    def parse_arguments(self, parser, args) -> None:
        super().parse_arguments(parser, args)
        self._take_checkpoint_settings()

    def _take_checkpoint_settings(self) -> None:
        """A run with ``--ckpt_path`` gets the model settings stored in the checkpoint, over what
        the command line and config said (LightningCLI's rule, which it applies again after this
        and then finds nothing to change; the weights and, for ``fit``, the optimizer state are
        the stored model's). For ``fit`` (a resume) a setting that silently did nothing
        misleads: say which were replaced. A checkpoint whose settings this version does not
        have (an older vitbert's) cannot be rebuilt as its run: say, in one line, how to use its
        weights, before LightningCLI fails on them with a traceback."""
        subcommand = self.config.get("subcommand")
        path = self.config[subcommand].get("ckpt_path") if subcommand else None
        if not path or not Path(path).is_file():
            return
        hparams = load_tensors_file(Path(path), mmap=True).get("hyper_parameters", {})
        hparams.pop("_instantiator", None)
        if not hparams:
            return
        asked = dict(self.config[subcommand].model.items())  # {"net.image.dim": 64, …}
        self.parser.exit_on_error = False  # an error here is said in one line, below
        try:
            hparams["net"] = VitBertConfig.from_dict(hparams["net"]).to_dict()
            self.config = self.parser.parse_object({subcommand: {"model": hparams}}, self.config)
        except (TypeError, ValueError, ArgumentError) as error:  # a setting this version has not
            raise CheckpointError(
                f"--ckpt_path {path}: its settings are not this vitbert's "
                f"({str(error).splitlines()[0]}), so its run cannot {subcommand} here: start a new "
                f"run from its weights with --model.init_from {path}") from None
        finally:
            self.parser.exit_on_error = True
        kept = dict(self.config[subcommand].model.items())
        replaced = [f"model.{key} {_brief(mine)} (the checkpoint's: {_brief(its)})"
                    for key, (mine, its) in _aligned(asked, kept).items()
                    if not _filled_in(key, mine) and _canonical(mine, key) != _canonical(its, key)]
        if subcommand == "fit" and replaced:
            warnings.warn(f"resuming {path} with the settings it "
                          f"was trained with; ignored: {'; '.join(replaced)}. To train with "
                          f"other settings from its weights, start a new run with "
                          f"--model.init_from instead of --ckpt_path", stacklevel=2)

    def before_instantiate_classes(self) -> None:
        """A pretrained BERT (``model.net.text.pretrained``) brings its architecture and its
        tokenizer: both are read from its folder before the model and the data are built, so
        the one setting is enough (the run's config and checkpoints then hold them)."""
        config = self.config[self.subcommand] if self.subcommand else self.config
        text = config.model.net.text
        if not text.pretrained:
            return
        resolved = text_tower_config(text.pretrained, TextTowerConfig(**text.as_dict()))
        for name in ("dim", "depth", "num_heads", "mlp_ratio", "norm_eps", "layout"):
            setattr(text, name, getattr(resolved, name))
        if config.data.tokenizer is None:
            config.data.tokenizer = str(bert_folder(text.pretrained))

    def before_fit(self) -> None:
        self._load_weights_only()
        if not self.config_init["fit"].get("ckpt_path") and not self.model.hparams.init_from:
            check_image_weights(self.model.net.config.image.pretrained)  # a fresh run loads it


def _aligned(asked: dict, kept: dict) -> dict[str, tuple[object, object]]:
    """(asked, kept) for each of ``asked``'s settings (dotted keys, as a parsed namespace's items)
    that ``kept`` holds too. A setting one side leaves unset (None) and the other gives fields
    of (``freeze_image`` against ``freeze_image.steps``) is compared whole, the fields as a
    dict."""
    def fields(tree: dict, key: str) -> dict:
        return {k[len(key) + 1:]: v for k, v in tree.items() if k.startswith(key + ".")}

    pairs = {}
    for key in sorted(asked):
        parts = key.split(".")
        unset = next((".".join(parts[:n]) for n in range(1, len(parts))
                      if ".".join(parts[:n]) in kept), None)
        if key in kept:
            pairs[key] = (asked[key], kept[key])
        elif unset is not None:  # the checkpoint's is None where the run asks for fields
            pairs[unset] = (fields(asked, unset), kept[unset])
        elif fields(kept, key):  # the run asks for None where the checkpoint holds fields
            pairs[key] = (asked[key], fields(kept, key))
    return pairs


def _canonical(value: object, key: str = "") -> object:
    """A setting as compared on resume: a class named by where it is defined, whichever path
    named it (a config says ``vitbert.shapes.BindingLevers``; a checkpoint stores what the class
    reports, ``vitbert.shapes.model.BindingLevers``), nested settings as plain dicts and lists."""
    if hasattr(value, "as_dict"):  # a jsonargparse Namespace
        value = value.as_dict()
    if isinstance(value, dict):
        return {k: _canonical(v, k) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_canonical(v) for v in value]
    if key.rsplit(".", 1)[-1] == "class_path" and isinstance(value, str):
        module, _, name = value.rpartition(".")
        try:
            found = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError, ValueError):
            return value
        return f"{found.__module__}.{found.__qualname__}"
    return value


def _brief(value: object) -> str:
    """A setting as a warning shows it: a class by its name and arguments
    (``TwinContrast(weight=0.3)``), not the parser's nested namespaces."""
    value = _canonical(value)
    if isinstance(value, dict) and "class_path" in value:
        arguments = ", ".join(f"{k}={v!r}" for k, v in (value.get("init_args") or {}).items())
        return f"{value['class_path'].rpartition('.')[2]}({arguments})"
    if isinstance(value, list):
        return "[" + ", ".join(_brief(v) for v in value) + "]"
    return repr(value)


def _filled_in(key: str, asked: object) -> bool:
    """Whether ``model.<key>`` is one the run fills in itself, left as the placeholder."""
    return key.rsplit(".", 1)[-1] in LINKED_FROM_DATA


def main(args: list[str] | None = None) -> VitBertCLI:
    """Run the CLI; a mistake the user can fix exits 2 with one line (``--debug``: traceback)."""
    args = list(sys.argv[1:] if args is None else args)
    subcommands = {"fit", "validate", "test", "predict"}
    if args and args[0] in subcommands and not any(a.split("=")[0] in CONFIG_FLAGS for a in args):
        # No config given: the embedded default, which runs anywhere in minutes.
        args[1:1] = ["--config", str(DEFAULT_CONFIG)]

    def run(args: list[str]) -> VitBertCLI:
        check_ckpt_path(args)
        return _cli(args)

    evaluating = bool(args) and args[0] in subcommands - {"fit"}
    return run_with_one_line_errors(run, args, evaluating)


def run_with_one_line_errors(run: Callable[[list[str]], T], args: list[str],
                             evaluating: bool = False) -> T:
    """``run(args)`` with the library chatter hidden; a mistake the user can fix
    (:func:`vitbert.cli_errors.explain`) exits 2 with one line on stderr, a bug keeps its
    traceback, and ``--debug`` in ``args`` keeps it for every error."""
    debug = "--debug" in args
    args = [a for a in args if a != "--debug"]
    try:
        with quiet_library_chatter(evaluating):
            return run(args)
    except Exception as error:
        message = explain(error, args)
        if message is None or debug:
            raise
        print(f"error: {message}", file=sys.stderr)
        sys.exit(2)


def config_net(name: str) -> VitBertConfig:
    """The network ``configs/<name>.yaml`` trains: its ``model.net`` over the class defaults
    (the configs are the one place a named model is written down)."""
    path = CONFIGS / f"{name}.yaml"
    if not path.is_file():
        names = sorted(p.stem for p in CONFIGS.glob("*.yaml"))
        raise KeyError(f"no config {name!r} in {CONFIGS}; choose one of {names}")
    config = yaml.safe_load(path.read_text())
    net = VitBertConfig.from_dict((config.get("model") or {}).get("net") or {})
    if net.text.pretrained and Path(net.text.pretrained).is_dir():  # the BERT's own sizes
        net.text = text_tower_config(net.text.pretrained, net.text)
        bert = json.loads((Path(net.text.pretrained) / "config.json").read_text())
        net.vocab_size = bert["vocab_size"]  # its tokenizer's, which training links
    return net


def _embedded_defaults() -> dict:
    """The seed and Trainer settings of configs/default.yaml: --help shows what a run uses (the
    model's and the data's class defaults are neutral; that file switches on what the embedded
    default needs, tests/test_cli_defaults.py)."""
    config = yaml.safe_load(DEFAULT_CONFIG.read_text())
    return {"seed_everything": config["seed_everything"], "trainer": config["trainer"]}


def shows_help(args: list[str]) -> bool:
    """Whether the command prints the settings' explanations rather than running."""
    return any(arg in ("-h", "--help") or arg.startswith("--print_config") for arg in args)


def _cli(args: list[str], cli_class: type[VitBertCLI] = VitBertCLI) -> VitBertCLI:
    # The config dataclasses document each field in a docstring under it; --help (and
    # --print_config=comments) show them. Reading them takes seconds, so only then.
    set_parsing_settings(docstring_parse_attribute_docstrings=shows_help(args))
    progress = progress_settings()
    embedded = _embedded_defaults()
    return cli_class(
        MaskedLMModule,
        CaptionDataModule,
        subclass_mode_data=False,  # one data module; the source varies
        seed_everything_default=embedded["seed_everything"],
        trainer_defaults={
            **embedded["trainer"],
            "logger": loggers(),
            "enable_progress_bar": progress["enable_progress_bar"],
            "callbacks": [ValidationSummary(), LearningRateMonitor(logging_interval="step"),
                          ResumeState(),  # RNG states in checkpoints; SIGTERM → last.ckpt
                          *progress["callbacks"]],
        },
        save_config_kwargs={"overwrite": True},
        auto_configure_optimizers=False,  # the module builds its own AdamW groups and schedule
        parser_kwargs={"description": __doc__.split("\n\n")[0]},
        args=args,
    )
