"""Benchmarks, one section each; `--json` prints one JSON object with every section's figures.

    python scripts/bench.py --json               # train, cuda, data, inference (~2 min on a CPU)
    python scripts/bench.py --sections data --json
    python scripts/bench.py --sections levers    # or --levers: each lever's before/after
    python scripts/bench.py --levers --compile   # ... including torch.compile (slow to compile)
    python scripts/bench.py --sections epoch    # or --epoch: a whole epoch vs the obvious pipeline

Sections:
  train      training-step samples/s of our model against timm's VisionTransformer +
             transformers' BertForMaskedLM at the same sizes (image tokens through inputs_embeds,
             logits at every position), same batches, alternating rounds in one process, medians:
             at the training config's sizes (--config, default configs/default.yaml, real batches
             of the embedded shapes data) and at ViT-B/16 + 6-block BERT (--big-preset, fewer
             steps). Also matmul FLOPs per step (benchmarks.flops), the machine's fp32 matmul
             peak measured once per round between the contenders, and the fraction of it reached.
  data       samples/s of the cached loader (uint8 memmap) against decoding the JPEGs every time,
             same items, same DataLoader settings; the embedded default's whole pipeline (cache +
             MLM collator, the config's workers); each against what the training step consumes
             (from the train section, and on a GPU the bf16 step of the cuda section;
             --data-pipeline times the default's loader without the train section).
             --storage also times memmap vs a `datasets` Arrow table.
  inference  FillMask queries/s and latency, one query and a batch, with and without the photo.
  captions   greedy captions/s, one image and a batch of 32, with and without the KV cache.
  cuda       bf16-mixed steps, MFU against the device's datasheet peak, torch.compile on and off;
             reports "skipped: no CUDA" without a GPU.
  levers     (not run by default; --levers) our step at the config's sizes before/after each
             lever, same initial weights, alternating rounds: masked-rows MLM head (at the
             data's vocabulary and at 8000), per-batch padding vs fixed (--fixed-len, capped at
             max_len), SDPA vs textbook attention, fused vs separate q/k/v, fused vs foreach
             AdamW, 1 vs one-per-core threads, and with --compile torch.compile on the CPU.
  cache      (not run by default; --sections cache) the frozen CNN's feature cache built from the
             Flickr8k development set's JPEGs (--cache-photos of them): photos/s of the fit's
             path (decode in workers into the image cache, then the CNN channels-last under
             inference_mode, bf16 where the CPU has it) against the obvious loop (PIL, timm in
             fp32 eval mode, batches of 32, one process), their ratio ("speedup") and how alike
             the outputs are; the CPU's name and the levers on (benchmarks.cache).
  bert       (not run by default; --sections bert) the Flickr8k BERT recipe's text tower
             (all-MiniLM-L6-v2 from --bert-weights, or its shape with random weights) against
             transformers' BertForMaskedLM holding the same weights: a training step from the text
             alone on the same masked captions, samples/s each and their ratio (benchmarks.bert).
  epoch      (not run by default; --epoch, minutes) training end to end, data loading included,
             on generated 500x375 JPEGs in Karpathy's layout: the obvious pipeline (JPEG Dataset,
             padding to max length, timm + BertForMaskedLM), ours, and ours with the image tower
             frozen and read from the feature cache; samples/s, ratios, where the time goes.
             On a CPU the Flickr30k model at ViT-Ti/16 widths; on CUDA full size, bf16-mixed,
             eager and torch.compile, MFU (benchmarks.epoch).

FLOPs: analytic, 2·m·n·k per matmul (convs as im2col matmuls, attention's two matmuls as
4·B·L²·D), backward = 2 × forward; see benchmarks.flops. Timings are medians over alternating
rounds; on a shared machine read them with the load averages recorded under "machine".
--threads 0 (the default) uses 1 intra-op thread when the 1-min load is at least the core count.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

# The measuring code is the top-level `benchmarks` package beside scripts/, not part of vitbert.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import step as st
from benchmarks.data import compare_storage, data_benchmark
from vitbert.cli import config_net
from vitbert.models import VitBertConfig, build_network

REPO = Path(__file__).resolve().parents[1]


def machine() -> dict[str, Any]:
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {"cpu": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
            "torch_threads": torch.get_num_threads(), "torch": torch.__version__,
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "cuda": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
            "load_avg_1_5_15": [round(x, 2) for x in load] if load else None}


# ------------------------------------------------------------------------------------------------
# Sizes, built once and shared by the sections


@functools.cache
def default_size(config_path: str, n_batches: int = 4) -> tuple[VitBertConfig, list, Any, int]:
    """(config, real shapes batches, tokenizer, batch size) at the training config's sizes."""
    net, batch_size = st.read_training_config(config_path)
    config = VitBertConfig.from_dict(net)
    batches, tokenizer = st.shapes_batches(config, batch_size, n_batches)
    config = VitBertConfig.from_dict({**net, "vocab_size": len(tokenizer),
                                      "pad_token_id": tokenizer.pad_token_id})
    return config, batches, tokenizer, batch_size


