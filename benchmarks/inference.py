"""Fill-mask inference: queries/s and latency, with the photo and from the text alone.

Timed through :class:`vitbert.predict.FillMask` (tokenising, image preprocessing, forward on the
[MASK] rows, softmax, top-k, decoding): the path a user's query takes. One query at a time
(latency) and a batch of queries in one call (throughput); with and without the photo in
alternating rounds.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

import torch

from vitbert.models import VitBertConfig, build_network

QUERIES = (
    "a small [MASK] circle left of a large blue square",
    "there is a large green [MASK] above a small yellow triangle",
    "a small purple diamond is to the [MASK] of a large orange circle",
    "the red cross is [MASK] the blue square",
)


def fill_mask(config: VitBertConfig | None = None, tokenizer: Any = None,
              checkpoint: str | Path | None = None, device: str = "cpu") -> Any:
    """A FillMask from ``checkpoint``, or around a freshly initialised model (speed does not
    depend on the weights)."""
    from vitbert.predict import FillMask

    if checkpoint is not None:
        return FillMask.from_checkpoint(checkpoint, device=device)
    torch.manual_seed(0)
    return FillMask(build_network(config), tokenizer, device=device)


def inference_benchmark(fm: Any, image: Any, queries: tuple[str, ...] = QUERIES,
                        rounds: int = 5, batch_size: int = 32, top_k: int = 5) -> dict[str, Any]:
    """Latency (ms, median and p90 over single queries) and queries/s, with and without photo."""
    for text in queries[:2]:  # warm-up
        fm(text, image=image, top_k=top_k)
        fm(text, top_k=top_k)
    batch = [queries[i % len(queries)] for i in range(batch_size)]
    latencies: dict[str, list[float]] = {"with_photo": [], "text_only": []}
    batched: dict[str, list[float]] = {"with_photo": [], "text_only": []}
    for r in range(rounds):
        modes = ("with_photo", "text_only") if r % 2 == 0 else ("text_only", "with_photo")
        for mode in modes:
            img = image if mode == "with_photo" else None
            for text in queries:
                t0 = time.perf_counter()
                fm(text, image=img, top_k=top_k)
                latencies[mode].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            fm(batch, image=img, top_k=top_k)
            batched[mode].append(batch_size / (time.perf_counter() - t0))
    out: dict[str, Any] = {"single_queries_timed": len(latencies["with_photo"]),
                           "batch_size": batch_size}
    for mode in latencies:
        lat = sorted(latencies[mode])
        out[mode] = {
            "latency_ms_median": round(1e3 * statistics.median(lat), 2),
            "latency_ms_p90": round(1e3 * lat[min(len(lat) - 1, int(0.9 * len(lat)))], 2),
            "queries_per_s_single": round(1 / statistics.median(lat), 1),
            "queries_per_s_batched": round(statistics.median(batched[mode]), 1),
        }
    return out
