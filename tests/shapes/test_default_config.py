"""The embedded default (configs/default.yaml) names the shapes levers by class path, and the
core builds them through its general interfaces: the network extension (``model.net.extension``),
the objectives list (``model.objectives``) and the data source (``data.source``)."""

from __future__ import annotations

import typing

import pytest
from helpers import train_cli
from jsonargparse import ArgumentParser

from vitbert.cli import DEFAULT_CONFIG
from vitbert.data.datamodule import CaptionDataModule
from vitbert.lit.module import MaskedLMModule
from vitbert.lit.objectives import MaskedLM
from vitbert.models import VitBertConfig
from vitbert.shapes import BindingLevers, FocusedMaskedLM, ShapesSource, TwinContrast
from vitbert.shapes.focus import PieceDifficulty
from vitbert.shapes.model import BindingReader


@pytest.fixture(scope="module")
def default():
    """``train.py fit`` without --config, parsed as train.py parses it, then its network, its
    objectives and its data source built from the types the module and the data module declare
    (what the CLI instantiates; the rest of the run is not built: no data, no trainer)."""
    args = ["fit", "--config", str(DEFAULT_CONFIG)]
    fit = train_cli(args).parser.parse_args(args).fit
    module = typing.get_type_hints(MaskedLMModule.__init__)
    data = typing.get_type_hints(CaptionDataModule.__init__)
    parser = ArgumentParser(exit_on_error=False)
    parser.add_argument("--net", type=module["net"])
    parser.add_argument("--objectives", type=module["objectives"])
    parser.add_argument("--source", type=data["source"])
    parsed = parser.parse_object({"net": fit.model.net.as_dict(),
                                  "objectives": [o.as_dict() for o in fit.model.objectives],
                                  "source": fit.data.source.as_dict()})
    return parser.instantiate(parsed)


def test_the_default_config_names_the_shapes_levers(default):
    assert isinstance(default.net, VitBertConfig)
    levers = default.net.extension
    assert isinstance(levers, BindingLevers)
    assert levers.settings()["init_args"] == {"hue_dim": 32, "places": True, "lookup_heads": 4,
                                              "share_window": 6, "lookup_place": True}
    kinds = [type(o) for o in default.objectives]
    assert FocusedMaskedLM in kinds and TwinContrast in kinds
    assert MaskedLM not in kinds  # the focused objective is the masked-language one here
    focus = default.objectives[kinds.index(FocusedMaskedLM)]
    assert (focus.focus_weight, focus.start, focus.fraction) == (2.0, 0.3, 1.0)
    assert default.objectives[kinds.index(TwinContrast)].weight == 0.3
    assert isinstance(default.source, ShapesSource) and default.source.twin_photos is True


def test_a_module_built_from_the_default_has_the_reader_and_the_objectives_state(default):
    module = MaskedLMModule(default.net, default.objectives)
    assert isinstance(module.net.reader, BindingReader)
    assert module.net.reader.sharing is not None and module.net.reader.sharing.window == 6
    state = module.state_dict()
    for prefix in ("net.reader.lookup.", "net.reader.sharing.", "word_head."):
        assert any(key.startswith(prefix) for key in state), prefix
    assert "difficulty.loss" in state
    assert isinstance(module.difficulty, PieceDifficulty)
    assert state["difficulty.loss"].shape == (module.net.config.vocab_size,)
    # The checkpoint's hyperparameters name the extension and the objectives by class path, and
    # rebuild the same module (what a checkpoint load does).
    assert module.hparams["net"]["extension"]["class_path"] == "vitbert.shapes.model.BindingLevers"
    rebuilt = MaskedLMModule(**module.hparams)
    assert rebuilt.state_dict().keys() == state.keys()
    assert [type(o) for o in rebuilt.objectives] == [type(o) for o in default.objectives]


def test_the_default_data_module_gives_the_twin_contrast_its_twins(default):
    TwinContrast().prepare(CaptionDataModule(source=default.source, num_workers=0), None)
