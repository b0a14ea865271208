"""Caption metrics: CIDEr-D equals coco-caption's, BLEU-4 a hand-computed value."""

import pytest

from vitbert.lit.metrics import CaptionMetrics, cider_d, tokenize

REFERENCES = [
    ["a man is riding a horse on the beach", "a person rides a brown horse along the shore",
     "someone on horseback at the seaside"],
    ["two dogs play with a red ball in the grass", "a pair of dogs chase a ball",
     "dogs running on a lawn"],
    ["a small red circle left of a large blue square",
     "there is a red circle to the left of a blue square"],
    ["a child eats an ice cream cone", "a little girl with ice cream"],
]
CANDIDATES = ["a man rides a horse on the beach", "two dogs chase a red ball",
              "a red circle left of a blue square", "a dog runs on the grass"]


def test_cider_d_matches_the_coco_caption_implementation():
    # pycocoevalcap 1.2, Cider().compute_score on these captions (tokenised alike), run once:
    # 2.349856320881493, per image [2.3357482171151203, 2.0932837550185788, 4.970393311392273, 0]
    corpus, per_image = cider_d(CANDIDATES, REFERENCES)
    assert corpus == pytest.approx(2.349856320881493, abs=1e-9)
    assert per_image == pytest.approx([2.3357482171151203, 2.0932837550185788,
                                       4.970393311392273, 0.0], abs=1e-9)


def test_bleu4_matches_a_hand_computed_value():
    metrics = CaptionMetrics()
    # Precisions 5/6, 4/5, 3/4, 2/3, no brevity penalty: (1/3) ** (1/4).
    metrics.update(["A b c d e f."], [["a b c d e g", "x y"]])
    assert metrics.compute()["bleu4"] == pytest.approx((1 / 3) ** 0.25, abs=1e-6)


def test_tokenize_drops_punctuation_and_case():
    assert tokenize("A dog's red Ball.") == ["a", "dog", "s", "red", "ball"]


def test_only_bleu4_and_cider_d_whatever_the_captions():
    metrics = CaptionMetrics()
    metrics.update(CANDIDATES, REFERENCES)  # one of them a shapes caption: no figure of its own
    assert set(metrics.compute()) == {"bleu4", "cider"}
