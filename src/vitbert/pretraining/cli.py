"""``python scripts/pretrain_tower.py fit --config configs/tower/fractal_small.yaml``.

The same conventions as ``scripts/train.py``: LightningCLI over typed constructor arguments, a
folder per run (``runs/tower/version_N/`` with its logs, config and checkpoints;
``runs/tower/latest`` links to the newest), a progress bar in a terminal and a line every 20 s in a
log, and a user's mistake as one line on stderr (``--debug``: the traceback).
"""

from __future__ import annotations

import sys

from vitbert.cli import ProjectCLI, loggers, progress_settings, run_with_one_line_errors
from vitbert.pretraining.datamodule import FractalDataModule
from vitbert.pretraining.module import TowerPretraining

RUNS_DIR = "runs/tower"  # beside the caption runs, never runs/latest: that is a caption model


class TowerCLI(ProjectCLI):
    checkpoint_monitor = "val/top1"  # held-out fractal instances

    def add_arguments_to_parser(self, parser) -> None:
        super().add_arguments_to_parser(parser)
        parser.link_arguments("model.image.image_size", "data.image_size")
        # The data module is built first and gives the classifier its width.
        parser.link_arguments("data.num_classes", "model.num_classes", apply_on="instantiate")


def build(args: list[str], cli_class: type[TowerCLI] = TowerCLI) -> TowerCLI:
    """The command line for ``args``, run (LightningCLI runs the subcommand on construction)."""
    progress = progress_settings()
    return cli_class(
        TowerPretraining, FractalDataModule,
        trainer_defaults={"logger": loggers(RUNS_DIR), "callbacks": progress["callbacks"],
                          "enable_progress_bar": progress["enable_progress_bar"]},
        save_config_kwargs={"overwrite": True}, auto_configure_optimizers=False,
        parser_kwargs={"description": __doc__.split("\n\n")[0]}, args=args)


def main(args: list[str] | None = None) -> TowerCLI:
    """Run the CLI; a mistake the user can fix exits 2 with one line."""
    return run_with_one_line_errors(build, list(sys.argv[1:] if args is None else args))
