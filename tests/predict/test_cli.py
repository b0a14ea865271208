"""scripts/predict.py: the side-by-side table, --json, --attention, and exit code 2 on each error.

Most tests call ``main(argv)`` in-process; three run the script for real (the exit code, stdout
and stderr as a user sees them): --help and a missing [MASK] never import torch, so they are
cheap; one full run with --json is the end-to-end check (the pictures are tested in-process).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from helpers import SCRIPTS, load_script
from PIL import Image

SCRIPT = SCRIPTS / "predict.py"


script = load_script("predict")
TEXT = "a large [MASK] circle [MASK] a small square"


def run_script(*argv: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, str(SCRIPT), *argv], capture_output=True, text=True,
                          env=env, timeout=120)


def args(trained, *extra: str, text: str = TEXT, ckpt=None, image=None) -> list[str]:
    return ["--ckpt", str(ckpt or trained.ckpt), "--image", str(image or trained.photo),
            "--text", text, *extra]


# ---------------------------------------------------------------------------- subprocess (3)


def test_help_mentions_latency_and_exit_codes():
    result = run_script("--help")
    assert result.returncode == 0
    for needle in ["--ckpt", "--image", "--text", "--top-k", "--json", "--attention", "--layer",
                   "latency", "exit status", "[MASK]"]:
        assert needle in result.stdout, needle


def test_text_without_mask_exits_2_before_loading_anything(tmp_path):
    result = run_script("--ckpt", str(tmp_path / "x.ckpt"), "--image", "x.png", "--text", "a dog")
    assert result.returncode == 2
    assert result.stdout == ""
    assert "no [MASK]" in result.stderr


def test_full_run_prints_json(trained):
    result = run_script(*args(trained, "--json", "--top-k", "3"))
    assert result.returncode == 0, result.stderr
    output = json.loads(result.stdout)  # the whole of stdout is one JSON document
    assert list(output) == ["text", "unknown_words", "warning", "masks"] and output["text"] == TEXT
    assert (output["unknown_words"], output["warning"]) == ([], None)  # every word is known
    assert "warning" not in result.stderr
    assert [mask["index"] for mask in output["masks"]] == [0, 1]
    for mask in output["masks"]:
        assert list(mask) == ["index", "with_image", "text_only"]
        for side in ("with_image", "text_only"):
            assert len(mask[side]) == 3
            assert set(mask[side][0]) == {"score", "token", "token_str"}


# ---------------------------------------------------------------------------- in-process


def test_table_shows_both_readings_side_by_side(trained, capsys):
    assert script.main(args(trained, "--top-k", "4")) == 0
    out = capsys.readouterr().out
    assert out.startswith(TEXT)
    assert "[MASK] 1 of 2" in out and "[MASK] 2 of 2" in out
    assert out.count("with the photo") == 2 and out.count("text only") == 2
    assert "* brought in by the photo: in its top-4, not in the text-only top-4" in out
    rows = [line for line in out.splitlines() if line.strip()[:2].strip().isdigit()]
    assert len(rows) == 8  # 4 ranks × 2 masks


def test_star_marks_exactly_the_words_the_photo_brought_in():
    ids = {w: i for i, w in enumerate(["red", "grass", "blue", "trees", "water"])}

    def guesses(*words):  # distinct, fixed ids (str hashes change from one process to the next)
        return [{"score": 0.5 / (i + 1), "token": ids[w], "token_str": w}
                for i, w in enumerate(words)]

    result = {"text": "a [MASK] .", "masks": [{"index": 0,
                                                "with_image": guesses("red", "grass", "blue"),
                                                "text_only": guesses("grass", "trees", "water")}]}
    table = script.format_table(result, top_k=3)
    starred = {line.split()[1] for line in table.splitlines() if line.rstrip().endswith("%")
               and "*" in line}
    assert starred == {"red", "blue"}
    assert "[MASK] 1 of" not in table  # one mask: no numbering


def test_json_and_attention_from_an_exported_folder(trained, tmp_path, capsys):
    picture = tmp_path / "a.png"
    argv = args(trained, "--json", "--attention", str(picture), "--layer", "0",
                ckpt=trained.exported, text="a [MASK] circle")
    assert script.main(argv) == 0
    output = json.loads(capsys.readouterr().out)
    assert len(output["masks"]) == 1 and len(output["masks"][0]["with_image"]) == 5
    with Image.open(picture) as png:
        assert png.format == "PNG" and png.size[0] > 100


def test_attention_with_one_pooled_token_writes_a_picture(trained, tmp_path, capsys):
    picture = tmp_path / "pooled.png"
    assert script.main(args(trained, "--attention", str(picture), ckpt=trained.pooled)) == 0
    assert f"attention picture: {picture}" in capsys.readouterr().out
    assert picture.is_file()


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("missing image", "no such file"),
        ("unreadable image", "cannot decode"),
        ("not a checkpoint", "not a readable PyTorch checkpoint"),
        ("checkpoint without tokenizer", "holds no tokenizer"),
        ("folder without tokenizer", "tokenizer.json"),
        ("layer out of range", "pick one of -2..1"),
        ("attention folder missing", "does not exist"),
        ("top-k zero", "at least one"),
    ],
)
def test_each_error_exits_2_and_writes_nothing(case, message, trained, tmp_path, capsys, request):
    picture = tmp_path / "attention.png"
    ckpt, image, extra = trained.ckpt, trained.photo, []
    if case == "missing image":
        image = tmp_path / "nowhere.jpg"
    elif case == "unreadable image":
        image = request.getfixturevalue("unreadable_image")
    elif case == "not a checkpoint":
        ckpt = request.getfixturevalue("not_a_checkpoint")
    elif case == "checkpoint without tokenizer":
        ckpt = request.getfixturevalue("no_tokenizer_ckpt")
    elif case == "folder without tokenizer":
        ckpt = request.getfixturevalue("no_tokenizer_folder")
    elif case == "layer out of range":
        extra = ["--layer", "2"]
    elif case == "attention folder missing":
        picture = tmp_path / "no" / "such" / "attention.png"
    elif case == "top-k zero":
        extra = ["--top-k", "0"]
    argv = args(trained, "--json", "--attention", str(picture), *extra, ckpt=ckpt, image=image)
    assert script.main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # no half-written JSON
    assert captured.err.startswith("error: ") and message in captured.err
    assert not picture.exists()
    assert not list(tmp_path.glob(".*.tmp"))  # no temporary left behind
