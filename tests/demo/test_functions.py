"""The functions behind the page, called directly: what they return, and each error's message."""

from __future__ import annotations

import re

import numpy as np
import pytest
from PIL import Image

from vitbert import demo
from vitbert.shapes import data as shapes


def test_gallery_holds_the_default_test_pictures_with_a_colour_hidden():
    examples = demo.shapes_examples(32, count=5)
    images, captions = shapes.generate(2000, 32, 0, "test")  # the default's test split
    assert len(examples) == 5
    for i, example in enumerate(examples):
        assert example.image.shape == (32, 32, 3) and example.image.dtype == np.uint8
        np.testing.assert_array_equal(example.image, images[i].transpose(1, 2, 0))
        assert example.label == captions[i]
        assert example.text.count("[MASK]") == 1
        hidden = example.text.split().index("[MASK]")
        assert example.text.replace("[MASK]", captions[i].split()[hidden]) == captions[i]
        assert captions[i].split()[hidden] in shapes.COLOURS


def test_hide_first_falls_back_to_the_last_word():
    assert demo.hide_first("a red circle", {"red"}) == "a [MASK] circle"
    assert demo.hide_first("a big circle", {"red"}) == "a big [MASK]"


def test_answer_is_the_models_compare_and_a_picture(demo_fill_mask, trained):
    text = "a small [MASK] circle left of a large [MASK] square"
    found = demo.answer(demo_fill_mask, str(trained.photo), text, top_k=4)
    expected = demo_fill_mask.compare(text, str(trained.photo), top_k=4)
    assert [[g["token"] for g in m["with_image"]] for m in found.result["masks"]] == \
        [[g["token"] for g in m["with_image"]] for m in expected["masks"]]
    for got, want in zip(found.result["masks"], expected["masks"], strict=True):
        assert [g["score"] for g in got["text_only"]] == \
            pytest.approx([g["score"] for g in want["text_only"]], abs=1e-5)
    assert len(found.result["masks"]) == 2
    assert found.attention.mode in ("RGB", "RGBA") and min(found.attention.size) > 300
    assert found.seconds > 0


def test_bars_mark_exactly_the_words_the_photo_brought_in():
    guess = lambda token, word, score: {"token": token, "token_str": word, "score": score}  # noqa: E731
    result = {"text": "x", "masks": [{
        "index": 0,
        "with_image": [guess(1, "red", 0.6), guess(2, "<b>", 0.3), guess(3, "blue", 0.1)],
        "text_only": [guess(3, "blue", 0.5), guess(4, "green", 0.4), guess(5, "a", 0.1)],
    }]}
    page = demo.bars_html(result)
    with_photo = page.split('class="vb-column vb-with-photo"')[1].split('class="vb-column')[0]
    rows = re.findall(r'<div class="vb-row( vb-brought-in)?"><span class="vb-word">(.*?)</span>',
                      with_photo)
    assert rows == [(" vb-brought-in", "red"), (" vb-brought-in", "&lt;b&gt;"), ("", "blue")]
    assert "<b>" not in page.split("</style>")[1]  # escaped, never markup
    assert 'style="width:60.0%"' in page
    text_only = page.split('class="vb-column vb-text-only"')[1]
    assert "vb-brought-in" not in text_only
    assert re.findall(r'class="vb-word">(.*?)</span>', text_only) == ["blue", "green", "a"]


LONG = "a small [MASK] circle " * 10  # under the character limit, over 32 word pieces


@pytest.mark.parametrize(("image", "text", "top_k", "says"), [
    (None, "a [MASK] circle", 5, "No photo yet"),
    ("photo", "   ", 5, "No sentence yet"),
    ("photo", "a red circle", 5, "No [MASK] in the sentence"),
    ("photo", "a [MASK] " * 300, 5, f"at most {demo.MAX_TEXT_CHARS}"),
    ("photo", LONG, 5, "word pieces long"),
    ("photo", "a [MASK] circle", 0, "top-k 0"),
    ("photo", "a [MASK] circle", demo.MAX_TOP_K + 1, "whole number"),
    ("photo", "a [MASK] circle", 2.5, "whole number"),
    ("broken", "a [MASK] circle", 5, "Cannot read the photo 'broken.png'"),
    ("text file", "a [MASK] circle", 5, "Cannot read the photo 'notes.txt'"),
])
def test_each_bad_query_is_a_status_line_not_an_exception(demo_fill_mask, trained, tmp_path,
                                                          image, text, top_k, says):
    if image == "photo":
        image = str(trained.photo)
    elif image == "broken":
        image = tmp_path / "broken.png"
        image.write_bytes(b"\x89PNG\r\n\x1a\n" + b"not really a png" * 4)
    elif image == "text file":
        image = tmp_path / "notes.txt"
        image.write_text("hello")
    with pytest.raises(demo.DemoInputError, match=re.escape(says)):
        demo.answer(demo_fill_mask, image, text, top_k)
    status, bars, picture, as_json = demo.respond(demo_fill_mask, image, text, top_k)
    assert status.startswith("**Cannot answer:**") and says in status
    assert (bars, picture, as_json) == ("", None, None)  # no stale answer left showing


