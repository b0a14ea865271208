"""Every photo config trains, as written, with the plain objectives list.

Each of configs/flickr30k*.yaml, flickr_small.yaml, web.yaml and flickr8k_*.yaml fits two
steps on the CPU with only what a CPU test must change set on the command line: 32-bit, one
device, a tiny image and widths, no pretrained weights (random ones in their place; a config that
names a pretrained BERT gets a tiny random one the test writes in transformers' format), and photos
the test writes (a miniature Flickr30k in Karpathy's format; streamed shards written from it for
web.yaml). The objectives, the evaluations and every other setting are the file's. None of them
names anything of the shapes data's (vitbert.shapes).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml
from helpers import REPO, WORDS, write_tiny_bert

CONFIGS = REPO / "configs"
PHOTO_CONFIGS = ("flickr30k", "flickr30k_hybrid", "flickr30k_patches", "flickr_small", "web",
                 "flickr8k_cpu", "flickr8k_bert")
# What the test changes: the CPU, two steps, tiny sizes, random weights, its own folders.
CPU = ["--trainer.accelerator", "cpu", "--trainer.devices", "1", "--trainer.strategy", "auto",
       "--trainer.num_nodes", "1", "--trainer.precision", "32-true", "--trainer.max_steps", "2",
       "--trainer.max_epochs", "1", "--trainer.limit_val_batches", "1",
       "--trainer.num_sanity_val_steps", "0", "--trainer.check_val_every_n_epoch", "1",
       "--trainer.enable_progress_bar", "false", "--data.batch_size", "8",
       "--data.num_workers", "0", "--examples.num_examples", "0"]
TINY = ["--model.net.image.dim", "32", "--model.net.image.depth", "1",
        "--model.net.image.num_heads", "2", "--model.net.image.pretrained", "null",
        "--model.net.text.dim", "32", "--model.net.text.depth", "1",
        "--model.net.text.num_heads", "2", "--model.net.text.max_len", "24"]
SIZES = {  # each tower at a tiny image: its patch or its CNN's stride divides it
    "flickr30k": ["--model.net.image.image_size", "32"],
    "flickr30k_patches": ["--model.net.image.image_size", "32"],
    "web": ["--model.net.image.image_size", "32"],
    "flickr30k_hybrid": ["--model.net.image.image_size", "32",
                         "--model.net.image.hybrid_layers", "[]"],  # the ResNetV2 stem alone
    "flickr_small": [],
    "flickr8k_cpu": ["--model.net.image.image_size", "32"],
    "flickr8k_bert": ["--model.net.image.image_size", "64"],  # a 2x2 grid of its 2x2 map
}


@pytest.mark.parametrize("name", PHOTO_CONFIGS)
def test_no_photo_config_names_a_shapes_setting(name):
    assert "vitbert.shapes" not in (CONFIGS / f"{name}.yaml").read_text()


@pytest.mark.parametrize("name", PHOTO_CONFIGS)
def test_each_photo_config_fits_two_steps_on_a_cpu(name, karpathy_flickr, tmp_path, monkeypatch):
    from vitbert.cli import main

    if name == "web":
        from vitbert.streaming.shards import write_shards

        write_shards(karpathy_flickr, tmp_path / "shards", workers=0, min_frequency=1)
        data = ["--data.source.init_args.shards", str(tmp_path / "shards")]
    else:
        data = ["--data.source.init_args.root", str(karpathy_flickr),
                "--data.source.init_args.cache_dir", str(tmp_path / "cache"),
                "--data.source.init_args.prepare_workers", "0", "--data.min_frequency", "1"]
    if yaml.safe_load((CONFIGS / f"{name}.yaml").read_text())["model"]["net"].get(
            "text", {}).get("pretrained"):  # a hub name or `make weights`' folder: a tiny BERT
        write_tiny_bert(tmp_path / "bert", positions=64)
        data += ["--model.net.text.pretrained", str(tmp_path / "bert")]
    monkeypatch.chdir(tmp_path)
    cli = main(["fit", "--config", str(CONFIGS / f"{name}.yaml"), *CPU, *TINY, *SIZES[name],
                *data])
    if "--model.net.text.pretrained" in data:  # its architecture, its tokenizer
        assert cli.model.net.config.text.layout == "bert"
        assert len(cli.datamodule.tokenizer) == len(WORDS) + 5
    assert cli.trainer.global_step == 2
    losses = [float(v) for k, v in cli.trainer.callback_metrics.items()
              if k.startswith("train/")]
    assert losses and all(math.isfinite(v) for v in losses)
    assert Path(tmp_path / "runs" / "latest" / "checkpoints" / "last.ckpt").is_file()
