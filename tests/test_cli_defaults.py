"""The embedded default and the class defaults (issues 53 and 62): the classes' own defaults are
the plain model — masked-language modelling alone, no network extension, no data source, BERT's
15% hidden, no whole-split evaluation — and configs/default.yaml switches on, explicitly and only
there, what the embedded default uses (:data:`SWITCHED_ON`): the general model, nothing of the
shapes data's (``vitbert.shapes``) but the data itself, which the command line gives a run that
names none. configs/shapes_binding.yaml names the shapes data's levers; no photo config does.
Every config parses."""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path

import pytest
import yaml
from docstring_parser import parse_from_object
from helpers import DEFAULT_OBJECTIVES, train_cli

from vitbert.cli import DEFAULT_CONFIG
from vitbert.data.datamodule import CaptionDataModule
from vitbert.lit.module import MaskedLMModule
from vitbert.lit.objectives import MaskedLM
from vitbert.models import VitBert, VitBertConfig

CONFIGS = DEFAULT_CONFIG.parent
# The configs that train on photos: none may need anything made for the shapes data.
# Word detection's weight in each photo config: 3 as measured on the 500-photo development set,
# and what the Flickr8k recipe chose on its dev split (docs/real-photos.md).
WORD_DETECTION = {"flickr8k_cpu": [1.0], "flickr8k_bert": [1.0]}
PHOTO_CONFIGS = ["flickr30k", "flickr30k_hybrid", "flickr30k_patches", "flickr_small", "web",
                 "flickr8k_cpu", "flickr8k_bert"]
SHAPES = "vitbert.shapes"
ABSENT = "<absent>"  # a key the parsed tree does not have (a subclass setting of no class)


@pytest.fixture(scope="module")
def fit_parser():
    """The fit subcommand's parser, as `train.py fit` builds it."""
    return train_cli(["fit", "--help"])._parser("fit")  # --help: with the fields' docstrings


@pytest.fixture(scope="module")
def defaults(fit_parser) -> dict:
    """The fit subcommand's parser defaults, without --config."""
    return fit_parser.get_defaults().as_dict()


def leaves(tree: dict, prefix: str = ""):
    """(dotted key, value) for every value of a nested dict; a ``{class_path, init_args}`` dict
    (a class a config names) is one value, as is a list (the objectives)."""
    for key, value in tree.items():
        if isinstance(value, dict) and "class_path" not in value:
            yield from leaves(value, f"{prefix}{key}.")
        else:
            yield prefix + key, value


def lookup(tree: dict, dotted: str):
    for key in dotted.split("."):
        if not isinstance(tree, dict) or key not in tree:
            return ABSENT
        tree = tree[key]
    return tree


def strings(tree) -> list[str]:
    """Every string value of a nested dict / list (class paths included)."""
    if isinstance(tree, dict):
        return [s for value in tree.values() for s in strings(value)]
    if isinstance(tree, (list, tuple)):
        return [s for value in tree for s in strings(value)]
    return [tree] if isinstance(tree, str) else []


# What configs/default.yaml switches on over the plain model's class defaults, with the class
# default: the general model's settings, no class of the shapes data's.
EMBEDDED_OBJECTIVES = [DEFAULT_OBJECTIVES[name] for name in ("itc", "words", "captions", "mlm")]
SWITCHED_ON = {"model.net.image.attention_radius": (2, None),
               "model.net.itc_dim": (128, 0),
               "model.objectives": (EMBEDDED_OBJECTIVES, None),
               "data.mlm_probability": (0.3, 0.15),
               "captions.num_images": (200, 0), "captions.every_n_epochs": (3, 1),
               "retrieval.num_images": (500, 0)}
# The data a run that names none trains on (the command line's default, vitbert.cli).
EMBEDDED_SOURCE = "vitbert.shapes.ShapesSource"


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
              if not isinstance(value, (dict, list)) and as_yaml(lookup(parsed, key)) != value}
    # A class the file names: the run has that class, with every init_arg the file gives it.
    for key, value in leaves(embedded):
        named = value if isinstance(value, list) else [value] if isinstance(value, dict) else []
        got = lookup(parsed, key)
        got = got if isinstance(got, list) else [got]
        if named and ([g["class_path"] for g in got] != [n["class_path"] for n in named] or any(
                as_yaml(g["init_args"].get(arg, ABSENT)) != v
                for g, n in zip(got, named, strict=True)
                for arg, v in (n.get("init_args") or {}).items())):
            differ[key] = (value, got)
    assert not differ, f"configs/default.yaml value vs the parsed run's: {differ}"


