"""Vocabulary honesty: a word the model cannot spell is read as [UNK], and every way of asking
(FillMask, compare, scripts/predict.py and its --json) says which words; a sentence too long is
refused with the reason (the length the model was trained with, from its checkpoint)."""

from __future__ import annotations

import json
import warnings

import pytest
from helpers import load_script

from vitbert.data.tokenizer import train_wordpiece
from vitbert.predict import PredictError, UnknownWordsWarning, unknown_words, unknown_words_warning

CAPTIONS = ["a red square left of a blue circle", "a blue circle right of a red square",
            "the square is above the circle"]
# "zebra": no word of CAPTIONS has a "z"; "quick": "q" only inside "square" (as ##q), never
# starting a word; no caption has punctuation. All become [UNK]; "reds" is spelled red ##s.
TEXT = "a Zebra, left of the [MASK] ; quick red zebra a Zebra reds"


@pytest.fixture(scope="module")
def tokenizer():
    return train_wordpiece(CAPTIONS, 100, 1)


def test_the_words_read_as_unk_are_named_as_typed_in_order_once_each(tokenizer):
    pieces = tokenizer.tokenize(TEXT)
    assert pieces.count("[UNK]") == 6 and pieces[-2:] == ["red", "##s"]
    assert unknown_words(tokenizer, TEXT) == ["Zebra", ",", ";", "quick", "zebra"]
    assert unknown_words(tokenizer, "a red [MASK] left of a blue circle") == []


def test_a_word_spelled_letter_by_letter_is_unknown_and_longer_pieces_are_not(tokenizer):
    assert tokenizer.tokenize("child") == ["c", "##h", "##i", "##l", "##d"]  # never a word
    assert tokenizer.tokenize("tree") == ["t", "##re", "##e"]  # "re" is a piece it learnt
    assert unknown_words(tokenizer, "a child by a tree , reds") == ["child", "by", ","]


def test_a_typed_unk_and_the_mask_are_not_words(tokenizer):
    assert unknown_words(tokenizer, "a [UNK] [MASK] square") == []


def test_the_warning_is_one_line_naming_each_word():
    message = unknown_words_warning(["Zebra", ";"])
    assert "\n" not in message
    assert message.startswith("2 words not in this model's vocabulary (read as [UNK] or letter")
    assert message.endswith(": 'Zebra', ';'")
    assert unknown_words_warning(["zebra"]).startswith("1 word not in")
    assert unknown_words_warning([]) is None


# ------------------------------------------------------------------ with the trained checkpoint

QUERY = "a large [MASK] circle left of a zebra"


@pytest.fixture
def zebra_is_unknown(fill_mask):
    """The checkpoint's own tokenizer reads "zebra" as [UNK] (shapes captions have no "z")."""
    assert "[UNK]" in fill_mask.tokenizer.tokenize("zebra")
    assert unknown_words(fill_mask.tokenizer, QUERY) == ["zebra"]


def test_compare_names_the_unknown_words(fill_mask, trained, zebra_is_unknown):
    result = fill_mask.compare(QUERY, trained.photo, top_k=3)
    assert list(result) == ["text", "unknown_words", "warning", "masks"]
    assert result["unknown_words"] == ["zebra"]
    assert result["warning"] == unknown_words_warning(["zebra"])
    known = fill_mask.compare("a large [MASK] circle", trained.photo, top_k=3)
    assert (known["unknown_words"], known["warning"]) == ([], None)


def test_fill_mask_call_warns_and_still_answers(fill_mask, trained, zebra_is_unknown):
    with pytest.warns(UnknownWordsWarning, match=r"'zebra'$") as caught:
        guesses = fill_mask(QUERY, image=trained.photo, top_k=3)
    assert len(guesses) == 3 and len(caught) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnknownWordsWarning)  # a known sentence: no warning
        fill_mask("a large [MASK] circle", image=trained.photo, top_k=3)


def test_the_script_prints_one_warning_line_and_has_it_in_json(trained, capsys,
                                                               zebra_is_unknown):
    script = load_script("predict")
    argv = ["--ckpt", str(trained.ckpt), "--image", str(trained.photo), "--device", "cpu",
            "--text", QUERY]
    assert script.main(argv) == 0
    captured = capsys.readouterr()
    warning = [line for line in captured.err.splitlines() if line.startswith("warning: ")]
    assert warning == [f"warning: {unknown_words_warning(['zebra'])}"]
    assert captured.out.startswith(QUERY)  # the table, as ever

    assert script.main([*argv, "--json"]) == 0
    captured = capsys.readouterr()
    output = json.loads(captured.out)  # stdout stays one JSON document
    assert output["unknown_words"] == ["zebra"]
    assert output["warning"] == unknown_words_warning(["zebra"])
    assert "warning: " in captured.err

    assert script.main([*argv[:-1], "a large [MASK] circle", "--json"]) == 0
    captured = capsys.readouterr()
    assert "warning" not in captured.err
    assert json.loads(captured.out)["unknown_words"] == []


def test_too_long_says_the_model_was_trained_that_short(fill_mask):
    N = fill_mask.max_len
    assert N == fill_mask.model.config.text.max_len  # from the checkpoint
    with pytest.raises(PredictError) as refused:
        fill_mask("a [MASK] " + "square " * 40)
    message = str(refused.value)
    assert "word pieces long" in message
    assert f"trained with max_len {N} (its checkpoint's text.max_len)" in message
    assert f"learned positions for {N} pieces only" in message
    assert f"at most {N - 2} pieces between [CLS] and [SEP]" in message
