"""What several test folders share, imported as ``from helpers import ...``.

Pytest puts ``tests/`` on ``sys.path`` for ``tests/conftest.py`` (no ``__init__.py``: the default
"prepend" import mode), so every test module can import this one by its bare name.
"""

import importlib.util
import json
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = REPO / "scripts"

# A model small enough for a few training steps in a test, as command-line flags.
TINY_MODEL = [
    "--model.net.image.dim", "32", "--model.net.image.depth", "1",
    "--model.net.image.num_heads", "2", "--model.net.image.stem_hidden_dim", "8",
    "--model.net.text.dim", "32", "--model.net.text.depth", "1", "--model.net.text.num_heads", "2",
]

# The embedded default's objectives, as its config lists them, by short name.
DEFAULT_OBJECTIVES = {
    "itc": {"class_path": "vitbert.lit.contrastive.Contrastive", "init_args": {"weight": 1.0}},
    "words": {"class_path": "vitbert.lit.objectives.WordDetection",
              "init_args": {"weight": 10.0}},
    "captions": {"class_path": "vitbert.lit.objectives.CaptionWriting",
                 "init_args": {"probability": 0.3}},
    "mlm": {"class_path": "vitbert.lit.objectives.MaskedLM"},
}


def objectives(*names: str) -> list[str]:
    """``--model.objectives`` for the named objectives of :data:`DEFAULT_OBJECTIVES`, in order
    (a command line replaces the config's whole list)."""
    return ["--model.objectives", json.dumps([DEFAULT_OBJECTIVES[name] for name in names])]


def load_script(name: str) -> ModuleType:
    """``scripts/<name>.py`` as a module, run afresh on every call.

    The scripts are entry points, not a package: loading the file is how a test calls their
    ``main(argv)`` in-process, and a fresh module keeps one test's monkeypatches from the next.
    """
    spec = importlib.util.spec_from_file_location(f"{name}_script", SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def parsers_only(build, cli_class: type, args: list[str]):
    """``build(args, cli_class=…)``'s LightningCLI with its real parsers built for ``args``,
    stopped before it parses, trains or loads anything: ``.parser`` (the main one),
    ``._parser(sub)``."""

    class ParsersBuiltError(Exception):
        def __init__(self, cli) -> None:
            self.cli = cli

    class ParsersOnly(cli_class):
        def parse_arguments(self, parser, args) -> None:
            raise ParsersBuiltError(self)

    try:
        build(args, cli_class=ParsersOnly)
    except ParsersBuiltError as built:
        return built.cli
    raise AssertionError("the CLI ran instead of stopping at its parsers")


def train_cli(args: list[str]):
    """``scripts/train.py``'s command line, parsers built and nothing run (:func:`parsers_only`)."""
    from vitbert.cli import VitBertCLI, _cli

    return parsers_only(_cli, VitBertCLI, args)


# Photos as people have them, made with PIL in the tests that read photos (the demo's and the
# predict API's): a picture whose reading can be checked, red on top, blue below.
# Brighter red than blue: the embedded default's tower reads luminance, so a picture that turns
# must change in luminance, not only in hue, for the model's answer to change with it.
RED, BLUE = (230, 70, 50), (30, 30, 220)
ORIENTATION = 0x0112  # the EXIF tag; 6 = "turn 90° clockwise to show"


def red_over_blue(width: int, height: int):
    """An upright picture: red top half, blue bottom half, and some texture (JPEG-realistic)."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(width)
    pixels = np.empty((height, width, 3), np.int16)
    pixels[: height // 2], pixels[height // 2 :] = RED, BLUE
    pixels += rng.integers(-8, 9, pixels.shape, dtype=np.int16)
    return Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))


def save_sideways(upright, path, **options) -> None:
    """Store ``upright`` as a phone does: pixels turned 90° anticlockwise, EXIF Orientation 6."""
    from PIL import Image

    exif = Image.Exif()
    exif[ORIENTATION] = 6
    upright.transpose(Image.Transpose.ROTATE_90).save(path, exif=exif, **options)


# A pretrained BERT as transformers writes one, tiny and random: the text tower's equivalence
# tests, and the configs that name a BERT (model.net.text.pretrained) fitted offline.
WORDS = ["a", "dog", "runs", "on", "the", "grass", "red", "ball", "man", "in", "water", "##s"]


def write_tiny_bert(folder: Path, head: bool = True, safetensors: bool = True,
                    positions: int = 24):
    """A random BERT of 2 layers × 32 (4 heads of 8) with ``positions`` positions, its
    tokenizer's vocab.txt, saved as transformers saves; with ``head`` its MLM head too. Weights
    are moved off their initialisation so no tensor is a constant LayerNorm."""
    import torch
    from transformers import BertConfig, BertForMaskedLM, BertModel

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]
    config = BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=4, intermediate_size=48,
                        max_position_embeddings=positions, layer_norm_eps=1e-12)
    model = BertForMaskedLM(config).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.1)
    folder.mkdir(parents=True, exist_ok=True)
    saved = model
    if not head:  # a BertModel, pooler included (all-MiniLM-L6-v2's shape)
        saved = BertModel(config).eval()
        saved.load_state_dict(model.bert.state_dict(), strict=False)
    if safetensors:
        saved.save_pretrained(folder)
    else:  # an older folder: pytorch_model.bin, LayerNorm as TF's gamma and beta
        saved.config.save_pretrained(folder)
        state = {k.replace("LayerNorm.weight", "LayerNorm.gamma")
                 .replace("LayerNorm.bias", "LayerNorm.beta"): v
                 for k, v in saved.state_dict().items()}
        torch.save(state, folder / "pytorch_model.bin")
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n")
    return model
