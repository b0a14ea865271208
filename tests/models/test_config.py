import dataclasses
import io
import json
from pathlib import Path

import pytest
import torch
import yaml

from vitbert.models import PRESETS, ImageTowerConfig, VitBertConfig, preset

CONFIGS = Path(__file__).parents[2] / "configs"


def test_round_trip_through_json_lists():
    config = preset("flickr30k_hybrid")
    d = json.loads(json.dumps(config.to_dict()))  # tuples become lists
    assert isinstance(d["image"]["hybrid_layers"], list)
    assert VitBertConfig.from_dict(d) == config


def test_saved_config_loads_with_weights_only():
    buffer = io.BytesIO()
    torch.save({"config": dataclasses.asdict(preset("flickr30k"))}, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=True)["config"]
    assert VitBertConfig.from_dict(loaded) == preset("flickr30k")


def test_presets_are_fresh_copies():
    a, b = preset("default"), preset("default")
    a.image.dim = 7
    assert b.image.dim == ImageTowerConfig().dim
    assert set(PRESETS) == {"default", "flickr30k", "flickr30k_hybrid", "flickr30k_patches"}


def test_cls_pool_needs_class_token():
    with pytest.raises(ValueError, match="class_token"):
        ImageTowerConfig(pool="cls", class_token=False)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_each_preset_is_the_model_its_training_config_builds(name):
    """``describe_model.py NAME`` must describe what ``train.py fit --config configs/NAME.yaml``
    trains; for ``default`` that makes the dataclass defaults (``fit --help``) the truth."""
    net = yaml.safe_load((CONFIGS / f"{name}.yaml").read_text())["model"]["net"]
    assert VitBertConfig.from_dict(net) == preset(name)


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


def test_the_class_defaults_attend_globally_and_a_stored_word_pointer_is_dropped():
    """No window, no hue apart and no lookup by default (global attention, as every pretrained
    ViT; the embedded default asks for them); the word pointer (a shapes-only decoding add-on,
    removed) in a stored config reads as no setting at all."""
    config = VitBertConfig()
    assert (config.image.attention_radius, config.image.chroma_dim, config.image.chroma_place,
            config.neighbour_lookup_heads, config.lookup_share_window,
            config.lookup_place) == (None, 0, False, 0, 0, False)
    assert preset("default") == VitBertConfig(
        image=ImageTowerConfig(attention_radius=2, chroma_dim=32, chroma_place=True),
        neighbour_lookup_heads=4, lookup_share_window=6, lookup_place=True)
    stored = VitBertConfig().to_dict()
    stored["pointer"] = {"key_words": ["red"], "value_words": ["circle"], "key_presence": True}
    assert VitBertConfig.from_dict(stored) == VitBertConfig()
