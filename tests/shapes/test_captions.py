"""The shapes data's own caption score (vitbert.shapes.captions): does a caption name both objects'
colours and shapes (``scripts/analyze.py --captions`` reports it)."""

from vitbert.run.console import format_caption_figures
from vitbert.shapes.captions import (
    colour_shape_shares,
    colours_and_shapes_right,
    object_verdicts,
)


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
    assert colour_shape_shares(["a red circle"], ["a dog runs"]) is None  # not a shapes caption


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


def test_the_shares_of_captions_with_colours_and_shapes_right():
    reference = "a small red circle left of a large blue square"
    written = ["a red circle left of a blue square", "a red circle left of a blue circle"]
    assert colour_shape_shares(written, [reference, reference]) == {
        "colour_shape": 0.5, "colours": 1.0, "shapes": 0.5}


def test_the_table_prints_bleu_and_cider_with_the_photo_without_and_reranked():
    figures = {"val/bleu4": 0.523, "val/cider": 4.756, "val/bleu4_text": 0.113,
               "val/cider_text": 1.133, "val/bleu4_reranked": 0.6, "val/cider_reranked": 5.0}
    assert format_caption_figures(figures, "val") == [
        "captions, with the photo  BLEU-4 52.3   CIDEr-D 475.6",
        "captions, no image        BLEU-4 11.3   CIDEr-D 113.3",
        "captions, reranked        BLEU-4 60.0   CIDEr-D 500.0"]
