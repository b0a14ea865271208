"""What every script that loads a trained model shares: the device and thread flags, and how a
mistake ends (one line, exit status 2).

Light on purpose (no torch): a script builds its parser and answers ``--help`` before anything
heavy is imported.
"""

from __future__ import annotations

import argparse
import sys

THREADS_HELP = ("CPU threads for torch (default 1: one query of a small model is too little work "
                "to share; see scripts/predict.py --help)")


def add_runtime_arguments(parser: argparse.ArgumentParser, threads_help: str | None = THREADS_HELP
                          ) -> None:
    """``--device`` and (unless ``threads_help`` is None) ``--threads``."""
    parser.add_argument("--device", default=None, help="cpu, cuda, ... (default: cuda if any)")
    if threads_help is not None:
        parser.add_argument("--threads", type=int, default=1, help=threads_help)


def fail(message: str) -> int:
    """Say what went wrong on stderr, in one line; the status a script exits with."""
    print(f"error: {message}", file=sys.stderr)
    return 2
