"""Each mistake a new user makes with the training scripts ends in exit status 2 and one line that
names what is wrong and the flag that fixes it (issue 14), through the real entry points:
``vitbert.cli.main`` in-process, and ``scripts/train.py`` / ``scripts/export.py`` as subprocesses.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import huggingface_hub
import pytest
import torch
from helpers import write_tiny_bert

from vitbert.cli import main

REPO = Path(__file__).resolve().parents[1]
FLICKR30K = str(REPO / "configs" / "flickr30k.yaml")
SMALL_VIT = [  # the Flickr30k config's image tower, shrunk: the mistakes do not depend on its size
    "--model.net.image.image_size", "32", "--model.net.image.dim", "32",
    "--model.net.image.depth", "1", "--model.net.image.num_heads", "2",
]


@pytest.fixture
def flickr30k(tmp_path) -> list[str]:
    """The Flickr30k config with a tiny BERT in bert-base-uncased's place: the hub is offline
    here, and each mistake below must be the one reported, not the missing BERT."""
    write_tiny_bert(tmp_path / "bert", positions=64)
    return ["--config", FLICKR30K, "--model.net.text.pretrained", str(tmp_path / "bert")]


# The data mistakes on any machine: the config asks for a GPU, which is its own mistake on a CPU.
ON_THE_CPU = ["--trainer.accelerator", "cpu", "--trainer.devices", "1"]


def the_one_line(capsys, args: list[str]) -> str:
    """Run train.py's main on ``args``: it must exit 2 with a single 'error: ...' line."""
    with pytest.raises(SystemExit) as exited:
        main(args)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, err
    return lines[0]


def test_flickr30k_config_without_the_data(tmp_path, monkeypatch, capsys, flickr30k):
    monkeypatch.chdir(tmp_path)  # no data/flickr30k here
    line = the_one_line(capsys, ["fit", *flickr30k, *ON_THE_CPU])
    assert line.startswith("error: data root data/flickr30k is not a folder")
    assert "--data.source.init_args.root" in line


def test_a_data_root_that_does_not_exist(tmp_path, monkeypatch, capsys, flickr30k):
    monkeypatch.chdir(tmp_path)
    missing = tmp_path / "nonexistent"
    line = the_one_line(capsys, ["fit", *flickr30k, *ON_THE_CPU,
                                 "--data.source.init_args.root", str(missing)])
    assert line.startswith(f"error: data root {missing} is not a folder")
    assert "--data.source.init_args.root" in line


def test_an_empty_data_folder(tmp_path, monkeypatch, capsys, flickr30k):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "empty").mkdir()
    line = the_one_line(capsys, ["fit", *flickr30k, *ON_THE_CPU,
                                 "--data.source.init_args.root", str(tmp_path / "empty")])
    assert line.startswith(f"error: {tmp_path / 'empty'}: no Flickr30k annotation file found")
    assert "dataset_flickr30k.json" in line  # what it looked for


@pytest.mark.skipif(torch.cuda.is_available(), reason="the mistake is a GPU config without a GPU")
def test_the_gpu_config_on_a_cpu_machine(tmp_path, monkeypatch, capsys, karpathy_flickr,
                                         flickr30k):
    monkeypatch.chdir(tmp_path)
    line = the_one_line(capsys, [
        "fit", *flickr30k, *SMALL_VIT, "--model.net.image.pretrained", "null",
        "--data.source.init_args.root", str(karpathy_flickr),
        "--data.source.init_args.cache_dir", str(tmp_path / "cache"),
        "--data.num_workers", "0"])
    assert "no GPU" in line and line.endswith(
        "add --trainer.accelerator cpu (and --trainer.devices 1) to run on the CPU")


def test_pretrained_weights_offline(tmp_path, monkeypatch, capsys):
    """timm's name for the image tower, no network, nothing cached: the flag to give a file."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    line = the_one_line(capsys, [
        "fit", "--model.net.image.kind", "vit", "--model.net.image.patch_size", "16",
        "--model.net.image.class_token", "true", "--model.net.image.pool", "cls",
        "--model.net.image.dim", "32", "--model.net.image.depth", "1",
         # the shapes levers' hue-apart tower needs the conv stem
        "--model.net.image.num_heads", "2",
        "--model.net.image.pretrained", "vit_tiny_patch16_224",
        "--data.source.init_args.root", str(tmp_path / "shapes"),
        "--data.source.init_args.num_train", "64", "--data.source.init_args.num_val", "16",
        "--data.source.init_args.num_test", "16", "--data.num_workers", "0",
        "--trainer.accelerator", "cpu", "--trainer.max_steps", "1"])
    assert line.startswith("error: cannot download the pretrained image weights "
                           "'vit_tiny_patch16_224'")
    assert "--model.net.image.pretrained /path/to/weights.safetensors" in line


def run_script(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def test_a_config_given_as_the_checkpoint():
    """Through scripts/train.py itself: refused before any data or model is built."""
    done = run_script("scripts/train.py", "validate", "--ckpt_path", "configs/default.yaml",
                      cwd=REPO)
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "error: --ckpt_path configs/default.yaml: this is a config, not a checkpoint; "
        "did you mean --config configs/default.yaml?")


def test_export_of_a_config(tmp_path):
    done = run_script(str(REPO / "scripts" / "export.py"), "--ckpt",
                      str(REPO / "configs" / "default.yaml"), "--out", str(tmp_path / "out"),
                      cwd=tmp_path)
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("error: ") and "this is a config, not a checkpoint" in line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("flags", "says"), [
    (["--model.objectives+={\"class_path\": \"vitbert.lit.objectives.MaskedLM\"}"],
     "lists one objective twice"),
    (["--model.net.itc_dim", "0"], "--model.net.itc_dim"),
    (["--model.freeze_image.part", "backbone"], "image.kind: hybrid"),
    (["--model.freeze_image.steps", "-1"], "model.freeze_image.steps -1: give a number"),
])
def test_objectives_and_towers_that_cannot_work_say_so_in_one_line(karpathy_flickr, tmp_path,
                                                                    monkeypatch, capsys, flickr30k,
                                                                    flags, says):
    """The Flickr30k config's objectives with one listed twice, its contrastive objective with no
    contrastive heads, a frozen CNN on a ViT, a negative number of frozen steps: a one-line
    error naming the fix, not a traceback."""
    monkeypatch.chdir(tmp_path)
    line = the_one_line(capsys, ["fit", *flickr30k, *SMALL_VIT,
                                 "--model.net.image.pretrained", "null",
                                 "--data.source.init_args.root", str(karpathy_flickr),
                                 "--data.min_frequency", "1", *flags])
    assert says in line


def test_a_missing_weight_file_is_named_with_its_fix(tmp_path, monkeypatch):
    """model.net.image.pretrained: the file `make weights` writes says to run it; any other missing
    file says what else may go there; a file that exists, a timm name or null pass."""
    from vitbert.cli_errors import MAKE_WEIGHTS_FILE, MissingWeightsError, check_image_weights

    monkeypatch.chdir(tmp_path)  # a checkout where `make weights` has not run
    with pytest.raises(MissingWeightsError, match="`make weights`"):
        check_image_weights(str(MAKE_WEIGHTS_FILE))
    with pytest.raises(MissingWeightsError, match=r"no such file; pass a weight file that exists"):
        check_image_weights(str(tmp_path / "tower.safetensors"))
    present = tmp_path / "present.safetensors"
    present.touch()
    for fine in (str(present), "vit_base_patch16_224.augreg_in21k", None):
        check_image_weights(fine)
