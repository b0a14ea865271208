"""Two relations at once: how many attention heads does one block need?

    python scripts/experiments/heads.py                    # 8,000 / 2,000, 10 epochs, 2 seeds
    python scripts/experiments/heads.py --epochs 2 --seeds 1

Each picture holds a square, a circle and a triangle; the label answers two questions at once,
"is the square left of the circle?" and "is the triangle above the circle?" (4 classes). The
model is a conv stem + one attention block with 2D RoPE, with 1, 2, 4 or 8 heads of width 4
(model width 4 × heads). One head has one softmax, so it must spread one attention pattern over
both questions; separate heads can each look at one pair.

Writes ``heads.json`` and ``heads.png`` into ``--out``.
"""

from __future__ import annotations

import time

from vitbert.experiments.report import (
    bar_plot,
    format_table,
    parser,
    print_run,
    setup,
    summarize,
    write_json,
)

HEADS, HEAD_DIM, STEM_WIDTH = (1, 2, 4, 8), 4, 4
LR, BATCH = 1e-3, 128


def main(argv: list[str] | None = None) -> dict:
    p = parser("heads", __doc__.split("\n")[0], epochs=10, seeds=2)
    args = p.parse_args(argv)
    # torch and the models load after the arguments: --help answers at once.
    import torch

    from vitbert.experiments.data import make_shapes
    from vitbert.experiments.models import AttentionClassifier
    from vitbert.experiments.train import train_classifier

    setup(args)
    start = time.perf_counter()

    train = make_shapes(args.train_size, "two", seed=10_000)
    test = make_shapes(args.test_size, "two", seed=20_000)

    rows = []
    for h in HEADS:
        label = f"{h} head{'s' if h > 1 else ''} × {HEAD_DIM} (width {h * HEAD_DIM})"
        accs = []
        for seed in range(args.seeds):
            torch.manual_seed(seed)
            model = AttentionClassifier("rope2d", num_classes=4, dim=h * HEAD_DIM, num_heads=h,
                                        stem_width=STEM_WIDTH)
            result = train_classifier(model, (train.images, train.labels),
                                      (test.images, test.labels), args.epochs, lr=LR,
                                      batch_size=BATCH, seed=seed)
            accs.append(result.test_acc)
            print_run(label, seed, result.test_acc, result.seconds, width=28)
        rows.append(summarize(f"heads_{h}", label, range(args.seeds), accs, num_heads=h,
                              head_dim=HEAD_DIM))

    total = time.perf_counter() - start
    print(format_table(rows, f"Square left of circle × triangle above circle (4 classes), "
                             f"test accuracy (%), {args.epochs} epochs"))
    cpu = time.process_time()
    print(f"total {total:.0f} s wall, {cpu:.0f} s CPU")
    result = {
        "experiment": "heads",
        "config": {"epochs": args.epochs, "seeds": args.seeds, "train_size": args.train_size,
                   "test_size": args.test_size, "lr": LR, "batch_size": BATCH,
                   "head_dim": HEAD_DIM, "stem_width": STEM_WIDTH, "position": "rope2d",
                   "threads": args.threads},
        "rows": rows,
        "seconds": total,
        "cpu_seconds": cpu,
    }
    write_json(result, args.out / "heads.json")
    bar_plot(rows, args.out / "heads.png", "Two relations, one block with 2D RoPE", chance=0.25)
    return result


if __name__ == "__main__":
    main()
