"""No code runs on load: every way the project reads a checkpoint (the library, ``train.py``'s
subcommands and ``init_from``, ``scripts/predict.py``, ``export.py``, ``demo.py``) refuses one whose
pickle would run code, with an error, and the code did not run.

The hostile file is a checkpoint-shaped dict holding one object whose unpickling calls
``os.mkdir(marker)``; a loader that ran it would leave the marker folder behind.
"""

from __future__ import annotations

import os
import pickle
import sys
from pathlib import Path

import pytest
import torch
from PIL import Image

sys.path.insert(0, str(Path(__file__).parent / "lit"))
from helpers import TINY_MODEL, load_script
from tiny_run import tiny_shapes

from vitbert.cli import main
from vitbert.io import CheckpointError, export, load_model, read_checkpoint
from vitbert.lit.module import MaskedLMModule
from vitbert.predict import FillMask


class _RunsCode:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return os.mkdir, (str(self.marker),)


@pytest.fixture(scope="module")
def hostile(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("hostile")
    marker, path = root / "code-ran", root / "hostile.ckpt"
    torch.save({"state_dict": {}, "hyper_parameters": {"net": {}},
                "payload": _RunsCode(marker)}, path)
    assert not marker.exists()
    with pytest.raises(pickle.UnpicklingError):  # the refusal below is weights_only's doing
        torch.load(path, weights_only=True)
    return path, marker


@pytest.fixture(scope="module")
def shapes(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("shapes")  # one generated data set for the module's runs


def _cli(tmp_path: Path, shapes: Path, *args: str) -> list[str]:
    return [*args, *TINY_MODEL, *tiny_shapes(shapes, num_train=64),
            "--trainer.accelerator", "cpu", "--trainer.max_steps", "1",
            "--trainer.enable_progress_bar", "false", "--checkpoint.dirpath",
            str(tmp_path / "checkpoints")]


LIBRARY_LOADS = {
    "read_checkpoint": read_checkpoint,
    "load_model": load_model,
    "FillMask.from_checkpoint": FillMask.from_checkpoint,
    "export": lambda path: export(path, path.parent / "exported"),
}


@pytest.mark.parametrize("name", list(LIBRARY_LOADS))
def test_library_loads_refuse_code(hostile, name):
    path, marker = hostile
    with pytest.raises(CheckpointError, match="refused, its pickle holds more than tensors"):
        LIBRARY_LOADS[name](path)
    assert not marker.exists()


def test_load_from_checkpoint_refuses_code(hostile):
    path, marker = hostile
    with pytest.raises(pickle.UnpicklingError, match="Weights only load failed"):
        MaskedLMModule.load_from_checkpoint(path, weights_only=True)
    assert not marker.exists()


@pytest.mark.parametrize("subcommand", ["fit", "validate", "test", "predict"])
def test_cli_ckpt_path_refuses_code(hostile, shapes, tmp_path, monkeypatch, capsys,
                                    subcommand):
    path, marker = hostile
    monkeypatch.chdir(tmp_path)
    # torch's default when weights_only is left unset becomes False: only an explicit True holds.
    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    with pytest.raises(SystemExit) as stopped:
        main(_cli(tmp_path, shapes, subcommand, "--ckpt_path", str(path)))
    assert stopped.value.code == 2
    assert "hostile.ckpt: refused, its pickle holds more than tensors" in capsys.readouterr().err
    assert not marker.exists()


def test_fine_tuning_init_from_refuses_code(hostile, shapes, tmp_path, monkeypatch, capsys):
    path, marker = hostile
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stopped:
        main(_cli(tmp_path, shapes, "fit", "--model.init_from", str(path)))
    assert stopped.value.code == 2
    assert "hostile.ckpt: refused, its pickle holds more than tensors" in capsys.readouterr().err
    assert not marker.exists()


@pytest.mark.parametrize("script", ["predict", "export", "demo"])
def test_scripts_refuse_code(hostile, tmp_path, capsys, script):
    path, marker = hostile
    photo = tmp_path / "photo.png"
    Image.new("RGB", (8, 8)).save(photo)
    argv = {"predict": ["--ckpt", str(path), "--image", str(photo), "--text", "a [MASK] ."],
            "export": ["--ckpt", str(path), "--out", str(tmp_path / "out")],
            "demo": ["--ckpt", str(path)]}[script]
    module = load_script(script)
    # demo: run() is main() without its SIGTERM handler and temp folder, which the test keeps.
    status = module.run(module.parse_args(argv)) if script == "demo" else module.main(argv)
    assert status == 2
    assert "refused, its pickle holds more than tensors" in capsys.readouterr().err
    assert not marker.exists()