def big_size(name: str, batch_size: int) -> tuple[VitBertConfig, list]:
    config = config_net(name)
    config.image.pretrained = None  # no download; the speed does not depend on the weights
    return config, st.synthetic_batches(config, batch_size, n_batches=2)


# ------------------------------------------------------------------------------------------------
# train


def add_train_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("train")
    g.add_argument("--config", default=str(st.DEFAULT_CONFIG),
                   help="training YAML whose model.net sizes and batch size are benchmarked")
    g.add_argument("--train-warmup", type=int, default=1)
    g.add_argument("--train-rounds", type=int, default=5, help="alternating rounds (median)")
    g.add_argument("--train-steps", type=int, default=1, help="steps per contender per round")
    g.add_argument("--big-preset", default="flickr30k", help="the large size ('' to skip)")
    g.add_argument("--big-batch", type=int, default=1)
    g.add_argument("--big-rounds", type=int, default=2)
    g.add_argument("--peak-n", type=int, default=2048, help="n of the n×n fp32 peak matmul")


def bench_train(args: argparse.Namespace, done: dict[str, Any]) -> dict[str, Any]:
    config, batches, _, _ = default_size(args.config)
    out: dict[str, Any] = {"default": st.train_benchmark(
        config, batches, args.train_warmup, args.train_rounds, args.train_steps, args.peak_n)}
    d = out["default"]
    out["peak_gflops"] = d["peak_gflops"]
    out["ours_gflops"] = d["ours_gflops"]
    out["fraction_of_peak"] = d["fraction_of_peak"]
    if args.big_preset:
        big, big_batches = big_size(args.big_preset, args.big_batch)
        out[args.big_preset] = st.train_benchmark(big, big_batches, 1, args.big_rounds, 1,
                                                  peak_n=0)
        b = out[args.big_preset]
        b["fraction_of_peak"] = round(b["ours_gflops"] / d["peak_gflops"], 3)
    out["targets"] = {"ratio_ge_1.5": d["ratio"] >= 1.5,
                      "fraction_of_peak_ge_0.6": d["fraction_of_peak"] >= 0.6}
    return out


# ------------------------------------------------------------------------------------------------
# data


def add_data_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("data")
    g.add_argument("--data-root", default=None, help="a Flickr30k copy (default: generated JPEGs)")
    g.add_argument("--data-images", type=int, default=256, help="generated JPEGs")
    g.add_argument("--data-image-size", type=int, default=224)
    g.add_argument("--data-batch-size", type=int, default=64)
    g.add_argument("--data-workers", type=int, default=2)
    g.add_argument("--data-batches", type=int, default=20, help="timed batches per loader")
    g.add_argument("--storage", action="store_true", help="also time memmap vs Arrow reads")
    g.add_argument("--data-pipeline", action="store_true",
                   help="time the embedded default's loader even without the train section")


def shapes_pipeline_throughput(config_path: str, max_batches: int = 20) -> dict[str, Any]:
    """The embedded default's loader as training runs it: cache + MLM collator, the YAML's
    batch size and workers; samples/s after the first batch."""
    import tempfile
    from pathlib import Path

    import yaml

    from vitbert.data.datamodule import CaptionDataModule
    from vitbert.shapes import ShapesSource

    cfg = yaml.safe_load(Path(config_path).read_text())
    init = dict(cfg.get("data", {}))
    batch_size, workers = int(init.get("batch_size", 64)), int(init.get("num_workers", 1))
    with tempfile.TemporaryDirectory() as tmp:
        source = ShapesSource(root=tmp, num_train=batch_size * (max_batches + 2), num_val=64,
                              num_test=64)
        dm = CaptionDataModule(source=source, batch_size=batch_size, num_workers=workers,
                               persistent_workers=False)
        dm.setup("fit")
        it = iter(dm.train_dataloader())
        next(it)
        n, t0 = 0, time.perf_counter()
        for batch in it:
            n += len(batch["input_ids"])
        sps = n / (time.perf_counter() - t0)
    return {"batch_size": batch_size, "num_workers": workers, "samples_per_s": round(sps, 1)}


