"""The shapes data's levers plug into the core through its general interfaces: the network
extension (``model.net.extension``) builds a network of the shapes package's own class, and its
binding tests are a callback a config lists (configs/shapes_binding.yaml)."""

from __future__ import annotations

import typing

import pytest
from helpers import train_cli
from jsonargparse import ArgumentParser

from vitbert.cli import CONFIGS
from vitbert.lit.module import MaskedLMModule
from vitbert.models import VitBertConfig
from vitbert.shapes import BindingLevers
from vitbert.shapes.model import BindingReader, BindingVitBert, HueFormViT


@pytest.fixture(scope="module")
def levers_config():
    """``train.py fit --config configs/shapes_binding.yaml`` parsed as train.py parses it, then
    its network and objectives built from the types the module declares."""
    args = ["fit", "--config", str(CONFIGS / "shapes_binding.yaml")]
    fit = train_cli(args).parser.parse_args(args).fit
    module = typing.get_type_hints(MaskedLMModule.__init__)
    parser = ArgumentParser(exit_on_error=False)
    parser.add_argument("--net", type=module["net"])
    parser.add_argument("--objectives", type=module["objectives"])
    parsed = parser.parse_object({"net": fit.model.net.as_dict(),
                                  "objectives": [o.as_dict() for o in fit.model.objectives]})
    return parser.instantiate(parsed)


def test_the_config_names_the_levers(levers_config):
    assert isinstance(levers_config.net, VitBertConfig)
    levers = levers_config.net.extension
    assert isinstance(levers, BindingLevers)
    assert levers.settings()["init_args"] == {"hue_dim": 32, "places": True, "lookup_heads": 4,
                                              "share_window": 6, "lookup_place": True}


def test_a_module_built_from_it_holds_the_shapes_network(levers_config):
    module = MaskedLMModule(levers_config.net, levers_config.objectives)
    assert type(module.net) is BindingVitBert
    assert isinstance(module.net.image_tower, HueFormViT)
    assert isinstance(module.net.reader, BindingReader)
    assert module.net.reader.sharing is not None and module.net.reader.sharing.window == 6
    state = module.state_dict()
    for prefix in ("net.reader.lookup.", "net.reader.sharing.", "net.image_tower.chroma.",
                   "word_head."):
        assert any(key.startswith(prefix) for key in state), prefix
    # The checkpoint's hyperparameters name the extension by class path and rebuild the same
    # module (what a checkpoint load does).
    assert module.hparams["net"]["extension"]["class_path"] == "vitbert.shapes.model.BindingLevers"
    rebuilt = MaskedLMModule(**module.hparams)
    assert type(rebuilt.net) is BindingVitBert
    assert rebuilt.state_dict().keys() == state.keys()
