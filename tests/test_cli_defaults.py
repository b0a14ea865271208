"""The embedded default and the class defaults: configs/default.yaml's values are what a run
without --config uses; the classes' own defaults are neutral (no attention window, no word
detection: nothing that only the shapes data wants), and the file switches on, explicitly and
only there, what the embedded default needs (:data:`SWITCHED_ON`). Every config parses."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml
from docstring_parser import parse_from_object
from helpers import train_cli

from vitbert.cli import DEFAULT_CONFIG
from vitbert.models import VitBertConfig


@pytest.fixture(scope="module")
def fit_parser():
    """The fit subcommand's parser, as `train.py fit` builds it."""
    return train_cli(["fit", "--help"])._parser("fit")  # --help: with the fields' docstrings


@pytest.fixture(scope="module")
def defaults(fit_parser) -> dict:
    """The fit subcommand's parser defaults, without --config."""
    return fit_parser.get_defaults().as_dict()


def leaves(tree: dict, prefix: str = ""):
    """(dotted key, value) for every value of a nested dict; a class_path/init_args pair is a
    value of its own plus its leaves."""
    for key, value in tree.items():
        if isinstance(value, dict):
            yield from leaves(value, f"{prefix}{key}.")
        else:
            yield prefix + key, value


def lookup(tree: dict, dotted: str):
    for key in dotted.split("."):
        tree = tree[key]
    return tree


# What configs/default.yaml switches on over the neutral class defaults, with the class default.
SWITCHED_ON = {"model.net.image.attention_radius": (2, None),
               "model.word_detection_weight": (10.0, 0.0), "model.itc_weight": (1.0, 0.0),
               "model.net.image.chroma_dim": (32, 0), "model.net.neighbour_lookup_heads": (4, 0),
               "model.twin_weight": (0.3, 0.0), "data.twin_photos": (True, False),
               "model.net.image.chroma_place": (True, False),
               "model.net.lookup_share_window": (6, 0), "model.net.lookup_place": (True, False),
               "model.optimizer.min_lr_ratio": (0.3, 0.05), "model.focus_weight": (2.0, 0.0),
               "model.focus_start": (0.3, 0.0), "captions.every_n_epochs": (3, 1)}


def parse(config: Path) -> dict:
    """``train.py fit --config config`` as train.py parses it (the main parser), as a dict."""
    args = ["fit", "--config", str(config)]
    return train_cli(args).parser.parse_args(args).fit.as_dict()


def as_yaml(value):  # YAML has lists where the dataclasses keep tuples
    return list(value) if isinstance(value, tuple) else value


def test_a_run_uses_every_value_of_the_embedded_default():
    embedded = yaml.safe_load(DEFAULT_CONFIG.read_text())
    parsed = parse(DEFAULT_CONFIG)
    differ = {key: (value, lookup(parsed, key)) for key, value in leaves(embedded)
              if as_yaml(lookup(parsed, key)) != value}
    assert not differ, f"configs/default.yaml value vs the parsed run's: {differ}"


def test_the_class_defaults_are_neutral_and_the_embedded_default_switches_on_the_rest(defaults):
    assert lookup(defaults, "model.net.image.attention_radius") is None  # global, as every ViT
    assert lookup(defaults, "model.word_detection_weight") == 0.0  # no word detection head
    embedded = yaml.safe_load(DEFAULT_CONFIG.read_text())
    differ = {key: (value, lookup(defaults, key)) for key, value in leaves(embedded)
              if as_yaml(lookup(defaults, key)) != value}
    assert differ == SWITCHED_ON, "configs/default.yaml switches on exactly these, explicitly"


def test_the_defaults_that_once_differed(defaults):
    """The settings --help used to contradict the embedded default on (issue 14)."""
    assert lookup(defaults, "model.optimizer.lr") == 2e-3
    assert lookup(defaults, "data.mlm_probability") == 0.3
    assert lookup(defaults, "trainer.max_epochs") == 3
    assert lookup(defaults, "data.source.class_path") == "vitbert.data.ShapesSource"


def _documented_fields(config) -> list[tuple[str, str]]:
    """(dotted field name, its attribute docstring) for every setting of a config dataclass."""
    docs = {}
    for klass in reversed(type(config).__mro__[:-1]):  # a subclass's docstring wins over its base's
        docs |= {p.arg_name: p.description for p in parse_from_object(klass).params}
    found = []
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        if dataclasses.is_dataclass(value):
            found += [(f"{field.name}.{name}", doc) for name, doc in _documented_fields(value)]
        else:
            assert docs.get(field.name), f"{type(config).__name__}.{field.name}: no docstring"
            found.append((field.name, docs[field.name]))
    return found


def test_fit_help_explains_every_architecture_setting(fit_parser):
    """Each VitBertConfig field is its own `--model.net.*` flag, explained by its docstring.

    One reason the LightningModule takes a config, not a built VitBert (docs/architecture.md):
    injected as an nn.Module, these flags would leave `fit --help` for `--model.net.help`.
    """
    text = " ".join(fit_parser.format_help().split())
    for name, doc in _documented_fields(VitBertConfig()):
        assert f"--model.net.{name} " in text, name
        assert " ".join(doc.split()[:4]) in text, (name, doc)


@pytest.mark.parametrize("name", ["flickr30k", "flickr30k_hybrid", "flickr30k_patches",
                                  "flickr_small"])
def test_the_photo_configs_parse_and_take_the_neutral_defaults(name):
    """A photo config needs no opt-out line for what only the shapes data wants (the local
    attention window); word detection, which is general, each switches on itself (issue 34:
    measured on the development set, docs/real-photos.md)."""
    parsed = parse(DEFAULT_CONFIG.parent / f"{name}.yaml")
    assert lookup(parsed, "model.net.image.attention_radius") is None
    assert "attention_radius" not in (DEFAULT_CONFIG.parent / f"{name}.yaml").read_text()
    assert lookup(parsed, "model.word_detection_weight") == 3.0
