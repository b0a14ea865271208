"""Two relations at once: how many attention heads does one block need?

    python scripts/experiments/heads.py                    # 8,000 / 2,000, 10 epochs, 2 seeds
    python scripts/experiments/heads.py --epochs 2 --seeds 1

Each picture holds a square, a circle and a triangle; the label answers two questions at once,
"is the square left of the circle?" and "is the triangle above the circle?" (4 classes). The
model is a conv stem + one attention block with 2D RoPE, with 1, 2, 4 or 8 heads of width 4
(model width 4 × heads). One head has one softmax, so it must spread one attention pattern over
both questions; separate heads can each look at one pair. A head of width 4 has one rotating
pair per axis; :class:`~experiments.models.GridRotary2D` turns it slowly enough that its
sign tells left from right (and above from below) across the whole 10×10 grid.

Writes ``heads.json`` and ``heads.png`` into ``--out``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

# The experiments' shared code is the top-level `experiments` package, not part of vitbert.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from experiments import report

if TYPE_CHECKING:
    from experiments.train import RunResult

HEADS, HEAD_DIM, STEM_WIDTH = (1, 2, 4, 8), 4, 4
LR, BATCH = 1e-3, 128


def _label(heads: int) -> str:
    return f"{heads} head{'s' if heads > 1 else ''} × {HEAD_DIM} (width {heads * HEAD_DIM})"


def run_one(heads: int, seed: int, args) -> tuple[int, int, RunResult]:
    """One training (a row of the table, one seed): (heads, seed, result)."""
    # torch and the models load here, not at the top: --help answers at once.
    import torch

    from experiments.data import make_shapes
    from experiments.models import AttentionClassifier
    from experiments.train import train_classifier

    torch.set_num_threads(args.threads)
    # One data set for every row and seed (the seed varies the model's init and batch order).
    train = make_shapes(args.train_size, "two", seed=10_000)
    test = make_shapes(args.test_size, "two", seed=20_000)
    torch.manual_seed(seed)
    model = AttentionClassifier("rope2d", num_classes=4, dim=heads * HEAD_DIM, num_heads=heads,
                                stem_width=STEM_WIDTH)
    result = train_classifier(model, (train.images, train.labels), (test.images, test.labels),
                              args.epochs, lr=LR, batch_size=BATCH, seed=seed)
    return heads, seed, result


def build_parser() -> argparse.ArgumentParser:
    """The command line (tests/test_readme_commands.py parses the docs' commands with it)."""
    return report.build_parser("heads", __doc__.split("\n")[0], epochs=10, seeds=2,
                               workers=True)


def main(argv: list[str] | None = None) -> dict:
    args = report.parse_args(build_parser(), argv)
    start = time.perf_counter()

    jobs = [(h, seed, args) for h in HEADS for seed in range(args.seeds)]
    accs: dict[int, list[float]] = {h: [] for h in HEADS}
    training = cpu = 0.0
    for h, seed, run in report.run_jobs(run_one, jobs, args.workers):
        report.print_run(_label(h), seed, run.test_acc, run.seconds, width=28,
                         cpu_seconds=run.cpu_seconds)
        accs[h].append(run.test_acc)
        training, cpu = training + run.seconds, cpu + run.cpu_seconds
    rows = [report.summarize(f"heads_{h}", _label(h), range(args.seeds), accs[h], num_heads=h,
                             head_dim=HEAD_DIM) for h in HEADS]

    print(report.format_table(rows, f"Square left of circle × triangle above circle (4 classes), "
                                    f"test accuracy (%), {args.epochs} epochs"))
    result = report.finish(
        "heads", args, rows, seconds=time.perf_counter() - start, cpu_seconds=cpu,
        training_seconds=training,
        settings={"lr": LR, "batch_size": BATCH, "head_dim": HEAD_DIM, "stem_width": STEM_WIDTH,
                  "position": "rope2d"},
    )
    report.bar_plot(rows, args.out / "heads.png", "Two relations, one block with 2D RoPE",
                    chance=0.25)
    return result


if __name__ == "__main__":
    main()
