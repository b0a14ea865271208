"""The benchmark's measuring code: FLOP counts against hand counts and torch's counter, the
lever variants computing the same thing, and the script's JSON keys (tiny sizes, no timing
assertions)."""

from __future__ import annotations

import json

import pytest
import torch
from helpers import load_script
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from benchmarks import flops
from benchmarks.cuda import cuda_benchmark, device_peak_tflops
from benchmarks.reference import ReferenceModel
from benchmarks.step import SplitQKV, manual_attention, pad_batches, synthetic_batches
from vitbert.models import VitBert, VitBertConfig, build_network
from vitbert.nn import Attention, AttentionContext, Block, BlockConfig, key_padding_mask
from vitbert.shapes import BindingLevers


def counted(fn) -> int:
    """Forward matmul FLOPs torch's counter sees (attention by hand, so its matmuls show)."""
    with manual_attention(), FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops()


def tiny_config(**kw) -> VitBertConfig:
    d = {"image": {"kind": "conv_stem", "image_size": 16, "patch_size": 4, "dim": 16, "depth": 1,
                   "num_heads": 2, "stem_hidden_dim": 8},
         "text": {"dim": 24, "depth": 2, "num_heads": 3, "max_len": 12},
         "vocab_size": 50, "image_tokens": "patches"}
    d.update(kw)
    return VitBertConfig.from_dict(d)


def test_linear_hand_count():
    x = torch.randn(2, 5, 8)
    assert flops.linear_flops(10, 8, 16) == 2 * 10 * 8 * 16 == 2560
    assert counted(lambda: nn.Linear(8, 16)(x)) == 2560