def bench_data(args: argparse.Namespace, done: dict[str, Any]) -> dict[str, Any]:
    out = data_benchmark(args.data_root, args.data_images, args.data_image_size,
                         args.data_batch_size, args.data_workers, args.data_batches)
    if args.storage:
        out["storage"] = compare_storage(2000, args.data_image_size, 1000)
    train = done.get("train", {})
    big = train.get(getattr(args, "big_preset", "") or "", {})
    if big:  # the 224-px cache feeds the ViT-B/16 step
        out["step_consumes_samples_per_s"] = big["ours_samples_per_s"]
        out["cached_over_step"] = round(out["cached_samples_per_s"]
                                        / big["ours_samples_per_s"], 1)
        out["decode_over_step"] = round(out["decode_samples_per_s"]
                                        / big["ours_samples_per_s"], 1)
    cuda_big = done.get("cuda", {}).get(getattr(args, "big_preset", "") or "", {})
    if cuda_big:  # on a GPU the question is whether the loader keeps the bf16 step fed
        sps = cuda_big["ours_samples_per_s"]
        out["cuda_step_consumes_samples_per_s"] = sps
        out["cached_over_cuda_step"] = round(out["cached_samples_per_s"] / sps, 2)
        out["decode_over_cuda_step"] = round(out["decode_samples_per_s"] / sps, 2)
    if "default" in train or args.data_pipeline:
        default = shapes_pipeline_throughput(args.config)
        if "default" in train:
            sps = train["default"]["ours_samples_per_s"]
            default["step_consumes_samples_per_s"] = sps
            default["pipeline_over_step"] = round(default["samples_per_s"] / sps, 1)
            default["target_ge_10x"] = default["pipeline_over_step"] >= 10
        cuda_default = done.get("cuda", {}).get("default", {})
        if cuda_default:
            default["cuda_step_consumes_samples_per_s"] = cuda_default["ours_samples_per_s"]
            default["pipeline_over_cuda_step"] = round(
                default["samples_per_s"] / cuda_default["ours_samples_per_s"], 2)
        out["default_pipeline"] = default
    return out


# ------------------------------------------------------------------------------------------------
# inference


def add_inference_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("inference")
    g.add_argument("--checkpoint", default=None,
                   help="a trained .ckpt or exported folder (default: fresh model, default sizes)")
    g.add_argument("--inference-rounds", type=int, default=5)
    g.add_argument("--inference-batch", type=int, default=32)


def bench_inference(args: argparse.Namespace, done: dict[str, Any]) -> dict[str, Any]:
    from benchmarks.inference import fill_mask, inference_benchmark

    config, batches, tokenizer, _ = default_size(args.config)
    fm = fill_mask(config, tokenizer, args.checkpoint, device="cpu")
    photo = batches[0]["images"][0]  # (3, S, S) uint8, a picture of the embedded data
    if args.checkpoint:
        photo = photo.permute(1, 2, 0).numpy()
    out = inference_benchmark(fm, photo, rounds=args.inference_rounds,
                              batch_size=args.inference_batch)
    out["model"] = args.checkpoint or "fresh model at the training config's sizes"
    return out


def add_captions_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("captions")
    g.add_argument("--caption-batch-sizes", type=int, nargs="+", default=[1, 32])
    g.add_argument("--caption-pieces", type=int, default=16, help="pieces written per caption")
    g.add_argument("--caption-rounds", type=int, default=3)


def bench_captions(args: argparse.Namespace, done: dict[str, Any]) -> dict[str, Any]:
    from benchmarks.captions import caption_benchmark

    config, batches, tokenizer, _ = default_size(args.config)
    torch.manual_seed(0)
    pieces = min(args.caption_pieces, config.text.max_len - 1)
    net = build_network(config)
    out = caption_benchmark(net, tokenizer, batches[0]["images"],
                            tuple(args.caption_batch_sizes), pieces, args.caption_rounds)
    out["model"] = "fresh model at the training config's sizes"
    return out


