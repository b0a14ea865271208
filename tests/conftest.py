"""Test-wide settings and fixtures.

Settings: never reach the network, and keep CPU thread use predictable.

``trained``: one tiny model trained once per session through the real CLI, and the files built
from it, shared by the tests of everything that reads a checkpoint (predict, demo). Training goes
through ``vitbert.cli.main`` (not a hand-made state dict) so the tests read a checkpoint exactly as
``scripts/train.py fit`` writes it, tokenizer included. Two optimiser steps are enough: those tests
check shapes, plumbing and errors, not what the model learned.

``karpathy_flickr``: a miniature Flickr30k on disk, for the tests of the photo data path.
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import objectives
from PIL import Image

from vitbert.io import write_exported


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


TINY_NET = [
    "--model.net.image.dim", "32", "--model.net.image.depth", "1",
    "--model.net.image.num_heads", "2", "--model.net.image.stem_hidden_dim", "8",
    "--model.net.text.dim", "32", "--model.net.text.depth", "2",
    "--model.net.text.num_heads", "2",
]
TINY_DATA = [
    "--data.source.init_args.num_train", "128", "--data.source.init_args.num_val", "16",
    "--data.source.init_args.num_test", "16", "--data.num_workers", "0",
    "--data.batch_size", "8",
]
# The logger stays on in `fit` (the CLI's LearningRateMonitor needs one); it writes to ./runs of
# the tmp folder.
QUIET = ["--trainer.enable_progress_bar", "false",
         "--trainer.enable_model_summary", "false", "--examples.num_examples", "0"]


@dataclass
class Trained:
    root: Path  # the run's working folder (data/, checkpoints)
    ckpt: Path  # a .ckpt written by `fit` (8×8 patch tokens, 2 text layers)
    exported: Path  # the same model exported: config.json, model.safetensors, tokenizer.json
    pooled: Path  # an exported folder of a one-pooled-image-token model, same tokenizer
    photo: Path  # a 32×32 shapes picture (PNG) the model was trained on
    photo_wide: Path  # a 48×40 photo, so resizing and cropping happen
    caption: str  # the photo's caption


def data_args(root: Path) -> list[str]:
    return ["--data.source.init_args.root", str(root / "shapes"), *TINY_DATA]


@pytest.fixture(scope="session")
def trained(tmp_path_factory) -> Trained:
    from vitbert.cli import main
    from vitbert.io import TOKENIZER_FILE, export, load_model
    from vitbert.models import VitBert

    root = tmp_path_factory.mktemp("trained")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)  # anything written to ./ (logs, configs) stays in the tmp folder
        main(["fit", "--trainer.max_steps", "1", "--trainer.limit_val_batches", "0",
              # no contrastive heads: tests/retrieval trains its own
              "--model.net.itc_dim", "0",
              *objectives("words", "captions", "mlm"),
              "--checkpoint.monitor", "null", "--checkpoint.dirpath", str(root / "ckpt"),
              *data_args(root), *TINY_NET, *QUIET])
    ckpt = root / "ckpt" / "last.ckpt"
    exported = export(ckpt, root / "exported")

    model, _ = load_model(ckpt)
    config = model.config
    config.image_tokens = "pooled"
    pooled = root / "pooled"
    write_exported(VitBert(config), pooled)
    shutil.copy(exported / TOKENIZER_FILE, pooled / TOKENIZER_FILE)

    images = np.load(root / "shapes" / "images.npy", mmap_mode="r")
    notes = json.loads((root / "shapes" / "annotations.json").read_text())
    photo = root / "photo.png"
    Image.fromarray(np.ascontiguousarray(images[0].transpose(1, 2, 0))).save(photo)
    wide = root / "wide.png"
    rng = np.random.default_rng(0)
    Image.fromarray(rng.integers(0, 256, (40, 48, 3), dtype=np.uint8)).save(wide)
    caption = notes["texts"][notes["rows"].index(0)]
    return Trained(root, ckpt, exported, pooled, photo, wide, caption)


@pytest.fixture(scope="session")
def tiny_cli_args(trained) -> list[str]:
    """The CLI arguments that rebuild the trained model's data and network (for `predict`)."""
    return [*data_args(trained.root), *TINY_NET, *QUIET]


@pytest.fixture
def karpathy_flickr(tmp_path) -> Path:
    """A miniature Flickr30k in Karpathy's format, with real photographs: 12 photos in
    ``tmp_path / "flickr"`` (train, val and test), five captions each."""
    from skimage import data as skdata

    root = tmp_path / "flickr"
    photos = [skdata.astronaut(), skdata.chelsea(), skdata.coffee()]
    (root / "flickr30k-images").mkdir(parents=True)
    words = ["dog", "man", "grass", "street", "red", "blue", "runs", "sits", "ball", "water"]
    images = []
    for i in range(12):
        name = f"{1000000 + i}.jpg"
        crop = photos[i % 3][i * 9 : i * 9 + 300, i * 7 : i * 7 + 400]
        Image.fromarray(crop).save(root / "flickr30k-images" / name, quality=85)
        split = "val" if i % 4 == 1 else "test" if i % 4 == 2 else "train"
        captions = [f"a {words[(i + k) % 10]} and a {words[(i * k + 3) % 10]} ." for k in range(5)]
        images.append({"filename": name, "imgid": i, "split": split,
                       "sentences": [{"raw": c, "tokens": c.split()} for c in captions]})
    (root / "dataset_flickr30k.json").write_text(json.dumps({"images": images}))
    return root


# A tiny model and a batch for it, shared by the model tests and the shapes package's.

def make_tiny_config(**overrides):
    """A 16×16-pixel, 2×2-patch, one-block-per-tower model with a 50-word vocabulary."""
    from vitbert.models import ImageTowerConfig, TextTowerConfig, VitBertConfig

    image = ImageTowerConfig(kind="vit", image_size=16, patch_size=8, dim=32, depth=1,
                             num_heads=2)
    text = TextTowerConfig(dim=24, depth=2, num_heads=2, max_len=12)
    config = VitBertConfig(image=image, text=text, vocab_size=50)
    for key, value in overrides.items():
        setattr(config, key, value)
    return config


@pytest.fixture
def batch():
    """Two captions (the second one padded) and two photos, with one [MASK]-like target each."""
    input_ids = torch.randint(5, 50, (2, 7))
    attention_mask = torch.ones(2, 7, dtype=torch.bool)
    attention_mask[1, 5:] = False
    input_ids[1, 5:] = 0
    images = torch.randint(0, 256, (2, 3, 16, 16), dtype=torch.uint8)
    target_mask = torch.zeros(2, 7, dtype=torch.bool)
    target_mask[0, 2] = target_mask[1, 3] = target_mask[0, 5] = True
    return input_ids, attention_mask, images, target_mask


@pytest.fixture
def tiny_config():
    """The builder itself, so tests can ask for variants: ``tiny_config(image_tokens=...)``."""
    return make_tiny_config