def test_a_bug_is_reported_in_the_page_and_does_not_raise(trained):
    class Broken:
        device = "cpu"
        image_size = 32

        def compare(self, *args, **kwargs):
            raise RuntimeError("kaboom")

    status, bars, picture, as_json = demo.respond(Broken(), str(trained.photo), "a [MASK]", 3)
    assert status == "**Something went wrong:** RuntimeError: kaboom"
    assert (bars, picture, as_json) == ("", None, None)


def test_respond_answers_with_time_and_all_outputs(demo_fill_mask, trained):
    status, bars, picture, as_json = demo.respond(demo_fill_mask, str(trained.photo),
                                                  "a small [MASK] circle", 3)
    assert re.fullmatch(r"Answered in \d+\.\d\d s on cpu .*", status)
    assert bars.count('class="vb-row') == 6 and isinstance(picture, Image.Image)
    assert [g["token_str"] for g in as_json["masks"][0]["with_image"]] == \
        re.findall(r'class="vb-word">(.*?)</span>', bars)[:3]


def test_the_answer_names_the_words_read_as_unk(demo_fill_mask, trained):
    from vitbert.predict import unknown_words, unknown_words_warning

    text = "a small [MASK] circle left of a zebra"
    assert unknown_words(demo_fill_mask.tokenizer, text) == ["zebra"]  # no "z" in shapes captions
    status, bars, _, as_json = demo.respond(demo_fill_mask, str(trained.photo), text, 3)
    assert status.startswith("Answered in ")
    warning = unknown_words_warning(["zebra"]).replace("'", "&#x27;")  # HTML-escaped
    assert f'<p class="vb-warning">⚠ {warning}</p>' in bars
    assert bars.index("vb-warning") < bars.index('class="vb-mask"')  # above the guesses
    assert as_json["unknown_words"] == ["zebra"] and "'zebra'" in as_json["warning"]
    _, bars, _, as_json = demo.respond(demo_fill_mask, str(trained.photo), "a [MASK] circle", 3)
    assert "vb-warning" not in bars.split("</style>")[1] and as_json["warning"] is None


def test_bars_escape_the_warning():
    result = {"text": "x", "warning": "1 word not in this model's vocabulary: '<b>'", "masks": []}
    page = demo.bars_html(result)
    assert "&lt;b&gt;" in page and "<b>" not in page.split("</style>")[1]


def test_folder_examples_keep_readable_photos_in_name_order(tmp_path):
    rng = np.random.default_rng(0)
    Image.fromarray(rng.integers(0, 256, (900, 1200, 3), dtype=np.uint8)).save(tmp_path / "b.jpg")
    Image.fromarray(rng.integers(0, 256, (20, 30), dtype=np.uint8)).save(tmp_path / "a.png")
    (tmp_path / "c.png").write_bytes(b"broken")
    (tmp_path / "notes.txt").write_text("not a photo")
    # An RGB JPEG no larger than the display size (every Flickr30k photo): nothing to shrink,
    # so nothing decodes it before its file is closed unless the reader does.
    Image.fromarray(rng.integers(0, 256, (375, 500, 3), dtype=np.uint8)).save(tmp_path / "d.jpg")
    examples = demo.folder_examples(tmp_path)
    assert [ex.label for ex in examples] == ["a.png", "b.jpg", "d.jpg"]
    assert examples[2].image.shape == (375, 500, 3)
    assert examples[0].image.shape == (20, 30, 3)  # grey → RGB
    assert max(examples[1].image.shape[:2]) == demo.EXAMPLE_MAX_SIDE  # shrunk, same aspect
    assert examples[1].image.shape[:2] == (480, 640)
    assert all("[MASK]" in ex.text for ex in examples)


def test_folder_examples_errors(tmp_path):
    with pytest.raises(demo.DemoInputError, match="no such folder"):
        demo.folder_examples(tmp_path / "missing")
    (tmp_path / "c.png").write_bytes(b"broken")
    with pytest.raises(demo.DemoInputError, match="no readable photo"):
        demo.folder_examples(tmp_path)


def test_caption_hook_follows_whether_vitbert_has_a_captioner(monkeypatch):
    import vitbert

    try:
        from vitbert import Captioner
    except ImportError:
        Captioner = None
    assert demo.captioner_class() is Captioner
    monkeypatch.setattr(vitbert, "Captioner", "stand-in", raising=False)
    assert demo.captioner_class() == "stand-in"


def _labels(app) -> list[str]:
    return [block.value for block in app.blocks.values()
            if type(block).__name__ == "Button"]


def test_caption_button_only_with_a_captioner(demo_fill_mask, trained):
    calls = []

    def captioner(image, num_beams):
        calls.append((image.size, num_beams))
        return [{"caption": "a red <circle>", "score": -1.0}]

    examples = demo.shapes_examples(32, count=2)
    assert "Write a caption" not in _labels(demo.build_app(demo_fill_mask, examples))
    assert "Write a caption" in _labels(demo.build_app(demo_fill_mask, examples, captioner))
    assert demo.write_caption(captioner, str(trained.photo), "greedy") == \
        "**Caption (greedy):** a red &lt;circle&gt;"
    assert demo.write_caption(captioner, str(trained.photo), "beam").startswith("**Caption (beam)")
    assert calls == [((32, 32), 1), ((32, 32), 3)]
    assert demo.write_caption(captioner, None, "beam").startswith("**Cannot caption:**")