# ------------------------------------------------------------------------------------------------
# cuda


def add_cuda_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("cuda")
    g.add_argument("--cuda-big-batch", type=int, default=64)
    g.add_argument("--cuda-rounds", type=int, default=5)
    g.add_argument("--cuda-steps", type=int, default=10)
    g.add_argument("--no-cuda-compile", action="store_true")


def bench_cuda(args: argparse.Namespace, done: dict[str, Any]) -> dict[str, Any]:
    from benchmarks.cuda import cuda_benchmark

    if not torch.cuda.is_available():
        return {"skipped": "no CUDA"}
    config, batches, _, _ = default_size(args.config)
    sizes = {"default": (config, batches)}
    if args.big_preset:
        sizes[args.big_preset] = big_size(args.big_preset, args.cuda_big_batch)
    return cuda_benchmark(sizes, rounds=args.cuda_rounds, steps=args.cuda_steps,
                          compile=not args.no_cuda_compile)


# ------------------------------------------------------------------------------------------------
# levers


def add_levers_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("levers")
    g.add_argument("--levers", action="store_true", help="add the levers section")
    g.add_argument("--lever-names", nargs="+", default=[n for n in st.LEVERS if n != "compile"],
                   choices=st.LEVERS)
    g.add_argument("--compile", action="store_true", help="add the torch.compile lever (CPU)")
    g.add_argument("--lever-rounds", type=int, default=5)
    g.add_argument("--fixed-len", type=int, default=64,
                   help="the fixed padding of the padding lever (capped at the model's max_len)")


def bench_levers(args: argparse.Namespace, done: dict[str, Any]) -> dict[str, Any]:
    config, batches, _, _ = default_size(args.config)
    names = tuple(args.lever_names) + (("compile",) if args.compile else ())
    fixed = min(args.fixed_len, config.text.max_len)
    out = st.lever_benchmark(config, batches, names, fixed, warmup=1 + ("compile" in names),
                             rounds=args.lever_rounds)
    out["sizes"] = {"batch_size": len(batches[0]["input_ids"]), **st.batch_stats(batches),
                    "fixed_len": fixed}
    return out


# ------------------------------------------------------------------------------------------------
# epoch


def add_epoch_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("epoch")
    g.add_argument("--epoch", action="store_true", help="add the epoch section")
    g.add_argument("--epoch-images", type=int, default=96, help="generated 500x375 JPEGs")
    g.add_argument("--epoch-batch", type=int, default=8)
    g.add_argument("--epoch-workers", type=int, default=2, help="DataLoader workers, each")
    g.add_argument("--epoch-steps", type=int, default=30,
                   help="timed steps per contender (the frozen one runs 4x as many)")
    g.add_argument("--epoch-rounds", type=int, default=5, help="alternating rounds")
    g.add_argument("--epoch-preset", default="",
                   help="model preset (default: flickr30k on CUDA, its ViT-Ti/16-wide "
                        "reduction on a CPU)")
    g.add_argument("--no-epoch-compile", action="store_true", help="CUDA: skip torch.compile")


def bench_epoch(args: argparse.Namespace, done: dict[str, Any]) -> dict[str, Any]:
    from benchmarks.epoch import epoch_benchmark

    config = config_net(args.epoch_preset) if args.epoch_preset else None
    if config is not None:
        config.image.pretrained = None
    return epoch_benchmark(config, n_images=args.epoch_images, batch_size=args.epoch_batch,
                           workers=args.epoch_workers, steps=args.epoch_steps,
                           rounds=args.epoch_rounds, compile=not args.no_epoch_compile)


def add_cache_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("cache")
    g.add_argument("--cache-root", default=str(REPO / ".." / "shared" / "data" / "flickr8k"),
                   help="a Flickr8k folder (default: the development set beside the checkout)")
    g.add_argument("--cache-photos", type=int, default=512,
                   help="its first N photos, the same for both contenders (default 512)")
    g.add_argument("--cache-image-size", type=int, default=224,
                   help="the side the photos are read at (default 224, the CNN's own)")
    g.add_argument("--cache-map", action="store_true",
                   help="cache the CNN's feature map (default: its mean, one vector a photo)")


def bench_cache(args: argparse.Namespace, done: dict[str, Any]) -> dict[str, Any]:
    from benchmarks.cache import cache_benchmark

    return cache_benchmark(args.cache_root, args.cache_photos, args.cache_image_size,
                           pool=not args.cache_map)


