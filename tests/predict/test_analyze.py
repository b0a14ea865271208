"""scripts/analyze.py: which words the photo helps, and which objects the written captions get
right, on a tiny checkpoint trained by the fixtures."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from helpers import load_script

from vitbert.analysis import Readings, summarise, word_class
from vitbert.shapes.analysis import (
    colour_patches,
    format_caption_summary,
    named_object_attention,
    tally,
)
from vitbert.shapes.captions import COLOUR_SHAPE, VERDICTS


def test_word_classes():
    assert [word_class(w) for w in ("red", "Black", "dog", "running", "jumps", "the", "a", ".")] \
        == ["colour", "colour", "noun", "verb", "verb", "function", "function", "function"]


def test_summary_ranks_words_by_gain_and_counts_classes():
    r = Readings(words=["dog", "dog", "red", "the", "running"],
                 is_content=[True, True, True, False, True],
                 p_with=[0.5, 0.7, 0.9, 0.8, 0.1], p_another=[0.1, 0.3, 0.2, 0.8, 0.3],
                 p_text=[0.1] * 5, hit_with=[True, True, True, True, False],
                 hit_another=[False, True, False, True, False], hit_text=[False] * 5)
    s = summarise(r, top=10, min_count=1)
    assert [w["word"] for w in s["words"]] == ["red", "dog", "the", "running"]
    assert s["words"][1] == pytest.approx({"word": "dog", "class": "noun", "count": 2,
                                           "p_with": 0.6, "p_another": 0.2, "gain": 0.4})
    assert {c: v["count"] for c, v in s["classes"].items()} == {
        "colour": 1, "noun": 2, "verb": 1, "function": 1}
    assert s["top5_with_content"] == pytest.approx(3 / 4)
    assert s["gain_top5_content"] == pytest.approx(3 / 4 - 1 / 4)
    assert summarise(r, min_count=2)["words"] == [s["words"][1]]


def test_analyze_a_checkpoint(trained, tmp_path, capsys):
    out, figures = tmp_path / "analysis.png", tmp_path / "figures.json"
    rc = load_script("analyze").main(["--ckpt", str(trained.ckpt), "--split", "val",
                                      "--out", str(out), "--top", "5", "--min-count", "1",
                                      "--json", str(figures)])
    assert rc == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    s = json.loads(figures.read_text())
    # Shapes: one caption per picture, 16 val pictures in batches of 8: nobody is skipped.
    assert s["skipped_captions"] == 0
    assert sum(c["count"] for c in s["classes"].values()) == s["targets"] > 16
    for key in ("top5_with_content", "top5_another_content", "top5_text_content"):
        assert 0.0 <= s[key] <= 1.0
    assert 1 <= len(s["words"]) <= 5
    gains = [w["gain"] for w in s["words"]]
    assert gains == sorted(gains, reverse=True)
    assert np.isclose(s["words"][0]["gain"], s["words"][0]["p_with"] - s["words"][0]["p_another"])
    printed = capsys.readouterr().out
    assert "top-5, content words" in printed and s["words"][0]["word"] in printed


def test_analyze_binding_of_a_checkpoint(trained, tmp_path, capsys):
    figures = tmp_path / "binding.json"
    rc = load_script("analyze").main(["--ckpt", str(trained.ckpt), "--binding", "--split",
                                      "val", "--num-images", "8", "--json", str(figures)])
    assert rc == 0
    s = json.loads(figures.read_text())
    # The shapes' own negatives: every caption has its relation turned; colours and shapes
    # are swapped where the two objects differ in them.
    assert s["pairs_relation"] == 8
    assert 0 < s["pairs_colour"] <= 8 and 0 < s["pairs_shape"] <= 8
    for score in ("pll", "pll_text", "fill"):
        assert 0.0 <= s[score] <= 1.0
    printed = capsys.readouterr().out
    assert "pseudo-log-likelihood, photo" in printed and "relation: 8 pairs" in printed


@pytest.mark.parametrize("problem", ["missing", "not_a_checkpoint", "split"])
def test_mistakes_exit_2_with_one_line(problem, trained, not_a_checkpoint, tmp_path, capsys):
    ckpt = {"missing": tmp_path / "nope.ckpt", "not_a_checkpoint": not_a_checkpoint,
            "split": trained.ckpt}[problem]
    split = "validation" if problem == "split" else "val"
    rc = load_script("analyze").main(["--ckpt", str(ckpt), "--split", split,
                                      "--out", str(tmp_path / "a.png")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.startswith("error: ") and "\n" not in err
    assert not (tmp_path / "a.png").exists()


def test_caption_tally_counts_new_and_seen_pairs_apart():
    references = ["a small red circle left of a large blue square",
                  "a green cross above a red circle"]
    captions = ["a red circle left of a blue circle",  # blue square: the other object's shape
                "a green cross above a red circle"]
    s = tally(captions, "a yellow square above a purple diamond", references,
              new_pairs={("blue", "square"), ("green", "cross")})
    assert s["images"] == 2
    assert s["pictures"]["photo"] == {"colour_shape": 0.5, "colours": 1.0, "shapes": 0.5}
    assert s["pictures"]["no_photo"] == {"colour_shape": 0.0, "colours": 0.0, "shapes": 0.0}
    assert s["objects"]["seen"] == {"count": 2, "right": 1.0, "other_object": 0.0,
                                    "other_shape": 0.0, "not_named": 0.0}
    assert s["objects"]["new"] == {"count": 2, "right": 0.5, "other_object": 0.5,
                                   "other_shape": 0.0, "not_named": 0.0}
    assert s["new_pairs"] == ["blue square", "green cross"]
    # Training pictures hold no new pair: a dash, not a share of nothing.
    no_new = tally(captions, "a red circle", references, new_pairs=set()) | {"split": "train"}
    assert no_new["objects"]["new"]["count"] == 0
    named_right = next(line for line in format_caption_summary(no_new).splitlines()
                       if "named right" in line)
    assert named_right.split()[-2:] == ["75.0%", "–"]


def test_analyze_captions_of_a_checkpoint(trained, tmp_path, capsys):
    figures = tmp_path / "figures.json"
    rc = load_script("analyze").main(["--ckpt", str(trained.ckpt), "--captions", "--split",
                                      "test", "--num-images", "6", "--json", str(figures)])
    assert rc == 0
    s = json.loads(figures.read_text())
    assert (s["split"], s["images"]) == ("test", 6)
    # Two objects a picture; every test picture holds at least one new pair.
    counts = s["objects"]["seen"]["count"], s["objects"]["new"]["count"]
    assert sum(counts) == 12 and counts[1] >= 6
    for kind in ("seen", "new"):
        objects = s["objects"][kind]
        if objects["count"]:  # every object gets one verdict
            assert sum(objects[v] for v in VERDICTS) == pytest.approx(1.0)
    printed = capsys.readouterr().out
    assert "per object, colour-shape pair" in printed and s["text_only_caption"] in printed
    attention = s["attention"]  # one row per text-encoder layer (2 in the tiny model)
    assert len(attention["layers"]) == 2 and "where the [MASK] before a shape looks" in printed
    for layer in attention["layers"]:
        assert 0 < layer["named"] + layer["other"] <= 1


def test_colour_patches_are_the_patches_an_object_covers():
    image = torch.full((3, 16, 16), 30, dtype=torch.uint8)
    image[:, 2:7, 8:12] = torch.tensor((220, 40, 40), dtype=torch.uint8)[:, None, None]  # red
    red = colour_patches(image, "red", patch_size=4).view(4, 4)
    # Rows 2..6 cover patch row 0 (2 of 4 pixel rows) and row 1 (3 of 4): both over 20%.
    assert red.nonzero().tolist() == [[0, 2], [1, 2]]
    assert not colour_patches(image, "orange", patch_size=4).any()  # near red, still told apart


def test_named_object_attention_of_a_model_that_looks_everywhere(trained):
    """With every query zeroed, each [MASK] attends uniformly to the N image tokens and the t
    pieces it sees: an object's share is its patches over N + t, the same in every head."""
    from vitbert.analysis import checkpoint_source
    from vitbert.data.cache import CaptionDataset
    from vitbert.io import load_model

    model, tokenizer = load_model(trained.ckpt)
    for block in model.text.encoder.blocks:
        D = block.attn.proj.in_features
        block.attn.qkv.weight.data[:D] = 0
        block.attn.qkv.bias.data[:D] = 0
    source, _ = checkpoint_source(trained.ckpt)
    dataset = CaptionDataset(source.cache_dir, "test")
    result = named_object_attention(model.eval(), tokenizer, dataset)  # every picture

    N, named, other = model.num_image_tokens, [], []
    for row in range(len(dataset)):  # one caption a picture
        caption = dataset.captions[row]
        found = list(COLOUR_SHAPE.finditer(caption))
        if len(found) != 2 or len({m[1] for m in found}) != 2 or len({m[2] for m in found}) != 2:
            continue
        for match, rival in zip(found, found[::-1], strict=True):
            t = len(tokenizer(caption[:match.start(2)] + "[MASK]")["input_ids"]) - 1  # no [SEP]
            image, stride = dataset[row]["image"], model.image_tower.stride
            size = {m[1]: colour_patches(image, m[1], stride).sum().item() for m in found}
            named.append(size[match[1]] / (N + t))
            other.append(size[rival[1]] / (N + t))
    assert result["objects"] > 0 and len(named) == result["objects"]
    for layer in result["layers"]:
        assert layer["named"] == pytest.approx(np.mean(named), rel=1e-4)
        assert layer["other"] == pytest.approx(np.mean(other), rel=1e-4)
        assert layer["head_named"] == pytest.approx(layer["named"], rel=1e-4)


