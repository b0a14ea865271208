"""Fixtures built from the session's tiny trained model (``trained``, in tests/conftest.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch


@pytest.fixture(scope="session")
def fill_mask(trained):
    from vitbert import FillMask

    return FillMask.from_checkpoint(trained.ckpt, device="cpu")


@pytest.fixture
def no_tokenizer_ckpt(trained, tmp_path) -> Path:
    """The trained checkpoint with its tokenizer taken out."""
    from vitbert.io import TOKENIZER_KEY

    checkpoint = torch.load(trained.ckpt, map_location="cpu", weights_only=True)
    del checkpoint[TOKENIZER_KEY]
    path = tmp_path / "no_tokenizer.ckpt"
    torch.save(checkpoint, path)
    return path


@pytest.fixture
def no_tokenizer_folder(trained, tmp_path) -> Path:
    """The exported folder without its tokenizer.json."""
    folder = tmp_path / "no_tokenizer"
    shutil.copytree(trained.exported, folder)
    (folder / "tokenizer.json").unlink()
    return folder


@pytest.fixture
def not_a_checkpoint(tmp_path) -> Path:
    path = tmp_path / "notes.ckpt"
    path.write_text("these are not weights\n")
    return path


@pytest.fixture
def unreadable_image(tmp_path) -> Path:
    path = tmp_path / "broken.png"
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + b"not really a png" * 4)
    return path
