"""The GPU figures: bf16-mixed steps, MFU against the device's peak, ``torch.compile`` on/off.

MFU = (matmul FLOPs of a step, :mod:`benchmarks.flops`) × steps/s ÷ the device's dense bf16
peak from :data:`PEAK_BF16_TFLOPS` (the vendor's figure, no sparsity). A device not in the table
gets the measured bf16 matmul peak instead, and says so. Without CUDA everything here reports
``{"skipped": "no CUDA"}``.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from benchmarks.flops import vitbert_step_flops
from benchmarks.step import (
    Batch,
    alternate,
    batch_stats,
    matmul_gflops,
    ours,
    reference,
    to_device,
)
from vitbert.models import VitBertConfig

# Dense bf16 tensor-core peaks, TFLOP/s (datasheets; SXM parts). Longest names first: "A100"
# must not match "A10".
PEAK_BF16_TFLOPS = {
    "H200": 989.0,
    "H100": 989.0,
    "GH200": 989.0,
    "A100": 312.0,
    "L40S": 362.0,
    "RTX 4090": 165.0,
    "A10G": 70.0,
    "A10": 125.0,
    "L4": 121.0,
}


def device_peak_tflops(name: str) -> float | None:
    """The table's peak for a CUDA device name (e.g. "NVIDIA H100 80GB HBM3"), or None."""
    for key in sorted(PEAK_BF16_TFLOPS, key=len, reverse=True):
        if key.lower() in name.lower():
            return PEAK_BF16_TFLOPS[key]
    return None


def bf16_autocast() -> torch.autocast:
    return torch.autocast("cuda", dtype=torch.bfloat16)


def cuda_benchmark(sizes: dict[str, tuple[VitBertConfig, list[Batch]]], warmup: int = 3,
                   rounds: int = 5, steps: int = 10, compile: bool = True) -> dict[str, Any]:
    """Per size: ours and the reference in bf16-mixed, ours under ``torch.compile``; MFU."""
    if not torch.cuda.is_available():
        return {"skipped": "no CUDA"}
    device = torch.device("cuda")
    name = torch.cuda.get_device_name(device)
    measured = matmul_gflops(8192, torch.bfloat16, "cuda", reps=5) / 1e3
    table = device_peak_tflops(name)
    peak = table or measured
    out: dict[str, Any] = {"device": name, "peak_tflops_bf16": peak,
                           "peak_source": "datasheet" if table else "measured matmul",
                           "measured_matmul_tflops_bf16": round(measured, 1)}
    for size, (config, cpu_batches) in sizes.items():
        batches = to_device(cpu_batches, device)
        contenders = [ours(config, batches), reference(config, batches)]
        for c in contenders:
            c.autocast = bf16_autocast
        if compile:
            compiled = ours(config, batches, name="ours_compiled")
            compiled.model = torch.compile(compiled.model)
            compiled.autocast = bf16_autocast  # autocast is part of what is compiled
            t0 = time.perf_counter()
            for _ in range(len(batches) + 1):  # every caption length compiles once
                compiled.step()
            torch.cuda.synchronize()
            compile_s = time.perf_counter() - t0
            contenders.append(compiled)
        res = alternate(contenders, warmup, rounds, steps)
        stats = batch_stats(batches)
        B = len(batches[0]["input_ids"])
        flops = vitbert_step_flops(config, B, round(stats["text_len"]),
                                   round(stats["targets"])).step_total
        fig: dict[str, Any] = {"batch_size": B, "text_len": stats["text_len"],
                               "gflop_per_step": round(flops / 1e9, 2)}
        for c in contenders:
            sps = res[c.name]
            fig[f"{c.name}_samples_per_s"] = round(sps, 1)
            if c.name.startswith("ours"):
                fig[f"{c.name}_mfu"] = round(flops / B * sps / (peak * 1e12), 4)
        fig["ratio"] = round(res["ours"] / res["reference"], 3)
        if compile:
            fig["compile_s"] = round(compile_s, 1)
            fig["compile_speedup"] = round(res["ours_compiled"] / res["ours"], 3)
        fig["rounds"] = res["rounds"]
        out[size] = fig
        del contenders
        torch.cuda.empty_cache()
    return out
