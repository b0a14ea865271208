import dataclasses
import io
import json
from pathlib import Path

import pytest
import torch
import yaml

from vitbert.cli import config_net
from vitbert.models import ImageTowerConfig, VitBert, VitBertConfig, build_network
from vitbert.shapes import BindingLevers

CONFIGS = Path(__file__).parents[2] / "configs"
NAMES = sorted(p.stem for p in CONFIGS.glob("*.yaml"))


@pytest.mark.parametrize("name", ["flickr30k_hybrid", "default"])
def test_round_trip_through_json_lists(name):
    config = config_net(name)
    d = json.loads(json.dumps(config.to_dict()))  # tuples become lists
    assert isinstance(d["image"]["hybrid_layers"], list)
    assert VitBertConfig.from_dict(d) == config


def test_saved_config_loads_with_weights_only():
    """The dict a checkpoint keeps (extension included, as its class path and plain settings)."""
    buffer = io.BytesIO()
    torch.save({"config": config_net("shapes_binding").to_dict()}, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=True)["config"]
    assert loaded["extension"] == {
        "class_path": "vitbert.shapes.model.BindingLevers",
        "init_args": {"hue_dim": 32, "places": True, "lookup_heads": 4, "share_window": 6,
                      "lookup_place": True}}
    assert VitBertConfig.from_dict(loaded) == config_net("shapes_binding")


def test_an_extension_compares_by_its_settings():
    """A config read back equals the one written: the extension by its settings, not identity."""
    assert BindingLevers(hue_dim=8) == BindingLevers(hue_dim=8)
    assert BindingLevers(hue_dim=8) != BindingLevers(hue_dim=16)
    assert VitBertConfig(extension=BindingLevers()) != VitBertConfig()
    spec = {"class_path": "vitbert.shapes.BindingLevers", "init_args": {"lookup_heads": 2}}
    assert VitBertConfig(extension=spec) == VitBertConfig(extension=BindingLevers(lookup_heads=2))


def test_named_configs_are_fresh_copies():
    a, b = config_net("default"), config_net("default")
    a.image.dim = 7
    assert b.image.dim == ImageTowerConfig().dim
    assert {"default", "flickr30k", "flickr30k_hybrid", "flickr30k_patches"} <= set(NAMES)
    with pytest.raises(KeyError, match=r"no config 'absent'.*'flickr30k_hybrid'"):
        config_net("absent")


def test_cls_pool_needs_class_token():
    with pytest.raises(ValueError, match="class_token"):
        ImageTowerConfig(pool="cls", class_token=False)


@pytest.mark.parametrize("name", NAMES)
def test_each_training_config_builds_its_network(name):
    """``describe_model.py NAME`` reads what ``train.py fit --config configs/NAME.yaml`` trains
    (its ``model.net``): every one is a valid network (built on the meta device: no memory, no
    weights loaded)."""
    net = yaml.safe_load((CONFIGS / f"{name}.yaml").read_text())["model"]["net"]
    config = config_net(name)
    assert config.image.kind == net.get("image", {}).get("kind", ImageTowerConfig().kind)
    with torch.device("meta"):
        model = build_network(config)
    assert model.config == config
    assert (type(model) is VitBert) == (config.extension is None)


def test_default_is_the_patch_token_model():
    config = VitBertConfig()
    assert (config.image_tokens, config.text.max_len, config.image.stem_hidden_dim) == (
        "patches", 32, 16)


def test_a_stored_config_from_before_local_attention_loads_as_global():
    stored = VitBertConfig(image=ImageTowerConfig(attention_radius=2)).to_dict()
    assert VitBertConfig.from_dict(stored).image.attention_radius == 2
    del stored["image"]["attention_radius"]  # written before the setting existed
    assert VitBertConfig.from_dict(stored).image.attention_radius is None
    with pytest.raises(ValueError, match="attention_radius=-1"):
        ImageTowerConfig(attention_radius=-1)


def test_the_class_defaults_are_neutral_and_the_configs_switch_on_what_they_use():
    """No window, no extension, no contrastive heads by default (global attention, as every
    pretrained ViT); configs/default.yaml asks for the window and the heads, and
    configs/shapes_binding.yaml for the shapes data's binding levers too, by class path."""
    config = VitBertConfig()
    assert (config.image.attention_radius, config.extension, config.itc_dim) == (None, None, 0)
    general = VitBertConfig(image=ImageTowerConfig(attention_radius=2), itc_dim=128)
    assert config_net("default") == general
    assert config_net("shapes_binding") == dataclasses.replace(general, extension=BindingLevers(
        hue_dim=32, places=True, lookup_heads=4, share_window=6, lookup_place=True))
    with pytest.raises(ValueError, match="itc_dim=-1"):
        VitBertConfig(itc_dim=-1)