def test_a_photo_checkpoint_naming_the_source_by_its_first_name_reads_it(trained, tmp_path):
    """Photo runs from before the rename stored their source as vitbert.data.Flickr30kSource, a
    name the package no longer has: the analysis reads it as the CaptionedPhotos it was."""
    from vitbert.analysis import checkpoint_source
    from vitbert.data import CaptionedPhotos

    checkpoint = torch.load(trained.ckpt, map_location="cpu", weights_only=True)
    checkpoint["datamodule_hyper_parameters"]["source"] = {
        "class_path": "vitbert.data.Flickr30kSource", "init_args": {"root": str(tmp_path)}}
    torch.save(checkpoint, tmp_path / "old.ckpt")
    source, _ = checkpoint_source(tmp_path / "old.ckpt")
    assert type(source) is CaptionedPhotos and source.root == str(tmp_path)


@pytest.mark.parametrize("problem", ["mlm_only", "not_shapes"])
def test_analyze_captions_needs_a_shapes_captioner(problem, trained, tmp_path, capsys):
    checkpoint = torch.load(trained.ckpt, map_location="cpu", weights_only=True)
    if problem == "mlm_only":  # the same run, its caption writing at probability 0
        objectives = checkpoint["hyper_parameters"]["objectives"]
        writing = [o for o in objectives if o["class_path"].endswith(".CaptionWriting")]
        assert len(writing) == 1
        writing[0]["init_args"]["probability"] = 0.0
    else:
        source = checkpoint["datamodule_hyper_parameters"]["source"]
        source["class_path"] = "vitbert.data.CaptionedPhotos"
        source["init_args"] = {"root": str(tmp_path / "flickr30k")}
    ckpt = tmp_path / f"{problem}.ckpt"
    torch.save(checkpoint, ckpt)
    rc = load_script("analyze").main(["--ckpt", str(ckpt), "--captions"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "\n" not in err
    assert ("CaptionWriting" if problem == "mlm_only" else "ShapesSource") in err


@pytest.mark.parametrize("eval_rate, expected", [(0.15, 0.15), (None, 0.3)])
def test_analysis_masks_at_the_rate_validation_used(trained, monkeypatch, eval_rate, expected):
    """A recipe may hide more in training than in validation (data.eval_mlm_probability): the
    analysis must read validation's masks, or its figures are not the fit's table's."""
    import vitbert.analysis as analysis

    source, data, dataset = analysis.checkpoint_split(trained.ckpt, "val")
    data = {**data, "mlm_probability": 0.3, "eval_mlm_probability": eval_rate}
    monkeypatch.setattr(analysis, "checkpoint_split", lambda *a, **k: (source, data, dataset))
    loader, _ = analysis.rebuild_loader(trained.ckpt, "val")
    assert loader.collate_fn.mlm_probability == expected
