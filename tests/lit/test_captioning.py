"""Caption figures in training: grouped references, logged keys, and MLM-only runs untouched."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import DEFAULT_OBJECTIVES, TINY_MODEL
from tiny_run import tiny_shapes

from vitbert.cli import main
from vitbert.data.tokenizer import train_wordpiece
from vitbert.lit.evaluation import caption_figures, caption_writer, images_and_references
from vitbert.models import ImageTowerConfig, TextTowerConfig, VitBert, VitBertConfig

CAPTIONS = ["a small red circle left of a large blue square",
            "there is a large red circle right of a small blue square",
            "a small green cross above a large yellow triangle"]


class FakeDataset:
    """What CaptionEvaluation reads of a CaptionDataset: rows, captions, items with an image."""

    def __init__(self, rows: list[int], captions: list[str]) -> None:
        self.rows, self.captions = np.array(rows), captions

    def __getitem__(self, i: int) -> dict:
        return {"image": torch.full((3, 16, 16), self.rows[i] * 40, dtype=torch.uint8)}


def test_references_are_every_caption_of_an_image():
    data = FakeDataset([5, 5, 7, 9, 9, 9], ["a", "b", "c", "d", "e", "f"])
    rows, firsts, references = images_and_references(data)
    assert rows == [5, 7, 9] and firsts == [0, 2, 3]
    assert references == [["a", "b"], ["c"], ["d", "e", "f"]]
    sample = images_and_references(data, limit=2)
    assert sample == images_and_references(data, limit=2)  # the same images every time
    assert len(sample[0]) == 2 and set(sample[0]) <= {5, 7, 9}


class RecordedMetrics:
    """Stands in for CaptionMetrics: records each set of captions scored, and their references."""

    def __init__(self, seen: list) -> None:
        self.seen = seen

    def __call__(self):
        from vitbert.lit.metrics import CaptionMetrics

        seen = self.seen

        class Recording(CaptionMetrics):
            def update(self, candidates, references) -> None:
                seen.append((list(candidates), references))
                super().update(candidates, references)

        return Recording()


def tiny_net(tokenizer, itc_dim: int = 0) -> VitBert:
    image = ImageTowerConfig(kind="vit", image_size=16, patch_size=8, dim=16, depth=1,
                             num_heads=2)
    text = TextTowerConfig(dim=16, depth=1, num_heads=2, max_len=16)
    return VitBert(VitBertConfig(image=image, text=text, vocab_size=len(tokenizer),
                                 itc_dim=itc_dim))


@pytest.mark.parametrize("method", ["greedy", "beam", "mask-predict"])
def test_caption_figures_with_and_without_the_image(method, monkeypatch):
    from vitbert.lit import evaluation

    tokenizer = train_wordpiece(CAPTIONS * 5, vocab_size=100, min_frequency=1)
    net = tiny_net(tokenizer).train()
    dataset = FakeDataset([0, 1, 1, 2], CAPTIONS + CAPTIONS[:1])
    seen: list = []
    monkeypatch.setattr(evaluation, "CaptionMetrics", RecordedMetrics(seen))
    figures = caption_figures(net, tokenizer, dataset, write=caption_writer(method, num_beams=2))
    assert set(figures) == {f"{k}{s}" for k in ("bleu4", "cider") for s in ("", "_text")}
    assert all(0.0 <= v for v in figures.values())
    assert net.training  # put back as it was
    assert [len(c) for c, _ in seen] == [3, 3] and len(set(seen[1][0])) == 1  # one text caption
    assert seen[0][1] == [CAPTIONS[:1], CAPTIONS[1:3], CAPTIONS[:1]]  # every reference of each


def test_a_model_with_contrastive_heads_adds_the_reranked_captions(monkeypatch):
    from vitbert.lit import evaluation

    tokenizer = train_wordpiece(CAPTIONS * 5, vocab_size=100, min_frequency=1)
    net = tiny_net(tokenizer, itc_dim=8)
    dataset = FakeDataset([0, 1, 1, 2], CAPTIONS + CAPTIONS[:1])
    chosen = []
    real = evaluation.sample_and_rerank

    def spy(*args, **kwargs):
        found = real(*args, **kwargs)
        chosen.extend(tokenizer.decode(f[0].token_ids, skip_special_tokens=True) for f in found)
        return found

    monkeypatch.setattr(evaluation, "sample_and_rerank", spy)
    seen: list = []
    monkeypatch.setattr(evaluation, "CaptionMetrics", RecordedMetrics(seen))
    figures = caption_figures(net, tokenizer, dataset, rerank_samples=4)
    assert {"bleu4_reranked", "cider_reranked"} <= set(figures)
    assert seen[2][0] == chosen and len(chosen) == 3  # the reranked set: each image's first
    assert "bleu4_reranked" not in caption_figures(net, tokenizer, dataset, rerank_samples=0)


def test_ddp_shares_are_put_back_in_order(monkeypatch):
    """Process r captions images r, r + W, …: the gathered lists interleave back to the order of
    one process, also when the shares differ in length."""
    from vitbert.lit import evaluation

    items = list("abcdefg")
    shares = [items[r::3] for r in range(3)]  # ["a","d","g"], ["b","e"], ["c","f"]

    def all_gather_object(out: list, mine: list) -> None:
        assert mine == shares[1]  # this process's share, as rank 1 would send it
        out[:] = shares

    monkeypatch.setattr(torch.distributed, "all_gather_object", all_gather_object)
    assert evaluation.gather_in_order(shares[1], 3) == items
    assert evaluation.gather_in_order(items, 1) == items  # one process: nothing to gather


def fit(tmp: Path, *extra: str):
    return main(["fit", *TINY_MODEL, *tiny_shapes(tmp / "shapes", num_train=128),
                 "--trainer.max_steps", "4", "--trainer.val_check_interval", "2",
                 "--trainer.log_every_n_steps", "1", "--trainer.enable_progress_bar", "false",
                 "--trainer.default_root_dir", str(tmp), "--checkpoint.dirpath",
                 str(tmp / "checkpoints"), "--examples.num_examples", "0", *extra])


@pytest.mark.parametrize(("share", "method"), [(0.0, "greedy"), (1.0, "greedy"),
                                               (0.0, "mask-predict")])
def test_caption_figures_are_logged_for_the_runs_their_method_can_read(
        share, method, tmp_path, monkeypatch):
    """The embedded default's objectives, CaptionWriting at ``share``: left to right, captions
    are written only for a run that learnt to write (at 0 CaptionEvaluation stays silent,
    although asked for 16 images); Mask-Predict reads an MLM-only run too."""
    monkeypatch.chdir(tmp_path)
    writing = {"class_path": "vitbert.lit.objectives.CaptionWriting",
               "init_args": {"probability": share}}
    listed = [DEFAULT_OBJECTIVES[name] for name in ("itc", "words")] + [writing] + [
        DEFAULT_OBJECTIVES["mlm"]]
    cli = fit(tmp_path, "--model.objectives", json.dumps(listed),
              "--captions.num_images", "16", "--captions.method", method)
    assert cli.model.writes_captions == bool(share)
    logged = set(cli.trainer.callback_metrics)
    caption_keys = {f"val/{k}{s}" for k in ("bleu4", "cider") for s in ("", "_text")}
    assert (caption_keys <= logged) == (bool(share) or method == "mask-predict")
    assert not caption_keys - logged or not caption_keys & logged  # all of them or none
    if share:
        assert "train/generation_loss" in logged
        assert "train/loss" not in logged  # every batch was a generation batch
    else:  # an MLM-only run is as it was: no generation batches
        assert "train/generation_loss" not in logged and "train/loss" in logged
