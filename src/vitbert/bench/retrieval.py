"""Retrieval speed: scoring every pair with the matching head (ITM) against the contrastive
score (ITC) over all pairs and ITM on the top ``k`` of each query only, both ways (ALBEF, BLIP).

The work, for P photos and C captions:

    all pairs:   the tower once per photo, then the joint encoder on all P·C (caption, photo)
                 pairs; both directions read the one P × C matrix of ITM logits.
    ITC + ITM:   the tower and the image projection once per photo, the text encoder once per
                 caption (alone), one (C, E) @ (E, P) product; then ITM on each caption's k best
                 photos and each photo's k best captions: k·(C + P) pairs.

Both cache the tower's output per photo (``image_features``, gathered per pair by
``image_index``): the only difference timed is which pairs reach the joint encoder. R@1 is the
share of queries whose own match ranks first (caption c belongs to photo c here). With
untrained weights the recalls are chance (about 1/P); the timings do not depend on the weights.

``--quick`` sizes (:func:`retrieval_benchmark` ``all_pairs_queries``) score all pairs for a
sample of captions only and scale the time to P·C pairs by the pair count (an estimate, marked
so); the Flickr30k sizes are always a reduced set scaled that way (:func:`scaled_estimate`).
"""

from __future__ import annotations

import time
from typing import Any

import torch
from torch import Tensor

from vitbert.models import Photos

K = 16  # the shortlist the matching head re-scores


@torch.inference_mode()
def tower_features(net, images: Tensor, batch: int) -> Tensor:
    """uint8 (P, 3, S, S) → the tower's output tokens (P, N, D_img), once per photo."""
    return torch.cat([net.tower_tokens(chunk) for chunk in images.split(batch)])


@torch.inference_mode()
def text_embeddings(net, ids: Tensor, keep: Tensor, batch: int) -> Tensor:
    """Captions (C, T) read alone → unit vectors (C, E)."""
    return torch.cat([net.embed_texts(i, k) for i, k in zip(ids.split(batch), keep.split(batch),
                                                             strict=True)])


@torch.inference_mode()
def itm_logits(net, head, ids: Tensor, keep: Tensor, features: Tensor, text_rows: Tensor,
               photo_rows: Tensor, batch: int) -> Tensor:
    """The matching head's logit (pairs,) for caption ``text_rows[i]`` with photo
    ``photo_rows[i]``: the joint encoder over the pair, the head on its [CLS]."""
    out = []
    for t, p in zip(text_rows.split(batch), photo_rows.split(batch), strict=True):
        hidden, _ = net.encode(ids[t], keep[t], Photos(features, p))
        out.append(head(hidden[:, 0]).float())  # (b,)
    return torch.cat(out)


def all_pairs(net, head, features: Tensor, ids: Tensor, keep: Tensor, captions: Tensor,
              batch: int) -> Tensor:
    """ITM logits (len(captions), P) of the captions ``captions`` against every photo, from the
    tower's output ``features`` (P, N, D_img)."""
    P = len(features)
    text_rows = captions.repeat_interleave(P)  # (Cq·P,)
    photo_rows = torch.arange(P).repeat(len(captions))
    return itm_logits(net, head, ids, keep, features, text_rows, photo_rows,
                      batch).view(len(captions), P)


def itc_then_itm(net, head, images: Tensor, ids: Tensor, keep: Tensor, k: int, batch: int
                 ) -> tuple[Tensor, Tensor, int]:
    """(best photo per caption (C,), best caption per photo (P,), ITM pairs scored): ITC over
    all pairs, ITM on each query's ``k`` best."""
    features = tower_features(net, images, batch)
    with torch.inference_mode():
        photos = net.embed_image_tokens(features)  # (P, E)
    texts = text_embeddings(net, ids, keep, batch)  # (C, E)
    sims = texts @ photos.T  # (C, P)
    C, P = sims.shape
    shortlist = sims.topk(min(k, P), dim=1).indices  # (C, k) photos per caption
    logits = itm_logits(net, head, ids, keep, features, torch.arange(C).repeat_interleave(
        shortlist.shape[1]), shortlist.reshape(-1), batch).view(C, -1)
    text_to_photo = shortlist.gather(1, logits.argmax(dim=1, keepdim=True)).squeeze(1)  # (C,)
    reverse = sims.T.topk(min(k, C), dim=1).indices  # (P, k) captions per photo
    logits = itm_logits(net, head, ids, keep, features, reverse.reshape(-1),
                        torch.arange(P).repeat_interleave(reverse.shape[1]), batch).view(P, -1)
    photo_to_text = reverse.gather(1, logits.argmax(dim=1, keepdim=True)).squeeze(1)  # (P,)
    return text_to_photo, photo_to_text, shortlist.numel() + reverse.numel()


