"""Is the square left of the circle? Which models can tell, and which position schemes help.

    python scripts/experiments/position.py                 # 8,000 / 2,000, 10 epochs, 3 seeds
    python scripts/experiments/position.py --epochs 2 --seeds 1

Rows: a CNN whose global average pool is its last step (its strided convs relate the two shapes
before the pool: can tell); the same CNN with the global pool early, right after its first conv
(a bag of 3×3 features: ≈ chance); a conv stem + one attention block with no position
(permutation invariant over tokens; the stem pads only the picture, with its background, so no
token knows where it is), with learned absolute position, with the relative-offset bias at the
default lr and with 10× lr on the bias table, and with 2D RoPE.
Adam moves a weight by about lr per step, so at the default lr the bias table can only reach
about ``lr × steps``; the second plot shows it (max |w| and ‖Δw‖/‖w‖ per step, from
:class:`experiments.stats.ParameterStatsCallback`).

Writes ``position.json``, ``position.png`` and ``position_bias_stats.png`` into ``--out``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

# The experiments' shared code is the top-level `experiments` package, not part of vitbert.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from experiments import report
from experiments.data import make_shapes
from experiments.models import CNN, AttentionClassifier
from experiments.stats import ParameterStatsCallback, plot_parameter_stats
from experiments.train import RunResult, train_classifier

# Small on purpose: the full run (21 trainings) must fit in 15 minutes on a 2-core CPU.
DIM, HEADS, STEM_WIDTH, CNN_WIDTH = 32, 2, 4, 4
LR, BATCH = 1e-3, 256
BIAS_GROUP = "bias.table"  # the RelativePositionBias2D parameter, by name suffix


def attention(position: str):
    return lambda: AttentionClassifier(position, num_classes=2, dim=DIM, num_heads=HEADS,
                                       stem_width=STEM_WIDTH)


# key, label, model factory, learning-rate multipliers by parameter-name suffix
ROWS = [
    ("cnn_pool_end", "CNN, global pool at the end", lambda: CNN("end", 2, CNN_WIDTH), None),
    ("cnn_pool_early", "same CNN, global pool early", lambda: CNN("early", 2, CNN_WIDTH), None),
    ("none", "stem + block, no position", attention("none"), None),
    ("learned", "+ learned absolute", attention("learned"), None),
    ("bias", "+ offset bias, lr", attention("bias"), {BIAS_GROUP: 1.0}),
    ("bias_10x", "+ offset bias, 10x lr on bias", attention("bias"), {BIAS_GROUP: 10.0}),
    ("rope2d", "+ 2D RoPE", attention("rope2d"), None),
]


def run_one(row: int, seed: int, args) -> tuple[int, int, RunResult, list | None]:
    """One training (a row of the table, one seed): (row, seed, result, stats history)."""
    torch.set_num_threads(args.threads)
    # One data set for every row and seed (the seed varies the model's init and batch order).
    train = make_shapes(args.train_size, "left", seed=10_000)
    test = make_shapes(args.test_size, "left", seed=20_000)
    _, _, build, lr_mult = ROWS[row]
    torch.manual_seed(seed)
    model = build()
    stats = ParameterStatsCallback(keep_history=True) if lr_mult and seed == 0 else None
    result = train_classifier(
        model, (train.images, train.labels), (test.images, test.labels), args.epochs,
        lr=LR, batch_size=BATCH, seed=seed, lr_mult=lr_mult, stats=stats,
    )
    return row, seed, result, stats.history if stats else None


def build_parser() -> argparse.ArgumentParser:
    """The command line (tests/test_readme_commands.py parses the docs' commands with it)."""
    return report.build_parser("position", __doc__.split("\n")[0], epochs=10, seeds=3,
                               workers=True)


def main(argv: list[str] | None = None) -> dict:
    args = report.parse_args(build_parser(), argv)
    start = time.perf_counter()

    jobs = [(row, seed, args) for row in range(len(ROWS)) for seed in range(args.seeds)]
    results = {}
    for row, seed, run, history in report.run_jobs(run_one, jobs, args.workers):
        report.print_run(ROWS[row][1], seed, run.test_acc, run.seconds,
                         cpu_seconds=run.cpu_seconds)
        results[row, seed] = (run.test_acc, run.seconds, run.cpu_seconds, history)

    rows, histories = [], {}
    for row, (key, label, _, lr_mult) in enumerate(ROWS):
        runs = [results[row, seed] for seed in range(args.seeds)]
        extra = {"seconds": sum(run[1] for run in runs),
                 "cpu_seconds": sum(run[2] for run in runs)}
        if lr_mult:
            history = runs[0][3]
            histories[f"{label.removeprefix('+ ')} (seed 0)"] = history
            extra |= {"lr_mult": lr_mult,
                      "bias_table_max_abs_seed0": history[-1][f"params/{BIAS_GROUP}/max_abs"]}
        accs = [run[0] for run in runs]
        rows.append(report.summarize(key, label, range(args.seeds), accs, **extra))

    print(report.format_table(rows, f"Is the square left of the circle? test accuracy (%), "
                                    f"{args.train_size} train / {args.test_size} test, "
                                    f"{args.epochs} epochs"))
    result = report.finish(
        "position", args, rows, seconds=time.perf_counter() - start,
        cpu_seconds=sum(r["cpu_seconds"] for r in rows),
        training_seconds=sum(r["seconds"] for r in rows),
        settings={"lr": LR, "batch_size": BATCH, "dim": DIM, "num_heads": HEADS,
                  "stem_width": STEM_WIDTH, "cnn_width": CNN_WIDTH},
    )
    report.bar_plot(rows, args.out / "position.png", "Is the square left of the circle?",
                    chance=0.5)
    plot_parameter_stats(histories, BIAS_GROUP, args.out / "position_bias_stats.png",
                         title="Relative-offset bias table: default lr vs 10x lr (Adam)")
    return result


if __name__ == "__main__":
    main()
