"""The shapes data's own caption score (vitbert.shapes.captions), and how it reaches the caption
evaluation: through the source (``ShapesSource.caption_scores``), never through the core."""

from vitbert.data import CaptionedPhotos
from vitbert.run.console import format_caption_figures
from vitbert.shapes import ShapesSource
from vitbert.shapes.captions import (
    CAPTION_SCORE_LABELS,
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


def test_the_shapes_source_scores_captions_and_labels_its_figures():
    reference = "a small red circle left of a large blue square"
    written = ["a red circle left of a blue square", "a red circle left of a blue circle"]
    scores = ShapesSource().caption_scores(written, [[reference], [reference]])
    assert scores == {"colour_shape": 0.5, "colours": 1.0, "shapes": 0.5}
    assert list(ShapesSource().caption_score_labels()) == list(scores)
    assert CaptionedPhotos().caption_scores(written, [[reference], [reference]]) == {}
    assert CaptionedPhotos().caption_score_labels() == {}


def test_the_table_prints_a_sources_figures_as_a_headline_and_its_parts():
    figures = {"val/bleu4": 0.523, "val/cider": 4.756, "val/colour_shape": 0.975,
               "val/colours": 1.0, "val/shapes": 0.98, "val/bleu4_text": 0.113,
               "val/cider_text": 1.133, "val/colour_shape_text": 0.01, "val/colours_text": 0.08,
               "val/shapes_text": 0.06}
    photo, text = format_caption_figures(figures, "val", CAPTION_SCORE_LABELS)
    assert photo.endswith("BLEU-4 52.3   CIDEr-D 475.6   colours and shapes all right 97.5% "
                          "(colours 100%, shapes 98%)")
    assert text.endswith("colours and shapes all right 1.0% (colours 8%, shapes 6%)")
    # Without labels (a source with no figures of its own), BLEU-4 and CIDEr-D alone.
    assert format_caption_figures(figures, "val")[0].endswith("CIDEr-D 475.6")
    reranked = {"val/bleu4_reranked": 0.6, "val/cider_reranked": 5.0,
                "val/colour_shape_reranked": 0.9}
    *_, last = format_caption_figures(figures | reranked, "val", CAPTION_SCORE_LABELS)
    assert last == ("captions, reranked        BLEU-4 60.0   CIDEr-D 500.0   colours and shapes "
                    "all right 90.0%")