def _timed(fn, *args):
    start = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - start


def retrieval_benchmark(net, head, images: Tensor, ids: Tensor, keep: Tensor, k: int = K,
                        batch: int = 256, all_pairs_queries: int | None = None
                        ) -> dict[str, Any]:
    """All-pairs ITM against ITC + ITM top-``k``, both ways, on P photos and their P captions
    (caption i is photo i's): wall time, pairs scored, R@1 of each, and ``speedup``.

    ``all_pairs_queries``: score all pairs for this many captions only (an even sample) and
    scale the encoder's time by the pair count (the tower's, once per photo, is measured whole);
    R@1 of all pairs is then text → image over those captions and image → text among them.
    """
    net, head = net.eval(), head.eval()
    P = len(images)
    queries = P if all_pairs_queries is None else min(all_pairs_queries, P)
    sample = torch.linspace(0, P - 1, queries).round().long()  # (Cq,)
    features, tower_s = _timed(tower_features, net, images, batch)
    matrix, pairs_s = _timed(all_pairs, net, head, features, ids, keep, sample, batch)
    pairs = P * P
    measured = matrix.numel()
    truth = torch.arange(P)
    full = {
        "pairs": pairs, "pairs_timed": measured,
        "wall_s": round(tower_s + pairs_s * pairs / measured, 2),  # the tower runs once anyway
        "estimate": measured < pairs,
        "r1_text_to_image": _share(matrix.argmax(dim=1) == sample),
        # Among the sampled captions only when sampled: each photo's caption is then often absent.
        "r1_image_to_text": _share(sample[matrix[:, sample].argmax(dim=0)] == sample),
    }
    (t2i, i2t, itm_pairs), seconds = _timed(itc_then_itm, net, head, images, ids, keep, k, batch)
    fast = {"itm_pairs": itm_pairs, "itc_pairs": pairs, "wall_s": round(seconds, 2),
            "r1_text_to_image": _share(t2i == truth), "r1_image_to_text": _share(i2t == truth),
            "r1_text_to_image_on_the_all_pairs_sample": _share(t2i[sample] == sample)}
    return {"photos": P, "captions": P, "k": k, "all_pairs_itm": full, "itc_then_itm": fast,
            # From the unrounded times: a tiny set can take under 5 ms, which rounds to 0.
            "speedup": round((tower_s + pairs_s * pairs / measured) / max(seconds, 1e-9), 1),
            "pair_ratio": round(pairs / itm_pairs, 1)}


def scaled_estimate(net, head, images: Tensor, ids: Tensor, keep: Tensor, photos: int,
                    captions: int, k: int = K, batch: int = 16) -> dict[str, Any]:
    """Per-photo, per-caption and per-pair times measured on a reduced set, scaled to
    ``photos`` × ``captions`` (Flickr30k's 1k test: 1,000 × 5,000): an estimate, said so."""
    net, head = net.eval(), head.eval()
    P, C = len(images), len(ids)
    features, tower_s = _timed(tower_features, net, images, batch)
    _, text_s = _timed(text_embeddings, net, ids, keep, batch)
    rows = torch.arange(C).repeat_interleave(P), torch.arange(P).repeat(C)
    _, pairs_s = _timed(itm_logits, net, head, ids, keep, features, *rows, batch)
    per_photo, per_caption, per_pair = tower_s / P, text_s / C, pairs_s / (P * C)
    all_itm = photos * captions
    few_itm = k * (photos + captions)
    slow = photos * per_photo + all_itm * per_pair
    fast = photos * per_photo + captions * per_caption + few_itm * per_pair
    return {"estimate": True, "measured_on": {"photos": P, "captions": C, "pairs": P * C},
            "photos": photos, "captions": captions, "k": k,
            "ms_per_photo": round(1e3 * per_photo, 2),
            "ms_per_caption": round(1e3 * per_caption, 2),
            "ms_per_itm_pair": round(1e3 * per_pair, 2),
            "all_pairs_itm": {"pairs": all_itm, "wall_s": round(slow, 1)},
            "itc_then_itm": {"itm_pairs": few_itm, "itc_pairs": all_itm, "wall_s": round(fast, 1)},
            "speedup": round(slow / fast, 1)}


def _share(hits: Tensor) -> float:
    return round(100.0 * hits.float().mean().item(), 2)


__all__ = ["K", "all_pairs", "itc_then_itm", "retrieval_benchmark", "scaled_estimate"]
