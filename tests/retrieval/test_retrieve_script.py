"""scripts/retrieve.py: both directions, --json with the documented keys, and exit code 2 with
one line on stderr for each mistake (bad folder, no photos, not a checkpoint, no contrastive
heads). Most tests call ``main(argv)`` in-process; one runs the script for real."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from helpers import SCRIPTS, load_script

from vitbert.retriever import Retriever

# docs/retrieval.md, "The JSON": the keys of each result.
PHOTOS_KEYS = {"query", "candidates", "results", "unknown_words", "warning", "skipped", "index"}
PHOTO_KEYS = {"rank", "image", "path", "score"}
INDEX_KEYS = {"path", "photos", "embedded", "reused"}
SENTENCES_KEYS = {"query", "candidates", "results"}
SENTENCE_KEYS = {"rank", "caption", "index", "score"}


def run(argv, capsys) -> tuple[int, str, str]:
    code = load_script("retrieve").main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_photos_for_a_sentence_as_json(searcher, colour_folder, capsys):
    (colour_folder / "broken.jpg").write_bytes(b"no photo")
    code, out, err = run(["--ckpt", searcher.ckpt, "--images", colour_folder, "--text",
                          "a red circle", "--top-k", "3", "--json"], capsys)
    assert code == 0, err
    result = json.loads(out)
    assert set(result) == PHOTOS_KEYS
    assert set(result["index"]) == INDEX_KEYS and result["index"]["photos"] == 4
    assert all(set(found) == PHOTO_KEYS for found in result["results"])
    assert result["candidates"] == 4
    assert result["query"] == {"text": "a red circle"}
    assert "skipped broken.jpg: cannot identify image file" in err
    expected = Retriever.from_checkpoint(searcher.ckpt, device="cpu").images_for(
        "a red circle", colour_folder, top_k=3)
    assert result["results"] == expected["results"]


def test_sentences_for_a_photo_as_a_table_and_as_json(searcher, colour_folder, tmp_path,
                                                        capsys):
    captions = tmp_path / "captions.txt"
    captions.write_text("a red circle\n\na large blue square\nthree yellow crosses\n")
    argv = ["--ckpt", searcher.exported, "--image", colour_folder / "red.png", "--captions",
            captions, "--top-k", "2"]
    code, out, err = run([*argv, "--json"], capsys)
    assert code == 0, err
    result = json.loads(out)
    assert set(result) == SENTENCES_KEYS and result["candidates"] == 3
    assert all(set(found) == SENTENCE_KEYS for found in result["results"])
    assert len(result["results"]) == 2
    code, table, _ = run(argv, capsys)
    assert code == 0
    lines = table.splitlines()
    assert lines[0].startswith(f"sentences for {colour_folder / 'red.png'} (ranked by the "
                               "contrastive score among 3)")
    assert lines[1].split()[0] == "1" and lines[1].endswith(result["results"][0]["caption"])


@pytest.fixture
def cases(searcher, colour_folder, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "readme.txt").write_text("no photos here")
    notes = tmp_path / "notes.ckpt"
    notes.write_text("not weights")
    blank = tmp_path / "blank.txt"
    blank.write_text("\n  \n")
    good = ["--images", colour_folder, "--text", "a red circle"]
    return {
        "missing folder": (["--ckpt", searcher.ckpt, "--images", tmp_path / "nowhere", "--text",
                            "a dog"], "no such folder"),
        "folder with no photos": (["--ckpt", searcher.ckpt, "--images", empty, "--text",
                                   "a dog"], "no photos in it"),
        "not a checkpoint": (["--ckpt", notes, *good], "not a readable PyTorch checkpoint"),
        "no contrastive heads": (["--ckpt", searcher.no_itc, *good], "--model.net.itc_dim 128"),
        "missing photo": (["--ckpt", searcher.ckpt, "--image", tmp_path / "no.png",
                           "--captions", blank], "no such file"),
        "no captions": (["--ckpt", searcher.ckpt, "--image", colour_folder / "red.png",
                         "--captions", blank], "no sentences in it"),
        "both directions": (["--ckpt", searcher.ckpt, *good, "--image", "x.png"],
                            "ask one thing"),
    }


@pytest.mark.parametrize("case", ["missing folder", "folder with no photos", "not a checkpoint",
                                  "no contrastive heads", "missing photo", "no captions",
                                  "both directions"])
def test_each_mistake_exits_2_with_one_line(case, cases, capsys):
    argv, message = cases[case]
    code, out, err = run(argv, capsys)
    assert code == 2
    assert out == ""
    assert len(err.strip().splitlines()) == 1 and err.startswith("error: ")
    assert message in err


def test_the_script_exits_2_for_a_model_without_contrastive_heads(searcher, colour_folder):
    result = subprocess.run([sys.executable, str(SCRIPTS / "retrieve.py"), "--ckpt",
                             str(searcher.no_itc), "--images", str(colour_folder), "--text",
                             "a red circle"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and "no contrastive heads" in result.stderr


def test_help_explains_both_directions_and_the_exit_status():
    text = load_script("retrieve").build_parser().format_help()
    for words in ("--images DIR", "--captions FILE", "--index FILE", "exit status", "contrastive",
                  ".vitbert-index-", "docs/retrieval.md"):
        assert words in text, words
