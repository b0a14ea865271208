"""What the 1/√d in attention is for: softmax saturation at wide heads, measured and trained.

    python scripts/experiments/scale.py                    # gates + toy model, 5 epochs, 2 seeds
    python scripts/experiments/scale.py --epochs 2 --seeds 1

Part 1: for unit-variance q and 64 keys, the largest softmax gate at head width
d ∈ {1, 4, 16, 64, 256}, with and without ÷√d. Without it the score spread grows as √d and one
key takes nearly all the weight; with it the largest gate stays where it was at d = 1.
Part 2: a toy key–value recall model with one head of width 256 (the project's
``Attention(scale=True / False)``), trained both ways; the table gives the test accuracy.

Writes ``scale.json`` and ``scale.png`` into ``--out``.
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
from experiments.scaling import RecallModel, make_recall, max_gate
from experiments.train import train_classifier

WIDTHS = (1, 4, 16, 64, 256)
NUM_KEYS, TRIALS = 64, 2000
TOY_DIM, PAIRS, SYMBOLS = 256, 8, 16
LR, BATCH = 1e-3, 128


def gate_table(gates: list[dict]) -> str:
    lines = [f"Largest of {NUM_KEYS} softmax gates, q, k ~ N(0, I_d), mean of {TRIALS} draws",
             f"{'d':>5}  {'q·k':>7}  {'q·k/√d':>7}", "-" * 23]
    lines += [f"{g['d']:>5}  {g['unscaled']:7.3f}  {g['scaled']:7.3f}" for g in gates]
    return "\n".join(lines)


def plot(gates: list[dict], rows: list[dict], path) -> None:
    from matplotlib.figure import Figure  # no pyplot: no global backend or figure state
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=(10, 3.8))
    ax_gate, ax_loss = fig.subplots(1, 2)
    ds = [g["d"] for g in gates]
    ax_gate.plot(ds, [g["unscaled"] for g in gates], "o-", label="q·k")
    ax_gate.plot(ds, [g["scaled"] for g in gates], "o-", label="q·k / √d")
    ax_gate.set(xscale="log", ylim=(0, 1), xlabel="head width d", ylabel="mean max gate",
                title=f"largest of {NUM_KEYS} softmax gates")
    ax_gate.set_xticks(ds, [str(d) for d in ds])
    ax_gate.legend()
    for row, colour in zip(rows, ("C0", "C1"), strict=True):
        for seed, losses in zip(row["seeds"], row["train_loss"], strict=True):
            ax_loss.plot(range(1, len(losses) + 1), losses, color=colour, marker=".",
                         label=row["label"] if seed == 0 else None)
    ax_loss.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax_loss.set(yscale="log", xlabel="epoch", ylabel="train loss (mean over epoch)",
                title=f"key–value recall, one head of width {TOY_DIM}")
    ax_loss.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def build_parser() -> argparse.ArgumentParser:
    """The command line (tests/test_readme_commands.py parses the docs' commands with it)."""
    return report.build_parser("scale", __doc__.split("\n")[0], epochs=5, seeds=2)


def main(argv: list[str] | None = None) -> dict:
    args = report.parse_args(build_parser(), argv)
    start = time.perf_counter()

    gates = [{"d": d, "unscaled": max_gate(d, False, NUM_KEYS, TRIALS),
              "scaled": max_gate(d, True, NUM_KEYS, TRIALS)} for d in WIDTHS]
    print(gate_table(gates))

    train = make_recall(args.train_size, PAIRS, SYMBOLS, seed=10_000)
    test = make_recall(args.test_size, PAIRS, SYMBOLS, seed=20_000)
    rows = []
    for key, label, scale in (("unscaled", "q·k (no scale)", False),
                              ("scaled", "q·k / √d", True)):
        accs, losses = [], []
        for seed in range(args.seeds):
            torch.manual_seed(seed)
            model = RecallModel(TOY_DIM, SYMBOLS, scale=scale)
            result = train_classifier(model, train, test, args.epochs, lr=LR, batch_size=BATCH,
                                      seed=seed)
            accs.append(result.test_acc)
            losses.append(result.train_loss)
            report.print_run(label, seed, result.test_acc, result.seconds, width=16)
        rows.append(report.summarize(key, label, range(args.seeds), accs, train_loss=losses))
    print(report.format_table(rows, f"Key–value recall at d = {TOY_DIM}, test accuracy (%), "
                                    f"{args.epochs} epochs (chance {100 / SYMBOLS:.1f}%)"))
    result = report.finish(
        "scale", args, rows, seconds=time.perf_counter() - start, cpu_seconds=time.process_time(),
        settings={"num_keys": NUM_KEYS, "trials": TRIALS, "toy_dim": TOY_DIM, "pairs": PAIRS,
                  "symbols": SYMBOLS, "lr": LR, "batch_size": BATCH},
        gates=gates,
    )
    plot(gates, rows, args.out / "scale.png")
    return result


if __name__ == "__main__":
    main()
