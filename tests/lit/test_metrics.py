"""Masked-word metrics: micro-averaged over pieces, split by condition and by content words."""

import pytest
import torch

from vitbert.lit.metrics import MaskedLMMetrics


def one_hot_logits(predicted, vocab):
    return torch.nn.functional.one_hot(torch.tensor(predicted), vocab).float() * 10


def test_micro_average_over_pieces_across_batches():
    metrics = MaskedLMMetrics(vocab_size=6)
    # Batch 1: 1 of 1 right; batch 2: 1 of 3 right → micro 2/4 (macro over batches would be 2/3).
    metrics.update("", one_hot_logits([2], 6), torch.tensor([2]), torch.tensor([True]))
    metrics.update("", one_hot_logits([0, 1, 3], 6), torch.tensor([0, 2, 4]),
                   torch.tensor([False, True, True]))
    for suffix in ("_text", "_mismatch"):
        metrics.update(suffix, one_hot_logits([5], 6), torch.tensor([2]), torch.tensor([True]))
    figures = metrics.compute()
    assert figures["top1"] == pytest.approx(0.5)
    # Content words: targets 2 (right), 2 (wrong), 4 (wrong) → 1/3.
    assert figures["top1_content"] == pytest.approx(1 / 3)
    assert figures["top1_text"] == 0.0
    assert figures["image_gain_top1"] == pytest.approx(0.5)
    assert figures["image_gain_top1_content"] == pytest.approx(1 / 3)
    assert figures["top5"] >= figures["top1"]
    assert figures["top10"] == 1.0  # vocabulary of 6: the truth is always in the top 10
    conditions = ("", "_text", "_mismatch")
    expected_keys = {f"{m}{s}{c}" for m in ("top1", "top5", "top10") for s in conditions
                     for c in ("", "_content")} | {f"loss{s}" for s in conditions}
    assert expected_keys <= set(figures)


def test_loss_is_mean_cross_entropy_per_piece():
    metrics = MaskedLMMetrics(vocab_size=4)
    logits = torch.randn(5, 4)
    targets = torch.tensor([0, 1, 2, 3, 0])
    for suffix in ("", "_text", "_mismatch"):
        metrics.update(suffix, logits, targets, torch.zeros(5, dtype=torch.bool))
    figures = metrics.compute()
    expected = torch.nn.functional.cross_entropy(logits, targets).item()
    assert figures["loss"] == pytest.approx(expected, rel=1e-5)
    metrics.reset()
    metrics.update("", logits[:1], targets[:1], torch.ones(1, dtype=torch.bool))
