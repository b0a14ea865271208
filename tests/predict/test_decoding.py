"""vitbert.decoding: the one reading of guesses, shared by FillMask, predict_step and examples."""

from __future__ import annotations

import pytest
import torch

from vitbert.decoding import guesses, prediction_records, show_targets_as_mask, special_token_ids


@pytest.fixture(scope="module")
def tokenizer(fill_mask):
    return fill_mask.tokenizer


def test_guesses_are_whole_vocabulary_probabilities_without_special_tokens(tokenizer):
    V = len(tokenizer)
    logits = torch.randn(3, V)
    special = special_token_ids(tokenizer)
    logits[:, special] = 50.0  # the model's favourites, yet never offered
    got = guesses(logits, 4, tokenizer)
    probs = logits.softmax(-1)
    for row, row_guesses in enumerate(got):
        assert [g["token"] for g in row_guesses] == [
            t for t in probs[row].argsort(descending=True).tolist() if t not in special][:4]
        assert [g["score"] for g in row_guesses] == pytest.approx(
            [probs[row, g["token"]].item() for g in row_guesses])
        assert all(g["token_str"] == tokenizer.decode([g["token"]]) for g in row_guesses)


def test_records_align_guesses_with_their_captions_and_skip_unread_ones(tokenizer):
    batch = tokenizer(["a red circle", "a blue square left of a cross"], padding="longest",
                      return_tensors="pt")
    ids = batch["input_ids"]
    labels = torch.full_like(ids, -100)
    labels[0, 2], labels[1, 2], labels[1, 5] = ids[0, 2], ids[1, 2], ids[1, 5]
    batch = {"input_ids": ids, "attention_mask": batch["attention_mask"].bool(), "labels": labels,
             "index": torch.tensor([7, 8]), "image_id": torch.tensor([3, 4])}
    batch = show_targets_as_mask(batch, tokenizer.mask_token_id)
    V = len(tokenizer)
    # Logits that make each target's truth the best guess, in reading order.
    truth_logits = torch.nn.functional.one_hot(labels[labels != -100], V).float() * 20
    readings = {"with_image": (truth_logits, torch.tensor([True, True])),
                "another_image": (truth_logits[1:], torch.tensor([False, True]))}
    records = prediction_records(tokenizer, batch, readings, k=2)
    assert [r["index"] for r in records] == [7, 8] and [r["image_id"] for r in records] == [3, 4]
    assert records[0]["text"] == "a [MASK] circle"
    assert records[1]["text"].count("[MASK]") == 2 and "[PAD]" not in records[0]["text"]
    assert [m["truth"] for m in records[1]["masks"]] == ["blue", "of"]
    for record in records:
        for mask in record["masks"]:
            assert mask["with_image"][0]["token_str"] == mask["truth"]
    assert records[0]["masks"][0]["another_image"] is None  # this caption was not read
    assert records[1]["masks"][1]["another_image"][0]["token_str"] == "of"


def test_a_reading_of_no_caption_gives_none_everywhere(tokenizer):
    ids = tokenizer(["a red circle"], return_tensors="pt")["input_ids"]
    labels = torch.full_like(ids, -100)
    labels[0, 2] = ids[0, 2]
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids, dtype=torch.bool),
             "labels": labels, "index": torch.tensor([0])}
    logits = torch.randn(1, len(tokenizer))
    records = prediction_records(tokenizer, batch, {"with_image": (logits, torch.tensor([True])),
                                                    "another_image": (None, torch.tensor([False]))},
                                 k=3)
    assert "image_id" not in records[0]  # the batch has none
    assert records[0]["masks"][0]["another_image"] is None
    assert len(records[0]["masks"][0]["with_image"]) == 3