def add_bert_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("bert")
    g.add_argument("--bert-weights", default=str(REPO / "weights" / "all-minilm-l6-v2"),
                   help="all-MiniLM-L6-v2's folder (make weights); absent: random weights of "
                        "its shape (default: %(default)s)")
    g.add_argument("--bert-batch", type=int, default=64, help="captions a step (default 64)")


def bench_bert(args: argparse.Namespace, done: dict[str, Any]) -> dict[str, Any]:
    from benchmarks.bert import bert_benchmark

    return bert_benchmark(args.bert_weights, batch_size=args.bert_batch)


# To add a section: write `bench_<name>(args, done) -> dict` (``done``: the figures of the sections
# already run), its options in `add_<name>_args`, and register both here.
SECTIONS: dict[str, tuple[Callable[[argparse.ArgumentParser], None],
                          Callable[[argparse.Namespace, dict[str, Any]], dict[str, Any]]]] = {
    "train": (add_train_args, bench_train),
    "cuda": (add_cuda_args, bench_cuda),
    "data": (add_data_args, bench_data),
    "inference": (add_inference_args, bench_inference),
    "captions": (add_captions_args, bench_captions),
    "levers": (add_levers_args, bench_levers),
    "epoch": (add_epoch_args, bench_epoch),
    "cache": (add_cache_args, bench_cache),
    "bert": (add_bert_args, bench_bert),
}
DEFAULT_SECTIONS = ["train", "cuda", "data", "inference"]


def choose_threads(requested: int) -> tuple[int, str]:
    """``--threads N`` as given; 0 (auto): one thread when the machine is oversubscribed, where
    intra-op threads wait on cores other processes hold (on the 2-core development machine at
    load 7 a default-size step took 3× longer with 2 threads than with 1), else torch's default."""
    if requested > 0:
        torch.set_num_threads(requested)
        return requested, "--threads"
    cores = os.cpu_count() or 1
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    if cores > 1 and load >= cores and not torch.cuda.is_available():
        torch.set_num_threads(1)
        return 1, f"auto: 1-min load {load:.1f} >= {cores} cores"
    return torch.get_num_threads(), "auto: torch default"


def build_parser() -> argparse.ArgumentParser:
    """The command line (tests/test_readme_commands.py parses the docs' commands with it)."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--sections", nargs="+", default=list(DEFAULT_SECTIONS), choices=list(SECTIONS))
    p.add_argument("--json", action="store_true", help="print one JSON object, nothing else")
    p.add_argument("--threads", type=int, default=0,
                   help="intra-op threads (0: 1 if the load exceeds the cores, else torch's)")
    for add_args, _ in SECTIONS.values():
        add_args(p)
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    args = build_parser().parse_args(argv)
    for flag in ("levers", "epoch"):
        if getattr(args, flag) and flag not in args.sections:
            args.sections.append(flag)
    # Sections that read another's figures run after it.
    args.sections.sort(key=list(SECTIONS).index)
    return args


def _print_table(name: str, figures: dict[str, Any], indent: str = "  ") -> None:
    for k, v in figures.items():
        if isinstance(v, dict) and k != "rounds":
            print(f"{indent}{k}")
            _print_table(name, v, indent + "  ")
        else:
            print(f"{indent}{k:28s} {v}")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    t0 = time.perf_counter()
    _, why = choose_threads(args.threads)
    results: dict[str, Any] = {"machine": {**machine(), "threads_reason": why}}
    # With --json, stdout is the one JSON object: what the sections print (the data split's
    # summary, a note) goes to stderr.
    with contextlib.redirect_stdout(sys.stderr) if args.json else contextlib.nullcontext():
        for name in args.sections:
            t = time.perf_counter()
            results[name] = SECTIONS[name][1](args, results)
            results[name]["section_s"] = round(time.perf_counter() - t, 1)
    results["machine"]["load_avg_at_end"] = machine()["load_avg_1_5_15"]
    results["total_s"] = round(time.perf_counter() - t0, 1)
    if args.json:
        print(json.dumps(results))
    else:
        for name, figures in results.items():
            print(f"== {name}")
            if isinstance(figures, dict):
                _print_table(name, figures)
            else:
                print(f"  {figures}")
    return results


if __name__ == "__main__":
    main()