def test_block_hand_count():
    B, L, D, H = 2, 5, 8, 2
    hand = (2 * B * L * D * 3 * D  # qkv
            + 2 * (2 * B * H * L * L * (D // H))  # Q Kᵀ and weights @ V
            + 2 * B * L * D * D  # proj
            + 2 * (2 * B * L * D * 4 * D))  # fc1, fc2
    assert hand == 16960
    assert flops.block_flops(B, L, D, H) == hand
    block = Block(BlockConfig(D, H))
    mask = key_padding_mask(torch.ones(B, L, dtype=torch.bool))
    assert counted(lambda: block(torch.randn(B, L, D), AttentionContext(mask))) == hand
    assert flops.StepFlops({"block": hand}).step_total == 3 * hand


@pytest.mark.parametrize("image_tokens", ["patches", "pooled"])
@pytest.mark.parametrize("masked_only", [True, False])
@pytest.mark.parametrize(("hue_dim", "lookup_heads"), [(0, 0), (4, 0), (0, 2), (4, 2)])
def test_model_flops_match_torch_counter(image_tokens, masked_only, hue_dim, lookup_heads):
    # The shapes data's levers (a hue-apart tower, the neighbour lookup) as the extension;
    # neither: no extension, the core's network.
    extension = (BindingLevers(hue_dim=hue_dim, places=False, lookup_heads=lookup_heads,
                               share_window=0, lookup_place=False)
                 if hue_dim or lookup_heads else None)
    config = tiny_config(image_tokens=image_tokens)
    config.extension = extension
    model = build_network(config)
    assert (getattr(model, "reader", None) is None) == (lookup_heads == 0)
    batch = synthetic_batches(config, 3, n_batches=1, mean_len=7)[0]
    target = batch["labels"] != -100
    T, M = batch["input_ids"].shape[1], int(target.sum())
    f = flops.vitbert_step_flops(config, 3, T, M if masked_only else None)
    assert ("lookup" in f.forward) == (lookup_heads > 0)
    total = counted(lambda: model(batch["input_ids"], batch["attention_mask"],
                                  model.image_features(batch["images"]),
                                  target_mask=target if masked_only else None))
    assert total == f.forward_total


def test_flops_count_each_distinct_photo_once():
    config = tiny_config(image_tokens="patches")
    model = VitBert(config)
    batch = synthetic_batches(config, 3, n_batches=1, mean_len=7)[0]
    target = batch["labels"] != -100
    T, M = batch["input_ids"].shape[1], int(target.sum())
    f = flops.vitbert_step_flops(config, 3, T, M, photos=2)
    assert f.forward_total < flops.vitbert_step_flops(config, 3, T, M).forward_total
    index = torch.tensor([0, 1, 0])
    assert counted(lambda: model(batch["input_ids"], batch["attention_mask"],
                                 model.image_features(batch["images"][:2]), index,
                                 target_mask=target)) == f.forward_total


def test_vit_kind_flops_match_torch_counter():
    config = VitBertConfig.from_dict({
        "image": {"kind": "vit", "image_size": 32, "patch_size": 8, "dim": 16, "depth": 1,
                  "num_heads": 2, "class_token": True, "pool": "cls"},
        "text": {"dim": 16, "depth": 1, "num_heads": 2, "max_len": 8}, "vocab_size": 30})
    model = VitBert(config)
    batch = synthetic_batches(config, 2, n_batches=1, mean_len=5)[0]
    target = batch["labels"] != -100
    f = flops.vitbert_step_flops(config, 2, batch["input_ids"].shape[1], int(target.sum()))
    assert counted(lambda: model(batch["input_ids"], batch["attention_mask"],
                                 model.image_features(batch["images"]),
                                 target_mask=target)) == f.forward_total


def test_reference_scores_every_position():
    config = tiny_config()
    ours = flops.vitbert_step_flops(config, 4, 10, targets=6)
    ref = flops.reference_step_flops(config, 4, 10)
    rows = 4 * (16 + 10)  # (16/4)² image tokens + 10 words
    assert ref.forward["mlm_head"] == 2 * rows * 24 * 24 + 2 * rows * 24 * 50
    assert ref.forward["text_encoder"] == ours.forward["text_encoder"]


def test_reference_model_trains():
    config = tiny_config()
    model = ReferenceModel(config)
    batch = synthetic_batches(config, 2, n_batches=1, mean_len=6)[0]
    loss = model(batch["input_ids"], batch["attention_mask"], batch["images"], batch["labels"])
    loss.backward()
    assert torch.isfinite(loss) and model.vit.patch_embed.proj.weight.grad is not None


def test_lever_variants_compute_the_same():
    torch.manual_seed(0)
    attn = Attention(16, 2).eval()
    x = torch.randn(2, 6, 16)
    keep = torch.ones(2, 6, dtype=torch.bool)
    keep[1, 4:] = False
    context = AttentionContext(key_padding_mask(keep))
    fused, _ = attn(x, context)
    with manual_attention():
        manual, _ = attn(x, context)
    attn.qkv = SplitQKV(attn.qkv)
    split, _ = attn(x, context)
    torch.testing.assert_close(manual, fused)
    torch.testing.assert_close(split, fused)


def test_fixed_padding_keeps_the_loss():
    config = tiny_config()
    model = VitBert(config).eval()
    batch = synthetic_batches(config, 2, n_batches=1, mean_len=5)[0]
    padded = pad_batches([batch], 12)[0]
    assert padded["input_ids"].shape[1] == 12

    def logits(b):
        return model(b["input_ids"], b["attention_mask"], model.image_features(b["images"]),
                     target_mask=b["labels"] != -100)

    torch.testing.assert_close(logits(padded), logits(batch), atol=1e-5, rtol=1e-5)


def test_device_peaks():
    assert device_peak_tflops("NVIDIA H200") == 989.0
    assert device_peak_tflops("NVIDIA H100 80GB HBM3") == 989.0
    assert device_peak_tflops("NVIDIA A100-SXM4-80GB") == 312.0
    assert device_peak_tflops("NVIDIA A10G") == 70.0
    assert device_peak_tflops("Some Future GPU") is None


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only answer")
def test_cuda_section_skips_without_cuda():
    assert cuda_benchmark({}) == {"skipped": "no CUDA"}


def test_bench_script_json(tmp_path, capsys):
    yaml_text = """
model:
  net:
    image: {kind: conv_stem, image_size: 16, patch_size: 4, dim: 16, depth: 1, num_heads: 2,
            stem_hidden_dim: 8}
    text: {dim: 16, depth: 1, num_heads: 2, max_len: 32}
    image_tokens: patches
data:
  batch_size: 8
  num_workers: 0
"""
    (tmp_path / "tiny.yaml").write_text(yaml_text)
    argv = ["--json", "--sections", "train", "inference", "captions", "cuda", "--levers",
            "--config", str(tmp_path / "tiny.yaml"), "--big-preset", "", "--train-rounds", "1",
            "--peak-n", "64", "--lever-rounds", "1", "--inference-rounds", "1",
            "--inference-batch", "2", "--caption-batch-sizes", "1", "4", "--caption-pieces", "4",
            "--caption-rounds", "1", "--threads", "1"]
    threads = torch.get_num_threads()
    try:
        with torch.random.fork_rng():
            load_script("bench").main(argv)
    finally:
        torch.set_num_threads(threads)
    out = json.loads(capsys.readouterr().out)  # stdout is the one JSON object, nothing else
    default = out["train"]["default"]
    for key in ("ours_samples_per_s", "reference_samples_per_s", "ratio", "ours_gflop_per_step"):
        assert default[key] > 0
    for key in ("peak_gflops", "ours_gflops", "fraction_of_peak"):
        assert out["train"][key] > 0
    for mode in ("with_photo", "text_only"):
        assert out["inference"][mode]["queries_per_s_single"] > 0
        assert out["inference"][mode]["latency_ms_median"] > 0
    for size in (1, 4):
        captions = out["captions"][f"batch_{size}"]
        assert captions["cached_captions_per_s"] > 0 and captions["uncached_captions_per_s"] > 0
    if not torch.cuda.is_available():
        assert out["cuda"]["skipped"] == "no CUDA"
    levers = out["levers"]
    for name in ("mlm_head", "mlm_head_v8000", "padding", "attention", "qkv", "optimizer",
                 "threads"):
        assert levers[name]["gain"] > 0 and levers[name]["before"] != levers[name]["after"]
    assert levers["sizes"]["fixed_len"] == 32
    assert out["machine"]["torch_threads"] == 1


def test_the_bert_section_times_the_same_weights_in_both_models():
    """benchmarks.bert: transformers' copy of our text tower gives our text-only logits (the
    same weights), and the section reports both speeds and their ratio."""
    from benchmarks.bert import bert_benchmark, text_tower, transformers_copy

    net, weights = text_tower(None)
    assert weights == "random weights"
    reference = transformers_copy(net)
    net.eval(), reference.eval()
    ids = torch.randint(1000, 30000, (2, 9))
    mask = torch.ones(2, 9, dtype=torch.bool)
    mask[1, 6:] = False
    with torch.no_grad():
        ours = net(ids, mask)
        theirs = reference(input_ids=ids, attention_mask=mask.long()).logits
    torch.testing.assert_close(ours[mask], theirs[mask], atol=1e-4, rtol=0)
    figures = bert_benchmark(None, batch_size=4, rounds=1, steps=1)
    assert figures["ours_samples_per_s"] > 0 and figures["transformers_samples_per_s"] > 0
    assert figures["ratio"] == pytest.approx(
        figures["ours_samples_per_s"] / figures["transformers_samples_per_s"], rel=0.05)
