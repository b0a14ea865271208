"""A checkpoint written before the objectives list, once written anew by
scripts/upgrade_checkpoint.py, predicts, writes, searches and fine-tunes as it did; read as it is,
it is refused with one line that names the script, and resuming its run stops with one line.

The fixture (tests/fixtures/before_objectives, its README says how it was made) was written by
the version before the shapes levers left the core: its config held them as core settings and its
weights held them at the network's top level. What that version answered is in expected.json.
"""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import REPO, load_script, red_over_blue

from vitbert import Captioner, FillMask, Retriever
from vitbert.io import CheckpointError, read_checkpoint
from vitbert.shapes import BindingLevers

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "before_objectives"
OLD_CKPT, OLD_EXPORTED = FIXTURE / "last.ckpt", FIXTURE / "exported"
EXPECTED = json.loads((FIXTURE / "expected.json").read_text())


@pytest.fixture(scope="module")
def upgraded(tmp_path_factory) -> dict[str, Path]:
    """The fixture's checkpoint and exported folder, written anew by the script."""
    out = tmp_path_factory.mktemp("upgraded")
    script = load_script("upgrade_checkpoint")
    said = io.StringIO()
    with contextlib.redirect_stdout(said):
        assert script.main([str(OLD_CKPT), str(out / "last.ckpt")]) == 0
        assert script.main([str(OLD_EXPORTED), str(out / "exported")]) == 0
    # Its image-text matching head, an objective removed since, is left out and named.
    assert said.getvalue().count("left out itm_head (image-text matching's head") == 2
    return {"ckpt": out / "last.ckpt", "exported": out / "exported"}


@pytest.mark.parametrize("source", [OLD_CKPT, OLD_EXPORTED], ids=["ckpt", "exported"])
def test_read_as_it_is_it_is_refused_with_the_script_that_converts_it(source):
    with pytest.raises(CheckpointError, match="written by an older vitbert") as refused:
        read_checkpoint(source)
    assert "chroma_dim" in str(refused.value)
    assert "scripts/upgrade_checkpoint.py" in str(refused.value)


@pytest.mark.parametrize("kind", ["ckpt", "exported"])
def test_its_levers_are_read_as_the_shapes_extension(upgraded, kind):
    stored = read_checkpoint(upgraded[kind])
    levers = stored.config.extension
    assert isinstance(levers, BindingLevers)
    assert (levers.hue_dim, levers.lookup_heads, levers.share_window) == (8, 2, 6)
    assert levers.places and levers.lookup_place
    assert any(key.startswith("reader.lookup.") for key in stored.state_dict)
    assert any(key.startswith("reader.sharing.") for key in stored.state_dict)
    assert set(stored.heads) == {"word_head.classifier.weight", "word_head.classifier.bias"}
    assert not any(key.startswith("itm_head.") for key in [*stored.state_dict, *stored.ignored])


@pytest.mark.parametrize("kind", ["ckpt", "exported"])
def test_fill_mask_answers_as_the_version_that_wrote_it(upgraded, kind):
    fill_mask = FillMask.from_checkpoint(upgraded[kind])
    photo = red_over_blue(32, 32)
    for image, expected in ((photo, EXPECTED["with_photo"]), (None, EXPECTED["text_only"])):
        with pytest.warns(UserWarning, match="not in this model's vocabulary"):
            guesses = fill_mask(EXPECTED["text"], image=image, top_k=5)
        assert [g["token_str"] for g in guesses] == [word for word, _ in expected]
        torch.testing.assert_close(torch.tensor([g["score"] for g in guesses]),
                                   torch.tensor([score for _, score in expected]),
                                   rtol=1e-5, atol=1e-7)


def test_the_captioner_writes_what_it_wrote(upgraded):
    caption = Captioner.from_checkpoint(upgraded["ckpt"])(red_over_blue(32, 32))[0]["caption"]
    assert caption == EXPECTED["caption"]


@pytest.mark.parametrize("kind", ["ckpt", "exported"])
def test_the_retriever_ranks_by_the_contrastive_scores_it_gave(upgraded, kind):
    """That version re-ranked by its matching head and reported each caption's contrastive
    cosine too (``itc``); this one ranks by those cosines, and computes the same."""
    retriever = Retriever.from_checkpoint(upgraded[kind])
    found = retriever.captions_for(red_over_blue(32, 32), EXPECTED["retrieval"]["captions"],
                                   top_k=2)
    expected = sorted(EXPECTED["retrieval"]["ranked"]["results"], key=lambda r: -r["itc"])
    assert [r["index"] for r in found["results"]] == [r["index"] for r in expected]
    for ours, theirs in zip(found["results"], expected, strict=True):
        assert ours["score"] == pytest.approx(theirs["itc"], abs=1e-4)


def _fit(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    """``train.py fit`` on a few tiny shapes pictures, in ``tmp_path``."""
    command = [sys.executable, str(REPO / "scripts" / "train.py"), "fit",
               "--data.source.init_args.root", str(tmp_path / "shapes"),
               "--data.source.init_args.num_train", "64", "--data.source.init_args.num_val", "8",
               "--data.source.init_args.num_test", "8", "--data.batch_size", "32",
               "--data.num_workers", "0", "--trainer.max_steps", "1",
               "--trainer.limit_val_batches", "0", "--examples.num_examples", "0", *args]
    return subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300)


def test_a_new_run_starts_from_its_weights_and_heads(tmp_path, upgraded):
    # The fixture's own sizes, today's flags: the network and the word head carry over, every
    # tensor of them (the matching head of a removed objective was left out by the upgrade).
    sizes = ["--model.net.image.dim", "16", "--model.net.image.depth", "1",
             "--model.net.image.num_heads", "2", "--model.net.image.stem_hidden_dim", "4",
             "--model.net.text.dim", "16", "--model.net.text.depth", "1",
             "--model.net.text.num_heads", "2", "--model.net.itc_dim", "128",
             "--model.net.extension", json.dumps({"class_path": "vitbert.shapes.BindingLevers",
                                                  "init_args": {"hue_dim": 8, "lookup_heads": 2}})]
    done = _fit(tmp_path, *sizes, "--model.init_from", str(upgraded["ckpt"]))
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout[done.stdout.index("Fine-tuning from"):].splitlines()
    report = [lines[0], *(line for line in lines[1:] if line.startswith("  "))]
    assert "reader 12" in report[0] and "word_head" not in report[0], report  # lookup, sharing
    resized = next(line for line in report if line.lstrip().startswith("resized"))
    assert "word_head.classifier.weight" in resized  # its rows, matched by token (new captions)
    assert not any("not used" in line or "left as initialised" in line for line in report), report


def test_resuming_its_run_stops_with_one_line_naming_init_from(tmp_path):
    done = _fit(tmp_path, "--ckpt_path", str(OLD_CKPT))
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --ckpt_path"), done.stderr[-2000:]
    assert "--model.init_from" in lines[0]
