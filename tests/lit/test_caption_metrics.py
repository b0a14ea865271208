"""Caption metrics: CIDEr-D equals coco-caption's, BLEU-4 a hand-computed value."""

import pytest

from vitbert.lit.caption_metrics import (
    CaptionMetrics,
    cider_d,
    colours_and_shapes_right,
    object_verdicts,
    tokenize,
)

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


def test_colour_and_shape_words():
    reference = "a small red circle left of a large blue square"
    def right(candidate):
        return colours_and_shapes_right(candidate, reference)

    assert right("the blue square is right of the red circle") == {
        "colour_shape": True, "colours": True, "shapes": True}
    # Both shapes named, on the wrong objects: the colours and the shapes are each right.
    assert right("a blue circle left of a red square") == {
        "colour_shape": False, "colours": True, "shapes": True}
    assert right("a red circle left of a blue circle") == {
        "colour_shape": False, "colours": True, "shapes": False}
    assert right("a red circle left of a red square") == {
        "colour_shape": False, "colours": False, "shapes": True}
    assert right("a red circle") == {"colour_shape": False, "colours": False, "shapes": False}
    assert colours_and_shapes_right("a dog on the grass", "a dog runs") is None
    metrics = CaptionMetrics()
    metrics.update(["a red circle left of a blue square", "a red circle left of a blue circle"],
                   [[reference], [reference]])
    figures = metrics.compute()
    assert (figures["colour_shape"], figures["colours"], figures["shapes"]) == (0.5, 1.0, 0.5)
    metrics.reset()
    metrics.update(CANDIDATES, REFERENCES)
    assert "colour_shape" not in metrics.compute()  # not every reference is a shapes caption


def test_object_verdicts_tell_binding_from_other_mistakes():
    reference = "a small red circle left of a large blue square"
    red, blue = ("red", "circle"), ("blue", "square")

    def verdicts(candidate):
        return object_verdicts(candidate, reference)

    assert verdicts("the blue square is right of the red circle") == [
        (red, "right"), (blue, "right")]
    # The two shapes swapped: each colour got the other object's shape.
    assert verdicts("a red square left of a blue circle") == [
        (red, "other_object"), (blue, "other_object")]
    assert verdicts("a red circle left of a blue circle") == [
        (red, "right"), (blue, "other_object")]
    assert verdicts("a red circle left of a blue cross") == [(red, "right"), (blue, "other_shape")]
    assert verdicts("a red circle left of a large green square") == [
        (red, "right"), (blue, "not_named")]
    # Twice the same pair: one named right, the other not named; a right pair is spoken for once.
    twice = "a red circle above a red circle"
    assert object_verdicts("a red circle above a blue cross", twice) == [
        (red, "right"), (red, "not_named")]
    assert object_verdicts("a dog runs", "a dog on the grass") == []
