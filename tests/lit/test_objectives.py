"""The seq2seq batch: hides caption pieces at a per-caption rate, never the prompt or padding."""

import torch

from vitbert.lit.objectives import IGNORE_INDEX, seq2seq_batch

MASK = 4


def mlm_batch():
    """Four captions [CLS] w… [SEP] [PAD]…, with a BERT-style target already drawn in each."""
    lengths = [12, 9, 3, 12]
    input_ids = torch.zeros(4, 12, dtype=torch.long)
    attention_mask = torch.zeros(4, 12, dtype=torch.bool)
    for b, n in enumerate(lengths):
        input_ids[b, :n] = torch.arange(10, 10 + n) + 20 * b
        input_ids[b, 0], input_ids[b, n - 1] = 2, 3
        attention_mask[b, :n] = True
    caption = input_ids.clone()
    labels = torch.full_like(input_ids, IGNORE_INDEX)
    labels[:, 1] = input_ids[:, 1]
    input_ids[:, 1] = MASK
    return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels,
            "images": torch.zeros(4, 3, 8, 8)}, caption


def test_targets_are_caption_pieces_and_inputs_are_masks():
    batch, caption = mlm_batch()
    rates = []
    for seed in range(50):
        out = seq2seq_batch(batch, MASK, torch.Generator().manual_seed(seed))
        hidden = out["labels"] != IGNORE_INDEX
        assert not hidden[:, 0].any(), "[CLS] is the prompt, never a target"
        assert not (hidden & ~batch["attention_mask"]).any(), "padding is never a target"
        assert hidden.sum(dim=1).min() >= 1, "every caption has a target"
        assert (out["labels"][hidden] == caption[hidden]).all()
        assert (out["input_ids"][hidden] == MASK).all()
        assert (out["input_ids"][~hidden] == caption[~hidden]).all(), "the MLM mask is undone"
        assert out["images"] is batch["images"]
        rates.append(hidden[0].sum().item() / 11)
        if hidden[0, 11]:
            assert out["labels"][0, 11] == 3  # [SEP] can be a target: the model learns to stop
    # A rate per caption, uniform in (0, 1]: some captions nearly whole, some nearly all hidden.
    assert min(rates) < 0.25 and max(rates) > 0.75
