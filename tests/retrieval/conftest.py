"""Models that can search, trained once per session, and folders of photos to search.

``searcher``: one step of ``scripts/train.py fit`` with the contrastive heads on
(``--model.net.itc_dim``; ``Contrastive`` in ``--model.objectives``), the tiny sizes of
tests/conftest.py, and the same model exported.
One step teaches nothing: the tests that need a ranking they can predict plant it
(:func:`planted`); the others compare with the model's own scores.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers import objectives
from PIL import Image
from retrieval_photos import COLOURS, plain_colour


@dataclass
class Searcher:
    ckpt: Path  # a .ckpt with the contrastive heads
    exported: Path  # the same model exported
    no_itc: Path  # the session's tiny model, trained without the contrastive heads


@pytest.fixture(scope="session")
def searcher(trained, tiny_cli_args, tmp_path_factory) -> Searcher:
    from vitbert.cli import main
    from vitbert.io import export

    root = tmp_path_factory.mktemp("searcher")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)
        main(["fit", "--trainer.max_steps", "1", "--trainer.limit_val_batches", "0",
              "--checkpoint.monitor", "null", "--checkpoint.dirpath", str(root / "ckpt"),
              "--model.net.itc_dim", "16",
              *objectives("itc", "words", "captions", "mlm"), *tiny_cli_args])
    ckpt = root / "ckpt" / "last.ckpt"
    return Searcher(ckpt, export(ckpt, root / "exported"), trained.exported)


@pytest.fixture
def colour_folder(tmp_path) -> Path:
    """A folder with one photo per colour of :data:`COLOURS` (``red.png`` ...)."""
    folder = tmp_path / "photos"
    folder.mkdir()
    for colour in COLOURS:
        Image.fromarray(plain_colour(colour)).save(folder / f"{colour}.png")
    return folder
