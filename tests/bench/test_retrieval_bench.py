"""The retrieval bench measures what it says: with a shortlist as long as the whole set, ITC + ITM
ranks exactly as all-pairs ITM; the pair counts are the protocol's; the estimate scales by them."""

from __future__ import annotations

import torch

from vitbert.bench.retrieval import all_pairs, retrieval_benchmark, scaled_estimate
from vitbert.models import ITMHead, VitBert, VitBertConfig


def tiny(P: int = 6, T: int = 7):
    torch.manual_seed(0)
    config = VitBertConfig.from_dict({
        "vocab_size": 50, "itc_dim": 8, "image_tokens": "patches",
        "image": {"kind": "conv_stem", "dim": 16, "depth": 1, "num_heads": 2,
                  "stem_hidden_dim": 8},
        "text": {"dim": 16, "depth": 1, "num_heads": 2}})
    net, head = VitBert(config).eval(), ITMHead(16).eval()
    images = torch.randint(0, 256, (P, 3, 32, 32), dtype=torch.uint8)
    ids = torch.randint(5, 50, (P, T))
    keep = torch.ones(P, T, dtype=torch.bool)
    keep[0, 4:] = False  # one padded caption
    return net, head, images, ids, keep


def test_a_full_shortlist_ranks_as_all_pairs():
    net, head, images, ids, keep = tiny()
    figures = retrieval_benchmark(net, head, images, ids, keep, k=len(images), batch=4)
    slow, fast = figures["all_pairs_itm"], figures["itc_then_itm"]
    assert slow["r1_text_to_image"] == fast["r1_text_to_image"]
    assert slow["r1_image_to_text"] == fast["r1_image_to_text"]
    assert (slow["pairs"], fast["itm_pairs"]) == (36, 72) and not slow["estimate"]
    assert set(figures) >= {"speedup", "pair_ratio", "photos", "k"}


def test_all_pairs_scores_each_caption_with_each_photo_alone():
    net, head, images, ids, keep = tiny()
    features = net.tower_tokens(images)
    matrix = all_pairs(net, head, features, ids, keep, torch.tensor([0, 3]), batch=5)
    with torch.no_grad():
        hidden, _ = net.encode(ids[3:4], keep[3:4], net.photos(images[2:3]))
    assert matrix.shape == (2, 6)
    torch.testing.assert_close(matrix[1, 2], head(hidden[:, 0])[0].float(), atol=1e-5, rtol=0)


def test_a_sampled_run_is_an_estimate_over_all_pairs():
    net, head, images, ids, keep = tiny()
    figures = retrieval_benchmark(net, head, images, ids, keep, k=2, all_pairs_queries=2)
    assert figures["all_pairs_itm"]["estimate"] and figures["all_pairs_itm"]["pairs_timed"] == 12
    assert figures["itc_then_itm"]["itm_pairs"] == 2 * (6 + 6)


def test_the_flickr_estimate_counts_the_protocols_pairs():
    net, head, images, ids, keep = tiny(P=2)
    figures = scaled_estimate(net, head, images, ids[:2], keep[:2], photos=1000, captions=5000)
    assert figures["all_pairs_itm"]["pairs"] == 5_000_000
    assert figures["itc_then_itm"]["itm_pairs"] == 16 * 6000
    assert figures["estimate"] is True and figures["speedup"] > 1
