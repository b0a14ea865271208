"""Masked-word metrics: micro-averaged over pieces, split by condition and by content words."""

import pytest
import torch

from vitbert.lit.conditions import ANOTHER_PHOTO, CONDITIONS, TEXT_ONLY, WITH_PHOTO
from vitbert.lit.metrics import SKIPPED, MaskedLMMetrics
from vitbert.run.console import format_figures


def one_hot_logits(predicted, vocab):
    return torch.nn.functional.one_hot(torch.tensor(predicted), vocab).float() * 10


def test_micro_average_over_pieces_across_batches():
    metrics = MaskedLMMetrics(vocab_size=6)
    # Batch 1: 1 of 1 right; batch 2: 1 of 3 right → micro 2/4 (macro over batches would be 2/3).
    metrics.update(WITH_PHOTO, one_hot_logits([2], 6), torch.tensor([2]), torch.tensor([True]))
    metrics.update(WITH_PHOTO, one_hot_logits([0, 1, 3], 6), torch.tensor([0, 2, 4]),
                   torch.tensor([False, True, True]))
    # Another photo: 1 of 4 right (content: 0 of 2); text only: 0 of 1.
    metrics.update(ANOTHER_PHOTO, one_hot_logits([2, 5, 5, 5], 6), torch.tensor([2, 2, 2, 2]),
                   torch.tensor([False, True, True, False]), skipped=3)
    metrics.update(TEXT_ONLY, one_hot_logits([5], 6), torch.tensor([2]), torch.tensor([True]))
    figures = metrics.compute()
    assert figures["top1"] == pytest.approx(0.5)
    # Content words: targets 2 (right), 2 (wrong), 4 (wrong) → 1/3.
    assert figures["top1_content"] == pytest.approx(1 / 3)
    assert figures["top1_text"] == 0.0 and figures["top1_mismatch"] == pytest.approx(0.25)
    # The headline gain is against another photo; the one against text only has its own name.
    assert figures["image_gain_top1"] == pytest.approx(0.5 - 0.25)
    assert figures["image_gain_top1_content"] == pytest.approx(1 / 3)
    assert figures["image_gain_vs_text_top1"] == pytest.approx(0.5)
    assert figures[SKIPPED] == 3
    assert figures["top5"] >= figures["top1"]
    assert figures["top10"] == 1.0  # vocabulary of 6: the truth is always in the top 10
    suffixes = [c.suffix for c in CONDITIONS]
    expected_keys = {f"{m}{s}{c}" for m in ("top1", "top5", "top10") for s in suffixes
                     for c in ("", "_content")} | {f"loss{s}" for s in suffixes}
    assert expected_keys <= set(figures)

    table = format_figures({f"val/{k}": v for k, v in figures.items()}).splitlines()
    rows = [line.split()[:3] for line in table[2:5]]
    assert [r[:2] for r in rows] == [["with", "the"], ["another", "image's"], ["text", "only"]]
    assert "against another image's photo: +25.0 points (all pieces)" in table[5]
    assert "against text only: +50.0 points (all pieces)" in table[6]
    assert table[7].startswith("(3 captions had no other image")


def test_loss_is_mean_cross_entropy_per_piece():
    metrics = MaskedLMMetrics(vocab_size=4)
    logits = torch.randn(5, 4)
    targets = torch.tensor([0, 1, 2, 3, 0])
    for condition in CONDITIONS:
        metrics.update(condition, logits, targets, torch.zeros(5, dtype=torch.bool))
    figures = metrics.compute()
    expected = torch.nn.functional.cross_entropy(logits, targets).item()
    assert figures["loss"] == pytest.approx(expected, rel=1e-5)
    assert figures[SKIPPED] == 0
    metrics.reset()
    metrics.update(WITH_PHOTO, logits[:1], targets[:1], torch.ones(1, dtype=torch.bool))


def test_the_binding_table_has_a_row_per_score_and_a_column_per_kind():
    figures = {"test/binding_pll_colour": 0.9, "test/binding_pll_shape": 0.6,
               "test/binding_pll": 0.75, "test/binding_pll_text_colour": 0.5,
               "test/binding_pll_text_shape": 0.5, "test/binding_pll_text": 0.5,
               "test/binding_fill_colour": 1.0, "test/binding_fill": 1.0,
               "test/binding_pairs_colour": 10.0, "test/binding_pairs_shape": 10.0}
    lines = format_figures(figures, "test").splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("binding"))
    assert lines[at].split()[-3:] == ["colour", "shape", "all"]
    assert lines[at + 1].split()[-3:] == ["90.0%", "60.0%", "75.0%"]
    assert lines[at + 2].split()[-3:] == ["50.0%", "50.0%", "50.0%"]
    assert lines[at + 3].split()[-3:] == ["100.0%", "-", "100.0%"]
    assert "fill-mask" in lines[at + 3]
    assert "binding" not in format_figures({"test/top1": 0.5}, "test")