def test_the_class_defaults_are_the_plain_model(defaults):
    assert lookup(defaults, "model.objectives") is None  # the module's own default, below
    assert lookup(defaults, "model.net.extension") is None
    assert lookup(defaults, "model.net.image.attention_radius") is None  # global, as every ViT
    assert lookup(defaults, "model.net.itc_dim") == 0  # no contrastive heads
    # The command line's data when none is named: the embedded pictures, its one shapes class.
    assert lookup(defaults, "data.source")["class_path"] == EMBEDDED_SOURCE
    assert lookup(defaults, "data.mlm_probability") == 0.15  # BERT's
    for evaluation in ("captions", "retrieval"):
        assert lookup(defaults, f"{evaluation}.num_images") == 0, evaluation
    assert lookup(defaults, "binding") is ABSENT  # the shapes data's tests: a config lists them
    assert [s for s in strings(defaults) if s.startswith(SHAPES)] == [EMBEDDED_SOURCE]

    # The classes themselves, as Python builds them.
    assert inspect.signature(MaskedLMModule).parameters["objectives"].default is None
    assert inspect.signature(CaptionDataModule).parameters["source"].default is \
        inspect.Parameter.empty
    with pytest.raises(TypeError, match="source"):
        CaptionDataModule()  # type: ignore[call-arg]
    assert VitBertConfig().extension is None
    module = MaskedLMModule(VitBertConfig())
    assert [type(o) for o in module.objectives] == [MaskedLM] and module.objectives[0].weight == 1
    assert module.hparams["objectives"] == [
        {"class_path": "vitbert.lit.objectives.MaskedLM", "init_args": {"weight": 1.0}}]
    assert module.heads == {} and type(module.net) is VitBert and not module.net.has_itc
    assert not module.writes_captions


def test_the_embedded_default_switches_on_exactly_what_it_uses(defaults):
    embedded = yaml.safe_load(DEFAULT_CONFIG.read_text())
    differ = {key: (value, lookup(defaults, key)) for key, value in leaves(embedded)
              if as_yaml(lookup(defaults, key)) != value}
    assert differ == SWITCHED_ON, "configs/default.yaml switches on exactly these, explicitly"
    # The first config a user opens is the general model: it names nothing of the shapes data.
    assert "shapes" not in DEFAULT_CONFIG.read_text()
    assert lookup(parse(DEFAULT_CONFIG), "model.net.extension") is None


def test_the_shapes_levers_have_their_own_config():
    """configs/shapes_binding.yaml: the embedded default with the shapes data's levers (the
    network extension) and its binding swap tests (a callback)."""
    path = CONFIGS / "shapes_binding.yaml"
    parsed = parse(path)
    assert parsed["model"]["net"]["extension"]["class_path"] == "vitbert.shapes.BindingLevers"
    assert [c["class_path"] for c in parsed["trainer"]["callbacks"]] == [
        "vitbert.shapes.BindingEvaluation"]
    default = parse(DEFAULT_CONFIG)
    for key in ("model.objectives", "model.optimizer", "data.mlm_probability",
                "model.net.itc_dim", "captions", "retrieval"):
        assert lookup(parsed, key) == lookup(default, key), key  # the levers, nothing else


def test_help_shows_the_run_settings_of_the_embedded_default(defaults):
    """The settings --help used to contradict the embedded default on (issue 14): the seed and
    the Trainer's are read from configs/default.yaml; the rest are the plain model's."""
    embedded = yaml.safe_load(DEFAULT_CONFIG.read_text())
    assert lookup(defaults, "seed_everything") == embedded["seed_everything"] == 0
    assert lookup(defaults, "trainer.max_epochs") == embedded["trainer"]["max_epochs"] == 3
    assert lookup(defaults, "model.optimizer.lr") == 2e-3
    assert lookup(embedded, "model.optimizer.lr") == 2e-3


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
    fields = _documented_fields(VitBertConfig())
    assert "extension" in dict(fields)  # the network extension is a setting like the others
    for name, doc in fields:
        assert f"--model.net.{name} " in text, name
        assert " ".join(doc.split()[:4]) in text, (name, doc)


@pytest.mark.parametrize("name", sorted(p.stem for p in CONFIGS.glob("*.yaml")))
def test_every_training_config_parses(name):
    parsed = parse(CONFIGS / f"{name}.yaml")
    assert parsed["data"]["source"]["class_path"]  # each names its data


def test_the_photo_configs_are_all_there():
    training = sorted(p.stem for p in CONFIGS.glob("*.yaml"))
    # A new config: is it a photo one?
    assert sorted([*PHOTO_CONFIGS, "default", "shapes_binding"]) == training


@pytest.mark.parametrize("name", PHOTO_CONFIGS)
def test_the_photo_configs_name_nothing_of_the_shapes_data(name):
    """A photo config needs nothing made for the shapes data and no opt-out line for it (the
    local attention window, the extension); word detection, which is general, each switches on
    itself (issue 34: measured on the development set, docs/real-photos.md)."""
    path = CONFIGS / f"{name}.yaml"
    written = yaml.safe_load(path.read_text())
    parsed = parse(path)
    assert not [s for s in strings(written) + strings(parsed) if s.startswith(SHAPES)], name
    assert lookup(parsed, "model.net.extension") is None
    assert lookup(parsed, "model.net.image.attention_radius") is None
    assert "attention_radius" not in path.read_text()
    words = [o for o in parsed["model"]["objectives"]
             if o["class_path"] == "vitbert.lit.objectives.WordDetection"]
    assert [o["init_args"]["weight"] for o in words] == WORD_DETECTION.get(name, [3.0])
