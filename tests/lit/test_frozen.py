"""``model.freeze_image``, the one setting that holds part of the image tower fixed (issue 62):
which part and for how long, read by the CLI with its fields explained, stored in a checkpoint as
plain values, refused in one line when it cannot work, and held by its callback step by step (the
whole-run freeze and its feature cache: tests/data/test_features.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from helpers import train_cli

from vitbert.lit.frozen import (
    FrozenImageTower,
    ImageFreeze,
    frozen_module,
    image_freeze,
)
from vitbert.lit.module import MaskedLMModule
from vitbert.models import ConfigError, VitBertConfig

TEXT = {"dim": 16, "depth": 1, "num_heads": 2, "max_len": 16}


def hybrid() -> VitBertConfig:
    return VitBertConfig.from_dict({
        "image": {"kind": "hybrid", "backbone": "resnet10t", "image_size": 32, "patch_size": 1,
                  "dim": 16, "depth": 1, "num_heads": 2},
        "text": TEXT, "vocab_size": 50})


def vit() -> VitBertConfig:
    return VitBertConfig.from_dict({
        "image": {"kind": "vit", "image_size": 16, "patch_size": 8, "dim": 16, "depth": 1,
                  "num_heads": 2},
        "text": TEXT, "vocab_size": 50})


def test_the_setting_as_a_config_writes_it_and_as_the_checkpoint_keeps_it(tmp_path):
    args = ["fit", "--config", "configs/flickr8k_cpu.yaml"]
    parsed = train_cli(args).parser.parse_args(args).fit.model
    assert parsed.freeze_image.part == "backbone" and parsed.freeze_image.steps is None
    args = ["fit", "--config", "configs/flickr30k.yaml", "--model.freeze_image.steps", "20"]
    parsed = train_cli(args).parser.parse_args(args).fit.model
    assert (parsed.freeze_image.part, parsed.freeze_image.steps) == ("tower", 20)

    module = MaskedLMModule(hybrid(), freeze_image=ImageFreeze("backbone"))
    assert module.hparams["freeze_image"] == {"part": "backbone", "steps": None}
    torch.save({"hyper_parameters": dict(module.hparams)}, tmp_path / "h.ckpt")
    stored = torch.load(tmp_path / "h.ckpt", weights_only=True)["hyper_parameters"]
    again = MaskedLMModule(stored["net"], freeze_image=stored["freeze_image"])
    assert again.freeze_image == ImageFreeze("backbone")
    assert MaskedLMModule(vit()).hparams["freeze_image"] is None


def test_fit_help_explains_the_setting_and_its_fields(capsys):
    parser = train_cli(["fit", "--help"])._parser("fit")  # --help: with the fields' docstrings
    text = " ".join(parser.format_help().split())
    assert "--model.freeze_image FREEZE_IMAGE" in text and "--model.freeze_image.help" in text
    assert "which part of the image tower is held fixed, and for how long" in text
    with pytest.raises(SystemExit):
        parser.parse_args(["--model.freeze_image.help"])
    fields = " ".join(capsys.readouterr().out.split())
    assert "--model.freeze_image.part {tower,backbone}" in fields
    assert "a hybrid tower's CNN (``image.backbone``) alone" in fields
    assert "null, the whole run: the part's output is computed once per photo" in fields


@pytest.mark.parametrize(("setting", "says"), [
    ({"part": "tower", "steps": -5}, "model.freeze_image.steps -5: give a number of optimiser "
                                     "steps (0 or more), or null"),
    ({"part": "cnn"}, "model.freeze_image.part 'cnn' is not a part of the tower: give tower or "
                      "backbone"),
    ({"part": "tower", "step": 5}, "model.freeze_image has no setting step"),
])
def test_a_setting_that_cannot_work_says_the_fix_in_one_line(setting, says):
    with pytest.raises(ConfigError) as caught:
        image_freeze(setting)
    assert says in str(caught.value) and "\n" not in str(caught.value)


def test_a_backbone_needs_a_tower_with_a_cnn():
    with pytest.raises(ConfigError, match=r"this tower \(vit\) has none: set image.kind: hybrid"):
        MaskedLMModule(vit(), freeze_image=ImageFreeze("backbone"))


def step(callback: FrozenImageTower, module: MaskedLMModule, global_step: int) -> None:
    callback.on_train_batch_start(SimpleNamespace(global_step=global_step), module, None, 0)


@pytest.mark.parametrize("part", ["tower", "backbone"])
def test_a_part_frozen_for_some_steps_is_fixed_in_eval_mode_then_trains(part):
    module = MaskedLMModule(hybrid(), freeze_image=ImageFreeze(part, steps=3))
    [callback] = [c for c in module.configure_callbacks() if isinstance(c, FrozenImageTower)]
    frozen = frozen_module(module.net, part)
    module.train()
    for global_step in (0, 2):
        step(callback, module, global_step)
        assert not frozen.training and not any(p.requires_grad for p in frozen.parameters())
        assert module.net.projector.training  # the rest trains
        assert all(p.requires_grad for p in module.net.projector.parameters())
    for global_step in (3, 10):  # from step 3 on it trains (a resumed run too)
        step(callback, module, global_step)
        assert frozen.training and all(p.requires_grad for p in frozen.parameters())


def test_a_backbone_frozen_for_the_whole_run_never_trains_and_the_rest_does():
    module = MaskedLMModule(hybrid(), freeze_image=ImageFreeze("backbone"))
    [callback] = [c for c in module.configure_callbacks() if isinstance(c, FrozenImageTower)]
    tower = module.net.image_tower
    assert not any(p.requires_grad for p in tower.patch_embed.backbone.parameters())
    module.train()
    step(callback, module, 10_000)
    assert not tower.patch_embed.backbone.training and tower.training
    assert all(p.requires_grad for n, p in tower.named_parameters()
               if not n.startswith("patch_embed.backbone."))
