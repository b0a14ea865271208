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
from vitbert.lit.evaluation import caption_figures, images_and_references
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


def test_caption_figures_with_and_without_the_image():
    tokenizer = train_wordpiece(CAPTIONS * 5, vocab_size=100, min_frequency=1)
    image = ImageTowerConfig(kind="vit", image_size=16, patch_size=8, dim=16, depth=1,
                             num_heads=2)
    text = TextTowerConfig(dim=16, depth=1, num_heads=2, max_len=16)
    net = VitBert(VitBertConfig(image=image, text=text, vocab_size=len(tokenizer))).train()
    dataset = FakeDataset([0, 1, 1, 2], CAPTIONS + CAPTIONS[:1])
    figures = caption_figures(net, tokenizer, dataset)
    assert set(figures) == {f"{k}{s}" for k in ("bleu4", "cider") for s in ("", "_text")}
    assert all(0.0 <= v for v in figures.values())
    assert net.training  # put back as it was
    # A data source's own figures join them, with the image and without.
    seen = []

    def scores(candidates, references):
        seen.append((list(candidates), references))
        return {"named": 0.25}

    figures = caption_figures(net, tokenizer, dataset, scores=scores)
    assert figures["named"] == figures["named_text"] == 0.25
    assert [len(c) for c, _ in seen] == [3, 3] and len(set(seen[1][0])) == 1  # one text caption
    assert seen[0][1] == [CAPTIONS[:1], CAPTIONS[1:3], CAPTIONS[:1]]  # every reference of each


def test_a_model_with_contrastive_heads_adds_the_reranked_captions(monkeypatch):
    from vitbert.lit import evaluation

    tokenizer = train_wordpiece(CAPTIONS * 5, vocab_size=100, min_frequency=1)
    image = ImageTowerConfig(kind="vit", image_size=16, patch_size=8, dim=16, depth=1,
                             num_heads=2)
    text = TextTowerConfig(dim=16, depth=1, num_heads=2, max_len=16)
    net = VitBert(VitBertConfig(image=image, text=text, vocab_size=len(tokenizer), itc_dim=8))
    dataset = FakeDataset([0, 1, 1, 2], CAPTIONS + CAPTIONS[:1])
    chosen = []
    real = evaluation.sample_and_rerank

    def spy(*args, **kwargs):
        found = real(*args, **kwargs)
        chosen.extend(tokenizer.decode(f[0].token_ids, skip_special_tokens=True) for f in found)
        return found

    monkeypatch.setattr(evaluation, "sample_and_rerank", spy)
    written = {}

    def scores(candidates, references):
        written[len(written)] = list(candidates)
        return {}

    figures = caption_figures(net, tokenizer, dataset, scores=scores, rerank_samples=4)
    assert {"bleu4_reranked", "cider_reranked"} <= set(figures)
    assert written[2] == chosen and len(chosen) == 3  # the reranked set: each image's first
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
                 str(tmp / "checkpoints"), "--model.num_examples", "0", *extra])


@pytest.mark.parametrize("share", [0.0, 1.0])
def test_caption_figures_are_logged_only_for_generation_runs(share, tmp_path, monkeypatch):
    """The embedded default's objectives, CaptionWriting at ``share``: at 0 the module does not
    write captions and CaptionEvaluation stays silent although asked for 16 images."""
    monkeypatch.chdir(tmp_path)
    writing = {"class_path": "vitbert.lit.objectives.CaptionWriting",
               "init_args": {"probability": share}}
    listed = [DEFAULT_OBJECTIVES[name] for name in ("itc", "words")] + [writing] + [
        DEFAULT_OBJECTIVES[name] for name in ("focus", "twins")]
    cli = fit(tmp_path, "--model.objectives", json.dumps(listed),
              "--captions.num_images", "16")
    assert cli.model.writes_captions == bool(share)
    logged = set(cli.trainer.callback_metrics)
    caption_keys = {f"val/{k}{s}" for k in ("bleu4", "cider", "colour_shape", "colours", "shapes")
                    for s in ("", "_text")}
    if share:
        assert caption_keys <= logged and "train/generation_loss" in logged
        assert "train/loss" not in logged  # every batch was a generation batch
    else:  # an MLM-only run is as it was: no caption figures, no generation batches
        assert not caption_keys & logged and "train/generation_loss" not in logged
        assert "train/loss" in logged
