"""Retrieval R@k: against a hand count on a planted matrix with five captions per photo, the
embeddings computed once, and the callback on a tiny run."""

from __future__ import annotations

import pytest
import torch
from colours import colour_batch, tiny_config
from helpers import TINY_MODEL, load_script, objectives
from tiny_run import tiny_shapes

from vitbert.lit.retrieval import (
    RetrievalSplit,
    image_to_text_recall,
    recall_at_k,
    retrieval_scores,
    text_to_image_recall,
)
from vitbert.models import VitBert
from vitbert.run.console import format_retrieval_figures

# Three photos, five captions each (15 captions); the scores are planted so that every count
# below can be done by hand.
CAPTION_IMAGE = torch.arange(3).repeat_interleave(5)  # (15,)


def planted() -> torch.Tensor:
    """(15 captions, 3 photos): captions 0-4 are photo 0's, 5-9 photo 1's, 10-14 photo 2's."""
    scores = torch.zeros(15, 3)
    scores[torch.arange(15), CAPTION_IMAGE] = 1.0  # every caption prefers its own photo...
    scores[1, 2] = 2.0  # ...but caption 1 prefers photo 2,
    scores[7, 0] = 3.0  # caption 7 prefers photo 0, then its own,
    scores[12] = torch.tensor([0.5, 0.6, 0.4])  # caption 12 ranks its own last.
    return scores


def test_text_to_image_against_a_hand_count():
    recall = text_to_image_recall(planted(), CAPTION_IMAGE, ks=(1, 2, 3))
    # R@1: all but captions 1, 7, 12 → 12/15; R@2: caption 1 ranks its own second (2.0, 1.0),
    # 7 too (3.0, 1.0), 12 third → 14/15; R@3: every photo → 15/15.
    assert recall == {1: pytest.approx(12 / 15), 2: pytest.approx(14 / 15), 3: 1.0}


def test_image_to_text_counts_any_of_the_photos_captions():
    scores = planted().T.clone()  # (3 photos, 15 captions)
    # Photo 0's best caption is caption 7 (3.0, photo 1's); its own captions (1.0) come next:
    # a miss at R@1, a hit at R@2 (any of its five).
    # Photo 2's best is caption 1 (2.0, photo 0's), then its own four at 1.0.
    # Photo 1: its own five at 1.0 first (caption 12, photo 2's, has 0.6 for it).
    recall = image_to_text_recall(scores, CAPTION_IMAGE, ks=(1, 2))
    assert recall == {1: pytest.approx(1 / 3), 2: 1.0}
    # Each photo against its first caption alone (one caption per photo) finds it every time:
    # the five-caption protocol is a different figure, not a relabelling.
    firsts = torch.arange(0, 15, 5)
    one_caption = image_to_text_recall(scores[:, firsts], torch.arange(3), ks=(1,))
    assert one_caption[1] != recall[1]


def test_image_to_text_hits_through_any_caption_not_one_in_particular():
    """Each photo's best caption is its last one and its first one is ranked last of all: a
    count over only one caption per photo (the first, say) would score 0."""
    caption_image = torch.arange(2).repeat_interleave(5)
    scores = torch.linspace(0.1, 0.9, 10).repeat(2, 1)  # (2 photos, 10 captions)
    scores[0, 4], scores[0, 0] = 1.0, -1.0  # photo 0: caption 4 first, caption 0 last
    scores[1, 9], scores[1, 5] = 1.0, -1.0  # photo 1: caption 9 first, caption 5 last
    assert image_to_text_recall(scores, caption_image, ks=(1,)) == {1: 1.0}


def test_image_to_text_hits_only_through_its_own_captions():
    """A photo whose top captions are all another photo's is a miss, whoever ranks second."""
    scores = torch.zeros(2, 10)  # 2 photos, five captions each
    scores[0, 5:] = 1.0  # photo 0 prefers all five of photo 1's captions
    scores[1, 5:] = 1.0
    recall = image_to_text_recall(scores, torch.arange(2).repeat_interleave(5), ks=(1, 5, 6))
    assert recall == {1: 0.5, 5: 0.5, 6: 1.0}


