"""`train.py fit --help` shows the values a run would use: every setting of the embedded default
(configs/default.yaml) is also the parser's default, so the file only repeats, never overrides."""

from __future__ import annotations

import dataclasses

import pytest
import yaml
from docstring_parser import parse_from_object

from vitbert.cli import DEFAULT_CONFIG, VitBertCLI, _cli
from vitbert.models import VitBertConfig


class _ParsersBuiltError(Exception):
    """Carries the CLI out once its parsers exist."""

    def __init__(self, cli: VitBertCLI) -> None:
        self.cli = cli


class _ParsersOnly(VitBertCLI):
    """Builds the real parsers, then stops before parsing anything."""

    def parse_arguments(self, parser, args) -> None:
        raise _ParsersBuiltError(self)


@pytest.fixture(scope="module")
def fit_parser():
    """The fit subcommand's parser, as `train.py fit` builds it."""
    with pytest.raises(_ParsersBuiltError) as stopped:
        _cli(["fit", "--help"], cli_class=_ParsersOnly)  # --help: with the fields' docstrings
    return stopped.value.cli._parser("fit")


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


def test_every_embedded_default_is_the_parsers_default(defaults):
    embedded = yaml.safe_load(DEFAULT_CONFIG.read_text())

    def as_yaml(value):  # YAML has lists where the dataclasses keep tuples
        return list(value) if isinstance(value, tuple) else value

    differ = {key: (value, lookup(defaults, key)) for key, value in leaves(embedded)
              if as_yaml(lookup(defaults, key)) != value}
    assert not differ, f"configs/default.yaml value vs parser default: {differ}"


def test_the_defaults_that_once_differed(defaults):
    """The settings --help used to contradict the embedded default on (issue 14)."""
    assert lookup(defaults, "model.optimizer.lr") == 2e-3
    assert lookup(defaults, "data.mlm_probability") == 0.3
    assert lookup(defaults, "trainer.max_epochs") == 2
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
def test_the_photo_configs_build_no_word_pointer(name):
    """The default's pointer names the shapes' words; a photo config must say it has none, or
    the parser's default would give it that one (for a pooled model, an error at start)."""
    args = ["fit", "--config", str(DEFAULT_CONFIG.parent / f"{name}.yaml")]
    with pytest.raises(_ParsersBuiltError) as stopped:
        _cli(args, cli_class=_ParsersOnly)
    parsed = stopped.value.cli.parser.parse_args(args)  # as train.py parses: the main parser
    pointer = parsed.fit.model.net.pointer
    assert not pointer.key_words and not pointer.value_words
