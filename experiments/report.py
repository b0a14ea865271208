"""What every experiment script shares: its command line, its table, its JSON and its bar plot."""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any


def build_parser(name: str, description: str, *, epochs: int, seeds: int,
                 workers: bool = False) -> argparse.ArgumentParser:
    """The options every experiment takes (:func:`parse_args` parses them).

    ``--epochs``, ``--seeds``, ``--out``, ``--threads`` and the sizes of the generated train and
    test sets; with ``workers``, also ``--workers``: trainings side by side, one process and (by
    default) one thread each.
    """
    p = argparse.ArgumentParser(
        prog=f"scripts/experiments/{name}.py", description=description,
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--epochs", type=int, default=epochs, help="training epochs per run")
    p.add_argument("--seeds", type=int, default=seeds, help="runs per row, seeds 0 … n-1")
    p.add_argument("--out", type=Path, default=Path("outputs/experiments") / name,
                   help="folder for the JSON results and the PNG plots")
    p.add_argument("--threads", type=int, default=min(os.cpu_count() or 1, 8),
                   help="torch CPU threads")
    p.add_argument("--train-size", type=int, default=8000, help="training pictures")
    p.add_argument("--test-size", type=int, default=2000, help="test pictures")
    if workers:
        p.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                       help="trainings run side by side, one process each (with --threads each)")
        p.set_defaults(threads=1)  # one thread per worker: the workers share the cores
    return p


def parse_args(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """``argv`` parsed by an experiment's :func:`build_parser`; torch's threads set and ``--out``
    made."""
    args = parser.parse_args(argv)

    import torch  # here, not at the top: an experiment's --help stays instant

    torch.set_num_threads(max(args.threads, 1))
    args.out.mkdir(parents=True, exist_ok=True)
    return args


def run_jobs(fn: Callable[..., Any], jobs: Sequence[tuple], workers: int) -> Iterator[Any]:
    """``fn(*job)`` for every job, in order, in ``workers`` forked processes (or here, for 1).

    The trainings are independent and a small model uses one core badly, so running them side
    by side, one thread each, is what makes a full table fit in minutes on a small CPU.
    """
    if workers <= 1:
        yield from (fn(*job) for job in jobs)
        return
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
        futures = [pool.submit(fn, *job) for job in jobs]
        yield from (future.result() for future in futures)


def print_run(label: str, seed: int, test_acc: float, seconds: float, width: int = 32,
              cpu_seconds: float | None = None) -> None:
    """One finished training, as it happens: label, seed, test accuracy, time (and CPU time)."""
    cpu = f", {cpu_seconds:.0f} s CPU" if cpu_seconds is not None else ""
    print(f"  {label:{width}s} seed {seed}: {100 * test_acc:5.1f}%  ({seconds:.0f} s{cpu})",
          flush=True)


def summarize(key: str, label: str, seeds: Sequence[int], accs: Sequence[float],
              **extra: Any) -> dict[str, Any]:
    """One row of results: per-seed test accuracy and its mean."""
    return {"key": key, "label": label, "seeds": list(seeds), "test_acc": list(accs),
            "mean": statistics.fmean(accs), **extra}


def format_table(rows: Sequence[dict[str, Any]], title: str) -> str:
    """Mean and per-seed test accuracy, one line per row, in percent."""
    width = max(len(r["label"]) for r in rows)
    n = max(len(r["test_acc"]) for r in rows)
    head = f"{'':{width}}   mean  " + "  ".join(f"seed{s:<2}" for s in range(n))
    lines = [title, head, "-" * len(head)]
    for r in rows:
        seeds = "  ".join(f"{100 * a:6.1f}" for a in r["test_acc"])
        lines.append(f"{r['label']:{width}}  {100 * r['mean']:5.1f}  {seeds}")
    return "\n".join(lines)


def finish(name: str, args: argparse.Namespace, rows: Sequence[dict[str, Any]], *,
           settings: dict[str, Any], seconds: float, cpu_seconds: float,
           training_seconds: float | None = None, **extra: Any) -> dict[str, Any]:
    """Print the time taken, write ``--out/<name>.json`` and return what it holds.

    The JSON records the command-line settings every experiment has (sizes, epochs, seeds,
    threads, workers) around the experiment's own ``settings``, then ``extra`` results, the rows
    and the times.
    """
    training = ""
    if training_seconds is not None:
        training = f", {training_seconds:.0f} s of training in {args.workers} worker(s)"
    print(f"total {seconds:.0f} s wall{training}, {cpu_seconds:.0f} s of CPU")
    config = {"epochs": args.epochs, "seeds": args.seeds, "train_size": args.train_size,
              "test_size": args.test_size, **settings, "threads": args.threads}
    if "workers" in args:
        config["workers"] = args.workers
    times = {"seconds": seconds, "training_seconds": training_seconds, "cpu_seconds": cpu_seconds}
    result = {"experiment": name, "config": config, **extra, "rows": list(rows),
              **{key: value for key, value in times.items() if value is not None}}
    write_json(result, args.out / f"{name}.json")
    return result


def write_json(obj: dict[str, Any], path: Path) -> Path:
    path.write_text(json.dumps(obj, indent=2) + "\n")
    return path


def bar_plot(rows: Sequence[dict[str, Any]], path: Path, title: str, chance: float) -> Path:
    """Horizontal bars of the mean test accuracy, a dot per seed, a dashed line at chance."""
    from matplotlib.figure import Figure  # no pyplot: no global backend or figure state

    fig = Figure(figsize=(7.5, 0.5 * len(rows) + 1.2))
    ax = fig.subplots()
    ys = list(range(len(rows)))[::-1]
    ax.barh(ys, [100 * r["mean"] for r in rows], color="#9ab", height=0.6)
    for y, r in zip(ys, rows, strict=True):
        ax.plot([100 * a for a in r["test_acc"]], [y] * len(r["test_acc"]), "k.", ms=5)
    ax.axvline(100 * chance, color="grey", ls="--", lw=1)
    ax.set_yticks(ys, [r["label"] for r in rows])
    ax.set(xlim=(0, 100), xlabel="test accuracy (%)", title=title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return path
