"""The whole-epoch benchmark's parts: the obvious pipeline's batches (padded to the maximum
length), the part clock's attribution of forward and backward time, the frozen step's FLOPs,
and one tiny run of all three contenders (figures present; no timing assertions)."""

from __future__ import annotations

import json
import time

import torch
from helpers import load_script
from torch import nn

from benchmarks.data import make_jpeg_folder
from benchmarks.epoch import (
    JpegCaptionDataset,
    JpegCollator,
    PartClock,
    epoch_benchmark,
    step_flops,
)
from benchmarks.flops import vitbert_step_flops
from vitbert.data.tokenizer import train_wordpiece
from vitbert.models import VitBertConfig


def tiny_config() -> VitBertConfig:
    return VitBertConfig.from_dict({
        "image": {"kind": "vit", "image_size": 32, "patch_size": 16, "dim": 32, "depth": 1,
                  "num_heads": 2, "class_token": True, "pool": "cls"},
        "text": {"dim": 32, "depth": 1, "num_heads": 2, "max_len": 40},
        "image_tokens": "pooled"})


def test_obvious_pipeline_decodes_jpegs_and_pads_to_the_maximum(tmp_path):
    root = make_jpeg_folder(tmp_path / "f", n=6, layout="karpathy")
    data = json.loads((root / "dataset_flickr30k.json").read_text())
    captions = [s["raw"] for im in data["images"] for s in im["sentences"]]
    tokenizer = train_wordpiece(captions, vocab_size=200, min_frequency=1)
    dataset = JpegCaptionDataset(root, tokenizer, image_size=32, max_length=40)
    train = [im for im in data["images"] if im["split"] == "train"]
    assert len(dataset) == 5 * len(train) and len(train) < 6  # Karpathy splits respected
    batch = JpegCollator(tokenizer)([dataset[i] for i in range(4)])
    assert batch["images"].shape == (4, 3, 32, 32) and batch["images"].dtype == torch.uint8
    assert batch["input_ids"].shape == (4, 40)  # every caption padded to max_length
    assert not batch["attention_mask"][:, -1].any()  # ... so the last columns are padding
    targets = batch["labels"] != -100
    assert targets.any() and not (targets & ~batch["attention_mask"]).any()


class _Slow(torch.autograd.Function):
    """Identity that sleeps: FORWARD_S in forward, BACKWARD_S in backward."""

    @staticmethod
    def forward(ctx, x):
        time.sleep(0.2)
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        time.sleep(0.3)
        return g


class SlowPart(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):  # dict-like, as transformers' ModelOutput
        return {"hidden": _Slow.apply(self.lin(x))}


def test_part_clock_attributes_forward_and_backward_to_the_right_part():
    first, slow, last = nn.Linear(4, 4), SlowPart(), nn.Linear(4, 4)
    clock = PartClock({"first": first, "slow": slow, "last": last}, torch.device("cpu"))
    x = torch.randn(2, 4)  # needs no grad: "first"'s backward runs to the end of backward()
    last(slow(first(x))["hidden"]).sum().backward()
    clock.backward_done()
    clock.remove()
    assert clock.seconds["slow"] >= 0.5  # 0.2 forward + 0.3 backward, behind a dict output
    assert clock.seconds["first"] + clock.seconds["last"] < clock.seconds["slow"]
    assert set(clock.seconds) == {"first", "slow", "last"}
    assert not first._forward_hooks and not slow._forward_pre_hooks  # removed


def test_frozen_step_has_no_image_tower_work():
    config = tiny_config()
    full = vitbert_step_flops(config, 4, 12, 5)
    tower = full.forward["patch_embed"] + full.forward["image_encoder"]
    assert step_flops("frozen", config, 4, 12, 5, photos=4) == full.step_total - 3 * tower
    assert step_flops("ours", config, 4, 12, 5, photos=4) == full.step_total
    # Four captions of two photos: the tower and projector run twice, not four times.
    per_photo = (tower + full.forward["projector"]) // 4
    assert step_flops("ours", config, 4, 12, 5, photos=2) == full.step_total - 3 * 2 * per_photo
    assert step_flops("obvious", config, 4, 40, 5, photos=4) > step_flops("ours", config, 4, 12,
                                                                         5, photos=4)


def test_epoch_benchmark_runs_every_contender(tmp_path):
    with torch.random.fork_rng():
        out = epoch_benchmark(tiny_config(), n_images=16, batch_size=4, workers=0, steps=2,
                              rounds=2, warmup=1, workdir=tmp_path)
    names = ("obvious", "ours", "frozen")
    for name in names:
        assert out[name]["samples_per_s"] > 0 and out[name]["samples"] > 0
        assert out[name]["seconds_by_part"]["data"] >= 0
    assert out["obvious"]["ratio_to_obvious"] == 1.0
    assert out["obvious"]["mean_text_len"] == 40  # padded to max_len
    assert out["ours"]["mean_text_len"] < 40  # per-batch padding
    assert "image_tower" in out["ours"]["seconds_by_part"]
    # Five captions a photo, kept together: 4 captions hold at most 2 photos, each run once.
    assert out["obvious"]["mean_photos"] == 4 and out["ours"]["mean_photos"] <= 2
    assert "image_tower" not in out["frozen"]["seconds_by_part"]  # never run
    assert out["frozen"]["one_time_s"]["feature_cache_build"] >= 0
    assert out["steps_per_contender"]["frozen"] == 4 * out["steps_per_contender"]["ours"]
    assert set(out["targets"]) == {"ours_ge_1.5x", "frozen_ge_10x"}


def test_bench_script_has_the_epoch_section():
    module = load_script("bench")
    args = module.parse_args(["--epoch", "--epoch-steps", "3"])
    assert "epoch" in args.sections and args.epoch_steps == 3
    assert "epoch" not in module.parse_args([]).sections  # minutes: only on request
