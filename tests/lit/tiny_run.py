"""Command-line pieces for tiny training runs, shared by the training and DDP tests."""

from __future__ import annotations

from pathlib import Path

TINY_MODEL = [
    "--model.net.image.dim", "32", "--model.net.image.depth", "1",
    "--model.net.image.num_heads", "2", "--model.net.image.stem_hidden_dim", "8",
    "--model.net.text.dim", "32", "--model.net.text.depth", "1", "--model.net.text.num_heads", "2",
]


def tiny_shapes(root: Path, num_train: int = 512) -> list[str]:
    """The generated shapes data, small: 64 validation and test pictures, batches of 64."""
    return [
        "--data.source.init_args.root", str(root),
        "--data.source.init_args.num_train", str(num_train),
        "--data.source.init_args.num_val", "64", "--data.source.init_args.num_test", "64",
        "--data.batch_size", "64", "--data.num_workers", "0",
    ]
