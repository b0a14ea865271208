import dataclasses
import io
import json

import pytest
import torch

from vitbert.models import PRESETS, ImageTowerConfig, VitBertConfig, preset


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