def test_rsum_and_both_directions_from_one_matrix():
    figures = recall_at_k(planted(), CAPTION_IMAGE, ks=(1, 5, 10))
    assert figures["text_to_image_r1"] == pytest.approx(12 / 15)
    assert figures["image_to_text_r1"] == pytest.approx(1 / 3)
    assert figures["text_to_image_r5"] == figures["image_to_text_r10"] == 1.0  # 3 photos
    assert figures["rsum"] == pytest.approx(100 * (12 / 15 + 1 + 1 + 1 / 3 + 1 + 1))


def test_retrieval_scores_embed_each_photo_and_caption_once():
    torch.manual_seed(0)
    config = tiny_config()
    config.itc_dim = 8
    net = VitBert(config)
    batch = colour_batch(captions_per_photo=2)
    images, caption_image = batch["images"][::2], torch.arange(4).repeat_interleave(2)
    ids, keep = batch["input_ids"], batch["attention_mask"]
    tower_calls = []
    net.image_tower.register_forward_hook(lambda _, args, out: tower_calls.append(len(args[0])))
    split = RetrievalSplit(images, ids, keep, caption_image)
    itc = retrieval_scores(net, split, batch_size=3)
    assert sum(tower_calls) == 4, "each photo through the tower once"
    assert itc["images"] == 4 and itc["captions"] == 8
    expected = recall_at_k(net.embed_texts(ids, keep) @ net.embed_images(images).T,
                           caption_image)
    assert {k: itc[k] for k in expected} == pytest.approx(expected)
    assert net.training, "left in the mode it was in"


def test_the_table_rows():
    figures = {f"test/retrieval_{k}": v for k, v in
               recall_at_k(planted(), CAPTION_IMAGE).items()} | {
        "test/retrieval_images": 3.0, "test/retrieval_captions": 15.0}
    lines = format_retrieval_figures(figures, "test")
    assert "3 photos, 15 captions" in lines[0]
    assert "text → image" in lines[1] and "80.0%" in lines[1]
    assert "513.3" not in lines[1] and lines[2].endswith("513.3"), "rsum once, both ways'"
    assert "chance" in lines[-1] and "33.3%" in lines[-1]
    assert format_retrieval_figures({"test/top1": 0.5}, "test") == []
    many = {**figures, "test/retrieval_images": 2000.0}  # R@1's chance 0.05%: shown, not 0.1%
    assert format_retrieval_figures(many, "test")[-1].split()[-3:] == ["0.05%", "0.25%", "0.5%"]


def test_the_callback_on_a_tiny_run(tmp_path, monkeypatch, capsys):
    """A tiny fit with the contrastive objective logs retrieval at validation and test and prints
    its rows; a run without it logs none."""
    from vitbert.cli import main

    monkeypatch.chdir(tmp_path)
    common = [*tiny_shapes(tmp_path / "shapes", num_train=128), *TINY_MODEL,
              "--trainer.max_steps", "2", "--trainer.enable_progress_bar", "false",
              "--examples.num_examples", "0",
              "--captions.num_images", "0", "--retrieval.num_images", "32"]
    cli = main(["fit", *common])  # the embedded default lists the contrastive objective
    logged = cli.trainer.callback_metrics
    assert logged["val/retrieval_images"] == 32
    for name in ("text_to_image_r1", "image_to_text_r5", "rsum"):
        assert f"val/retrieval_{name}" in logged
    ckpt = tmp_path / "runs" / "latest" / "checkpoints" / "last.ckpt"
    capsys.readouterr()
    main(["test", *common, "--ckpt_path", str(ckpt)])
    out = capsys.readouterr().out
    assert "retrieval: 64 photos, 64 captions" in out and "chance (k / photos)" in out
    analyze = load_script("analyze")
    assert analyze.main(["--ckpt", str(ckpt), "--retrieval", "--num-images", "16",
                         "--split", "val"]) == 0
    assert "retrieval: 16 photos, 16 captions" in capsys.readouterr().out
    cli = main(["fit", *common, "--model.net.itc_dim", "0",  # no heads, no contrastive loss
                *objectives("words", "captions", "mlm")])
    assert not any("retrieval" in key for key in cli.trainer.callback_metrics)
    without = tmp_path / "runs" / "latest" / "checkpoints" / "last.ckpt"
    assert analyze.main(["--ckpt", str(without), "--retrieval"]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "no contrastive heads" in error
    assert "contrastive objective" in error
