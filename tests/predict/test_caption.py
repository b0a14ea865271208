"""Captioner and scripts/caption.py: the pipeline's result shape, the JSON schema, exit code 2.

The tiny model of ``conftest.trained`` has taken one step, so its captions are nonsense: these
tests check shapes, plumbing and errors (what decoding writes is tested in tests/generate).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from helpers import SCRIPTS, load_script

SCRIPT = SCRIPTS / "caption.py"


script = load_script("caption")


@pytest.fixture(scope="module")
def captioner(trained):
    from vitbert import Captioner

    return Captioner.from_checkpoint(trained.ckpt, device="cpu")


def test_one_image_gives_the_pipeline_shape(captioner, trained):
    result = captioner(trained.photo, num_beams=3)
    assert isinstance(result, list) and len(result) == 1
    (caption,) = result
    assert set(caption) == {"caption", "score", "generated_text"}
    assert caption["caption"] == caption["generated_text"] and caption["caption"]
    assert "[" not in caption["caption"]  # no [SEP], [MASK], ... in a caption
    assert isinstance(caption["score"], float) and caption["score"] <= 0.0


def test_a_list_of_images_is_one_batch_with_per_image_results(captioner, trained):
    photos = [trained.photo, trained.photo_wide, str(trained.photo)]
    for method in ("greedy", "beam", "mask-predict"):
        results = captioner(photos, num_beams=2, method=method)
        assert len(results) == 3 and all(len(r) == 1 for r in results)
        assert results[0] == results[2]  # the same photo, as a path or a string
    beams = captioner(trained.photo, num_beams=3, num_return_sequences=3)
    assert len(beams) == 3
    assert [b["score"] for b in beams] == sorted((b["score"] for b in beams), reverse=True)


def test_a_model_not_trained_to_write_writes_by_mask_predict(trained, tmp_path):
    """Its run's objectives say whether the model learnt to write left to right; a .ckpt without
    caption writing (today's list, or an older run's generation_probability of 0) gets
    Mask-Predict by default; an export, which does not say, and a writing run get greedy."""
    from vitbert import Captioner
    from vitbert.captioner import trained_to_write

    checkpoint = torch.load(trained.ckpt, map_location="cpu", weights_only=True)
    assert trained_to_write(trained.ckpt) is True and trained_to_write(trained.exported) is None
    checkpoint["hyper_parameters"]["objectives"] = [
        {"class_path": "vitbert.lit.objectives.MaskedLM", "init_args": {"weight": 1.0}},
        {"class_path": "vitbert.lit.objectives.CaptionWriting", "init_args": {"probability": 0.0}}]
    torch.save(checkpoint, tmp_path / "mlm.ckpt")
    assert trained_to_write(tmp_path / "mlm.ckpt") is False
    old = {"hyper_parameters": {"net": {}, "generation_probability": 0.0}}
    torch.save(old, tmp_path / "old.ckpt")
    assert trained_to_write(tmp_path / "old.ckpt") is False

    mlm = Captioner.from_checkpoint(tmp_path / "mlm.ckpt", device="cpu")
    assert mlm.default_method() == mlm.default_method(3) == "mask-predict"
    assert mlm(trained.photo)[0] == mlm(trained.photo, method="mask-predict")[0]
    assert Captioner.from_checkpoint(trained.ckpt, device="cpu").default_method() == "greedy"
    assert Captioner.from_checkpoint(trained.exported, device="cpu").default_method(3) == "beam"


def test_scripts_export_says_whether_the_model_writes(trained, tmp_path, capsys):
    """scripts/export.py writes the fact into the weights' header, so an export of an MLM-only
    run also writes by Mask-Predict."""
    from vitbert import Captioner
    from vitbert.captioner import trained_to_write

    checkpoint = torch.load(trained.ckpt, map_location="cpu", weights_only=True)
    mlm_only = [{"class_path": "vitbert.lit.objectives.MaskedLM"}]
    checkpoint["hyper_parameters"]["objectives"] = mlm_only
    torch.save(checkpoint, tmp_path / "mlm.ckpt")
    export = load_script("export")
    for ckpt, writes in ((trained.ckpt, True), (tmp_path / "mlm.ckpt", False)):
        out = tmp_path / f"export-{writes}"
        assert export.main(["--ckpt", str(ckpt), "--out", str(out)]) == 0
        assert trained_to_write(out) is writes
    assert Captioner.from_checkpoint(tmp_path / "export-False").default_method() == "mask-predict"
    assert trained_to_write(trained.exported) is None  # exported by the API, not the script


def test_rerank_returns_the_candidates_by_similarity_and_likelihood(trained):
    from vitbert import Captioner
    from vitbert.io import load_model
    from vitbert.models import VitBert

    model, tokenizer = load_model(trained.ckpt)
    model.config.itc_dim = 16  # the trained model has no contrastive heads: random ones
    torch.manual_seed(0)
    captioner = Captioner(VitBert(model.config), tokenizer, device="cpu")
    found = captioner(trained.photo, method="rerank", num_samples=5, num_return_sequences=6)
    assert 1 <= len(found) <= 6
    assert all(set(c) == {"caption", "score", "generated_text", "similarity", "likelihood"}
               for c in found)
    temperature = captioner.model.itc.temperature.item()
    ranks = [c["similarity"] / temperature + c["likelihood"] for c in found]
    assert ranks == sorted(ranks, reverse=True)
    assert captioner(trained.photo, method="greedy")[0]["caption"] in [c["caption"] for c in found]


def test_exported_folder_writes_the_same_caption(captioner, trained):
    from vitbert import Captioner

    exported = Captioner.from_checkpoint(trained.exported, device="cpu")
    assert exported(trained.photo) == captioner(trained.photo)


def test_bad_arguments_are_clear_errors(captioner, trained):
    from vitbert.predict import PredictError

    with pytest.raises(PredictError, match="method"):
        captioner(trained.photo, method="sample")
    with pytest.raises(PredictError, match="num_return_sequences"):
        captioner(trained.photo, num_beams=2, num_return_sequences=3)
    with pytest.raises(PredictError, match="None for all"):
        captioner([trained.photo, None])
    with pytest.raises(PredictError, match="a model trained with the contrastive objective"):
        captioner(trained.photo, method="rerank")  # no contrastive heads to rank with
    with pytest.raises(PredictError, match="num_samples=0"):
        captioner(trained.photo, method="rerank", num_samples=0)


def test_cli_json_schema(trained, capsys):
    code = script.main(["--ckpt", str(trained.ckpt), "--image", str(trained.photo),
                        str(trained.photo_wide), "--num-beams", "2", "--num-return-sequences",
                        "2", "--json"])
    assert code == 0
    results = json.loads(capsys.readouterr().out)
    assert [r["image"] for r in results] == [str(trained.photo), str(trained.photo_wide)]
    for result in results:
        assert set(result) == {"image", "captions"} and len(result["captions"]) == 2
        for caption in result["captions"]:
            assert set(caption) == {"caption", "score", "generated_text"}


@pytest.mark.parametrize("case", ["missing_image", "unreadable_image", "not_a_checkpoint",
                                  "no_tokenizer", "beams", "return_sequences", "samples",
                                  "rerank_without_contrastive_heads"])
def test_cli_errors_exit_2_with_one_line(case, trained, tmp_path, capsys, unreadable_image,
                                         not_a_checkpoint, no_tokenizer_ckpt):
    argv = {
        "missing_image": ["--ckpt", str(trained.ckpt), "--image", str(tmp_path / "no.png")],
        "unreadable_image": ["--ckpt", str(trained.ckpt), "--image", str(unreadable_image)],
        "not_a_checkpoint": ["--ckpt", str(not_a_checkpoint), "--image", str(trained.photo)],
        "no_tokenizer": ["--ckpt", str(no_tokenizer_ckpt), "--image", str(trained.photo)],
        "beams": ["--ckpt", str(trained.ckpt), "--image", str(trained.photo), "--num-beams",
                  "0"],
        "return_sequences": ["--ckpt", str(trained.ckpt), "--image", str(trained.photo),
                             "--num-return-sequences", "2"],
        "samples": ["--ckpt", str(trained.ckpt), "--image", str(trained.photo), "--method",
                    "rerank", "--num-samples", "0"],
        "rerank_without_contrastive_heads": ["--ckpt", str(trained.ckpt), "--image",
                                             str(trained.photo), "--method", "rerank"],
    }[case]
    assert script.main([*argv, "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")


def test_script_runs_for_real(trained):
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    result = subprocess.run([sys.executable, str(SCRIPT), "--ckpt", str(trained.exported),
                             "--image", str(trained.photo), "--method", "mask-predict"],
                            capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == str(trained.photo)
