"""Pretraining the image tower on fractals, through ``scripts/pretrain_tower.py``'s CLI: a few
steps write a tower that a caption model loads with every weight matched, for the pure, hybrid
and conv-stem towers; its mistakes end in one line."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from vitbert.io import initialize
from vitbert.io.timm import load_image_weights
from vitbert.models import VitBert, VitBertConfig
from vitbert.models.config import ImageTowerConfig
from vitbert.pretraining.cli import main as pretrain
from vitbert.pretraining.module import TowerPretraining

REPO = Path(__file__).resolve().parents[2]
TOWER_CONFIG = REPO / "configs" / "tower" / "fractal_small.yaml"
FLICKR_SMALL = REPO / "configs" / "flickr_small.yaml"
TINY_SET = ["--data.num_classes", "4", "--data.train_instances", "2", "--data.val_instances", "1",
            "--data.batch_size", "4", "--data.num_workers", "0", "--data.prepare_workers", "0",
            "--trainer.max_steps", "3", "--trainer.enable_progress_bar", "false",
            "--trainer.enable_model_summary", "false", "--trainer.log_every_n_steps", "1"]
# The small recipe's tower and its two other front ends at the same size (docs/real-photos.md).
KINDS = {
    "conv_stem": [],
    "vit": ["--model.image.kind", "vit"],
    "hybrid": ["--model.image.kind", "hybrid", "--model.image.patch_size", "2",
               "--model.image.hybrid_layers", "[1]"],
}


@pytest.mark.parametrize(("tower_config", "caption_config"), [
    ("tower/fractal_small.yaml", "flickr_small.yaml"),
    ("tower/fractal_vit_b16.yaml", "flickr30k.yaml"),
])
def test_each_tower_config_is_its_caption_configs_tower(tower_config, caption_config):
    """A tower config must describe exactly the tower its caption config builds, or the weights
    it writes would not load there."""
    tower_file = yaml.safe_load((REPO / "configs" / tower_config).read_text())["model"]
    recipe = dict(yaml.safe_load((REPO / "configs" / caption_config).read_text())
                  ["model"]["net"]["image"])
    recipe.pop("pretrained", None)
    assert ImageTowerConfig(**tower_file["image"]) == ImageTowerConfig(**recipe)
    assert tower_file["export_to"].startswith("weights/")  # git-ignored, where generated ones go


@pytest.mark.parametrize("kind", KINDS)
def test_a_pretrained_tower_loads_into_a_caption_model(kind, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cli = pretrain(["fit", "--config", str(TOWER_CONFIG), *TINY_SET, *KINDS[kind],
                    "--model.export_to", "weights/tower.safetensors"])
    assert cli.trainer.global_step == 3
    assert (tmp_path / "runs/tower/latest/checkpoints/last.ckpt").is_file()
    saved = load_file(tmp_path / "weights/tower.safetensors")
    assert not any(key.startswith("head.") for key in saved)  # the classifier stays behind
    assert (tmp_path / "weights/tower.safetensors").stat().st_mode & 0o777 == 0o644  # to share

    net = VitBert(VitBertConfig(image=ImageTowerConfig(**{
        **cli.model.hparams.image, "pretrained": "weights/tower.safetensors"})))
    fresh = {key: value.clone() for key, value in net.image_tower.state_dict().items()}
    report = load_image_weights(net.image_tower, "weights/tower.safetensors")
    assert not (report.skipped or report.missing or report.resized or report.notes), report
    assert len(report.copied) == len(net.image_tower.state_dict())
    # A fresh caption run loads the file its config names the same way, and says so.
    net = VitBert(net.config)
    assert f"copied {len(report.copied)} tensors" in initialize(net)

    # The caption model's tower now computes what the pretrained tower computes.
    pretrained = cli.model.model.tower.eval()
    net.image_tower.eval()
    images = torch.randint(0, 256, (2, 3, 32, 32), dtype=torch.uint8)
    with torch.no_grad():
        ours = net.image_tower(net.image_tower.normalize(images))
        theirs = pretrained(pretrained.normalize(images))
    for a, b in zip(ours, theirs, strict=True):
        torch.testing.assert_close(a, b)
    changed = [key for key, value in net.image_tower.state_dict().items()
               if value.is_floating_point() and not torch.equal(value, fresh[key])]
    assert changed  # the weights came from the file, not from an equal initialisation


def test_the_checkpoint_holds_the_classifier(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    pretrain(["fit", "--config", str(TOWER_CONFIG), *TINY_SET, "--model.export_to", "null"])
    model = TowerPretraining.load_from_checkpoint(
        tmp_path / "runs/tower/latest/checkpoints/last.ckpt", weights_only=True)
    assert model.model.head.out_features == 4
    assert not (tmp_path / "weights").exists()


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, err
    return lines[0]


def test_a_caption_run_without_the_tower_file_says_make_tower(tmp_path, monkeypatch, capsys,
                                                               karpathy_flickr):
    from vitbert.cli import main as train

    monkeypatch.chdir(tmp_path)
    exported = yaml.safe_load(TOWER_CONFIG.read_text())["model"]["export_to"]
    with pytest.raises(SystemExit) as exited:
        train(["fit", "--config", str(FLICKR_SMALL),
               "--data.source.init_args.root", str(karpathy_flickr),
               "--model.net.image.pretrained", exported])
    assert exited.value.code == 2
    line = one_error_line(capsys)
    assert line.startswith(f"error: --model.net.image.pretrained {exported}: no such file")
    assert "`make tower`" in line and "configs/tower/fractal_small.yaml" in line


def test_a_caption_run_with_another_missing_file_says_what_to_pass(tmp_path, monkeypatch, capsys,
                                                                    karpathy_flickr):
    from vitbert.cli import main as train

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exited:
        train(["fit", "--config", str(FLICKR_SMALL),
               "--data.source.init_args.root", str(karpathy_flickr),
               "--model.net.image.pretrained", "elsewhere/tower.pth"])
    assert exited.value.code == 2
    line = one_error_line(capsys)
    assert "elsewhere/tower.pth: no such file" in line and "make tower" not in line
    assert "null" in line


def test_pretraining_settings_that_cannot_work_are_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exited:
        pretrain(["fit", "--config", str(TOWER_CONFIG), *TINY_SET, "--data.num_classes", "1"])
    assert exited.value.code == 2
    assert "data.num_classes=1" in one_error_line(capsys)


def test_pretraining_learns_to_tell_unseen_instances_apart(tmp_path, monkeypatch):
    """8 classes of 16 instances, 240 steps: on 4 held-out instances of each class the tower
    names the class at 2× chance (12.5%) or better (measured: 44% and 53% at seeds 0 and 1)."""
    monkeypatch.chdir(tmp_path)
    cli = pretrain(["fit", "--config", str(TOWER_CONFIG), *TINY_SET,
                    "--data.num_classes", "8", "--data.train_instances", "16",
                    "--data.val_instances", "4", "--data.batch_size", "32",
                    "--trainer.max_steps", "-1", "--trainer.max_epochs", "60",
                    "--trainer.check_val_every_n_epoch", "60", "--model.export_to", "null"])
    assert cli.trainer.global_step == 240
    top1 = float(cli.trainer.callback_metrics["val/top1"])
    assert top1 >= 0.25, top1
