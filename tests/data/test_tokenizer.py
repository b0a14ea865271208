"""WordPiece tokenizer: training, the BERT pipeline, and every way of loading it back."""

from __future__ import annotations

import pytest

from vitbert.data.tokenizer import (
    SPECIAL_TOKENS,
    load_tokenizer,
    save_tokenizer,
    tokenizer_from_json,
    tokenizer_to_json,
    train_wordpiece,
)

TEXTS = ["A dog is playing in the grass .", "Two dogs playing with a ball .",
         "A man is walking a dog .", "Children are playing outside ."] * 20


@pytest.fixture(scope="module")
def tok():
    return train_wordpiece(TEXTS, vocab_size=200, min_frequency=2)


def test_special_tokens_first_and_named(tok):
    assert tok.convert_tokens_to_ids(SPECIAL_TOKENS) == [0, 1, 2, 3, 4]
    assert (tok.pad_token, tok.unk_token, tok.cls_token, tok.sep_token, tok.mask_token) == tuple(
        SPECIAL_TOKENS)


def test_pipeline_lowercases_splits_punctuation_and_wraps(tok):
    ids = tok("A DOG.Playing")["input_ids"]
    pieces = tok.convert_ids_to_tokens(ids)
    assert pieces == ["[CLS]", "a", "dog", ".", "playing", "[SEP]"]
    assert tok.decode(ids, skip_special_tokens=True) == "a dog. playing"


def test_vocab_size_is_a_ceiling(tok):
    assert 10 < len(tok) <= 200


def test_json_round_trip_is_identical(tok):
    again = tokenizer_from_json(tokenizer_to_json(tok))
    assert again.get_vocab() == tok.get_vocab()
    s = "a man is playing with two dogs ."
    assert again(s)["input_ids"] == tok(s)["input_ids"]


def test_load_file_folder_and_vocab_txt(tok, tmp_path):
    s = "children are playing with a ball ."
    path = save_tokenizer(tok, tmp_path / "tok" / "tokenizer.json")
    assert load_tokenizer(path)(s)["input_ids"] == tok(s)["input_ids"]
    assert load_tokenizer(path.parent)(s)["input_ids"] == tok(s)["input_ids"]
    vocab = sorted(tok.get_vocab().items(), key=lambda kv: kv[1])
    (tmp_path / "vocab.txt").write_text("\n".join(p for p, _ in vocab) + "\n")
    from_txt = load_tokenizer(tmp_path / "vocab.txt")
    assert from_txt(s)["input_ids"] == tok(s)["input_ids"]


def test_missing_special_tokens_and_paths_are_clear_errors(tmp_path):
    (tmp_path / "vocab.txt").write_text("[UNK]\nhello\n")
    with pytest.raises(ValueError, match=r"\[CLS\]"):
        load_tokenizer(tmp_path / "vocab.txt")
    with pytest.raises(FileNotFoundError, match=r"no tokenizer\.json"):
        (tmp_path / "empty").mkdir()
        load_tokenizer(tmp_path / "empty")
