"""Is the square left of the circle? Which models can tell, and which position schemes help.

    python scripts/experiments/position.py                 # 8,000 / 2,000, 10 epochs, 3 seeds
    python scripts/experiments/position.py --epochs 2 --seeds 1

Rows: a CNN that pools at the end (its features see 7 px and the pool forgets where they were:
≈ chance); a CNN that pools early (the receptive field covers the picture: can tell); a conv stem
+ one attention block with no position (permutation invariant over tokens, yet above chance:
a token whose 8-px receptive field covers both shapes sees their order, and the stem's zero
padding marks the tokens at the picture's edges), with learned absolute position, with the
relative-offset bias at the default lr and with 10× lr on the bias table, and with 2D RoPE.
Adam moves a weight by about lr per step, so at the default lr the bias table can only reach
about ``lr × steps``; the second plot shows it (max |w| and ‖Δw‖/‖w‖ per step, from
:class:`vitbert.lit.callbacks.ParameterStatsCallback`).

Writes ``position.json``, ``position.png`` and ``position_bias_stats.png`` into ``--out``.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from concurrent.futures import ProcessPoolExecutor

import torch

from vitbert.experiments.data import make_shapes
from vitbert.experiments.models import AttentionClassifier, CNNPoolEarly, CNNPoolEnd
from vitbert.experiments.report import (
    bar_plot,
    format_table,
    parser,
    print_run,
    setup,
    summarize,
    write_json,
)
from vitbert.experiments.train import train_classifier
from vitbert.lit.callbacks import ParameterStatsCallback, plot_parameter_stats

# Small on purpose: the full run (21 trainings) must fit in 15 minutes on a 2-core CPU.
DIM, HEADS, STEM_WIDTH, CNN_WIDTH = 32, 2, 4, 4
LR, BATCH = 1e-3, 256
BIAS_GROUP = "bias.table"  # the RelativePositionBias2D parameter, by name suffix


def attention(position: str):
    return lambda: AttentionClassifier(position, num_classes=2, dim=DIM, num_heads=HEADS,
                                       stem_width=STEM_WIDTH)


# key, label, model factory, learning-rate multipliers by parameter-name suffix
ROWS = [
    ("cnn_pool_end", "CNN, pool at end", lambda: CNNPoolEnd(2, CNN_WIDTH), None),
    ("cnn_pool_early", "CNN, pool early", lambda: CNNPoolEarly(2, CNN_WIDTH), None),
    ("none", "stem + block, no position", attention("none"), None),
    ("learned", "+ learned absolute", attention("learned"), None),
    ("bias", "+ offset bias, lr", attention("bias"), {BIAS_GROUP: 1.0}),
    ("bias_10x", "+ offset bias, 10x lr on bias", attention("bias"), {BIAS_GROUP: 10.0}),
    ("rope2d", "+ 2D RoPE", attention("rope2d"), None),
]


def run_one(row: int, seed: int, args) -> tuple[int, int, float, float, list | None]:
    """One training (a row of the table, one seed): (row, seed, test accuracy, seconds, stats)."""
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
    return row, seed, result.test_acc, result.seconds, stats.history if stats else None


def main(argv: list[str] | None = None) -> dict:
    p = parser("position", __doc__.split("\n")[0], epochs=10, seeds=3)
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                   help="trainings run side by side, one process each (with --threads each)")
    p.set_defaults(threads=1)  # one thread per worker: the workers share the cores
    args = p.parse_args(argv)
    setup(args)
    start = time.perf_counter()

    # The 7 × seeds trainings are independent: small models use one core badly, so running them
    # side by side, one thread each, is what makes the full table fit in minutes.
    jobs = [(row, seed) for row in range(len(ROWS)) for seed in range(args.seeds)]
    results: dict[tuple[int, int], tuple[float, float, list | None]] = {}
    if args.workers > 1:
        context = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(args.workers, mp_context=context) as pool:
            futures = [pool.submit(run_one, row, seed, args) for row, seed in jobs]
            outcomes = (future.result() for future in futures)
            results = _collect(outcomes)
    else:
        results = _collect(run_one(row, seed, args) for row, seed in jobs)

    rows, histories = [], {}
    for row, (key, label, _, lr_mult) in enumerate(ROWS):
        runs = [results[row, seed] for seed in range(args.seeds)]
        extra = {"seconds": sum(seconds for _, seconds, _ in runs)}
        if lr_mult:
            history = runs[0][2]
            histories[f"{label.removeprefix('+ ')} (seed 0)"] = history
            extra |= {"lr_mult": lr_mult,
                      "bias_table_max_abs_seed0": history[-1][f"params/{BIAS_GROUP}/max_abs"]}
        accs = [acc for acc, _, _ in runs]
        rows.append(summarize(key, label, range(args.seeds), accs, **extra))

    total = time.perf_counter() - start
    title = (f"Is the square left of the circle? test accuracy (%), {args.train_size} train / "
             f"{args.test_size} test, {args.epochs} epochs")
    print(format_table(rows, title))
    cpu = sum(r["seconds"] for r in rows)
    print(f"total {total:.0f} s wall, {cpu:.0f} s of training in {args.workers} worker(s)")
    result = {
        "experiment": "position",
        "config": {"epochs": args.epochs, "seeds": args.seeds, "train_size": args.train_size,
                   "test_size": args.test_size, "lr": LR, "batch_size": BATCH, "dim": DIM,
                   "num_heads": HEADS, "stem_width": STEM_WIDTH, "cnn_width": CNN_WIDTH,
                   "threads": args.threads, "workers": args.workers},
        "rows": rows,
        "seconds": total,
        "training_seconds": cpu,
    }
    write_json(result, args.out / "position.json")
    bar_plot(rows, args.out / "position.png", "Is the square left of the circle?", chance=0.5)
    plot_parameter_stats(histories, BIAS_GROUP, args.out / "position_bias_stats.png",
                         title="Relative-offset bias table: default lr vs 10x lr (Adam)")
    return result


def _collect(outcomes) -> dict[tuple[int, int], tuple[float, float, list | None]]:
    results = {}
    for row, seed, acc, seconds, history in outcomes:
        print_run(ROWS[row][1], seed, acc, seconds)
        results[row, seed] = (acc, seconds, history)
    return results


if __name__ == "__main__":
    main()
