"""Caption writing speed: captions/s, greedy, with and without the key/value cache.

Timed through :func:`vitbert.decoding.greedy` on one image at a time and on a batch. A fresh
model would stop at a random length, so [SEP] is made impossible and every caption is written to
its full ``pieces``: the figures then count the same work with and without the cache.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch

from vitbert.decoding import CaptionTokens, greedy


def caption_benchmark(net, tokenizer, images: torch.Tensor, batch_sizes: tuple[int, ...] = (1, 32),
                      pieces: int = 16, rounds: int = 3) -> dict[str, Any]:
    """{"batch_<n>": {"cached": captions/s, "uncached": captions/s, "speedup"}, "pieces": ...}.

    ``images`` uint8 (B, 3, S, S), repeated to fill the largest batch. Medians over ``rounds``
    alternating rounds.
    """
    net = net.eval()
    with torch.no_grad():
        net.mlm_head.decoder.bias[tokenizer.sep_token_id] = -1e4  # write every piece
    tokens = CaptionTokens.from_tokenizer(tokenizer)
    pool = images.repeat((max(batch_sizes) + len(images) - 1) // len(images), 1, 1, 1)
    out: dict[str, Any] = {"pieces": pieces, "rounds": rounds}
    for size in batch_sizes:
        batch = pool[:size]
        greedy(net, tokens, batch, max_new_tokens=2)  # warm-up
        rates: dict[str, list[float]] = {"cached": [], "uncached": []}
        for r in range(rounds):
            for mode in (("cached", "uncached") if r % 2 == 0 else ("uncached", "cached")):
                t0 = time.perf_counter()
                greedy(net, tokens, batch, max_new_tokens=pieces, use_cache=mode == "cached")
                rates[mode].append(size / (time.perf_counter() - t0))
        cached, uncached = (statistics.median(rates[m]) for m in ("cached", "uncached"))
        out[f"batch_{size}"] = {"cached_captions_per_s": round(cached, 1),
                                "uncached_captions_per_s": round(uncached, 1),
                                "speedup": round(cached / uncached, 2)}
    return out
