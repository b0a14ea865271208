"""Nothing dropped in silence: an export carries every trained head (the word detector, the
matching head) beside the network, and a run started from it (``--model.init_from``) copies them,
or names each tensor it did not copy, with the setting that explains it."""

from __future__ import annotations

import contextlib
from io import StringIO

import pytest
import torch
from helpers import TINY_MODEL, load_script, objectives
from safetensors import safe_open

from vitbert import io
from vitbert.cli import main
from vitbert.lit.contrastive import ImageTextMatching
from vitbert.lit.module import MaskedLMModule
from vitbert.lit.objectives import MaskedLM, WordDetection

TINY = [*TINY_MODEL, "--model.num_examples", "0",
        "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false"]
WORD_HEAD = ["word_head.classifier.weight", "word_head.classifier.bias"]
ITM_HEAD = ["itm_head.pooler.weight", "itm_head.pooler.bias", "itm_head.classifier.weight",
            "itm_head.classifier.bias"]


def _fit(tmp, *extra: str):
    """Two steps of `train.py fit` on tiny generated data (the embedded default trains the word
    detector; ImageTextMatching in ``--model.objectives`` adds the matching head)."""
    return main(["fit", *TINY, "--data.source.init_args.root", str(tmp / "shapes"),
                 "--data.source.init_args.num_train", "64", "--data.source.init_args.num_val", "8",
                 "--data.source.init_args.num_test", "8", "--data.num_workers", "0",
                 "--data.batch_size", "8", "--trainer.max_steps", "2",
                 "--trainer.limit_val_batches", "0", "--checkpoint.monitor", "null", *extra])


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """(working folder, checkpoint, exported folder, what scripts/export.py printed) of a run
    that trained both heads."""
    tmp = tmp_path_factory.mktemp("heads")
    out = StringIO()
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(tmp)
        _fit(tmp, *objectives("itc", "words", "captions", "focus", "twins", "itm"),
             "--checkpoint.dirpath", str(tmp / "ckpt"))
        ckpt = tmp / "ckpt" / "last.ckpt"
        with contextlib.redirect_stdout(out):
            code = load_script("export").main(["--ckpt", str(ckpt), "--out", str(tmp / "out")])
    assert code == 0
    return tmp, ckpt, tmp / "out", out.getvalue()


def _module(stored: io.StoredModel, *heads) -> MaskedLMModule:
    """A module over the stored network that trains masked-language modelling and ``heads``
    (objectives with a head: WordDetection, ImageTextMatching)."""
    return MaskedLMModule(stored.config, objectives=[MaskedLM(), *heads])


def _heads(module: MaskedLMModule) -> dict:
    assert set(module.heads) <= {"word_head", "itm_head"}, module.heads
    return module.heads


def test_export_writes_every_trained_head_and_says_so(run):
    _, ckpt, folder, printed = run
    trained = torch.load(ckpt, weights_only=True)["state_dict"]
    with safe_open(folder / io.WEIGHTS_FILE, "pt") as stored:
        names = set(stored.keys())
    assert set(WORD_HEAD + ITM_HEAD) <= names
    assert "word_head (2 tensors), itm_head (4 tensors)" in printed, printed
    # The checkpoint held one thing more: the focused masking's running losses (training state,
    # vitbert.shapes.focus), named, not exported.
    assert printed.strip().endswith("left out (not part of the model, nothing reads them): "
                                    "difficulty.loss"), printed
    assert "difficulty.loss" not in names
    reread = io.read_checkpoint(folder)
    assert sorted(reread.heads) == sorted(WORD_HEAD + ITM_HEAD)
    for name in WORD_HEAD + ITM_HEAD:
        assert torch.equal(reread.heads[name], trained[name]), name
    assert not any(io.is_head_weight(name) for name in reread.state_dict)  # the network alone
    io.load_model(folder)  # still loads, strictly, to predict


def test_with_the_same_heads_every_tensor_is_copied(run):
    _, ckpt, folder, _ = run
    stored = io.read_checkpoint(folder)
    tokenizer = io.load_model(folder)[1]
    module = _module(stored, WordDetection(weight=1.0), ImageTextMatching(weight=1.0))
    report = io.initialize(module.net, str(folder), tokenizer, _heads(module))
    assert "not used" not in report and "left as initialised" not in report, report
    first = report.splitlines()[0]
    assert "word_head 2" in first and "itm_head 4" in first, report
    trained = torch.load(ckpt, weights_only=True)["state_dict"]
    ours = module.state_dict()
    # Metric states and the focused masking's running losses are the run's state, not weights.
    for name in (n for n in trained if not n.startswith(("val_", "test_", "difficulty."))):
        assert torch.equal(ours[name], trained[name]), name


def test_heads_this_run_lacks_are_named_as_not_used(run, tmp_path, monkeypatch, capsys):
    """End to end: ``--model.init_from`` the export with neither head: the fit prints each."""
    _, _, folder, _ = run
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    # The embedded default's objectives without the word detector (and, as there, no matching)
    _fit(tmp_path, "--model.init_from", str(folder),
         *objectives("itc", "captions", "focus", "twins"))
    out = capsys.readouterr().out
    (line,) = [line for line in out.splitlines() if line.startswith("  not used")]
    assert line == (  # in the exported file's order (safetensors sorts the names)
        "  not used (6): itm_head.classifier.bias, itm_head.classifier.weight, "
        "itm_head.pooler.bias, itm_head.pooler.weight (this run has no itm_head: its "
        "model.objectives have no ImageTextMatching); word_head.classifier.bias, "
        "word_head.classifier.weight (this run has no word_head: its model.objectives have no "
        "WordDetection)")
    assert "left as initialised" not in out


def test_heads_the_source_lacks_are_named_as_left_as_initialised(run):
    _, _, folder, _ = run
    stored = io.read_checkpoint(folder)
    stored.heads = {name: value for name, value in stored.heads.items()
                    if not name.startswith("itm_head.")}  # a run without the matching head
    module = _module(stored, WordDetection(weight=1.0), ImageTextMatching(weight=1.0))
    fresh = {k: v.clone() for k, v in module.itm_head.state_dict().items()}
    report = io.transfer_weights(module.net, stored, io.load_model(folder)[1],
                                 heads=_heads(module))
    assert report.missing == ITM_HEAD and not report.skipped
    assert any("the source has no itm_head (trained without ImageTextMatching)" in note
               for note in report.notes)
    assert f"left as initialised (4): {', '.join(ITM_HEAD)}" in str(report)
    for key, value in module.itm_head.state_dict().items():
        assert torch.equal(value, fresh[key]), key
    for name in WORD_HEAD:
        assert torch.equal(module.state_dict()[name], stored.heads[name]), name


def test_a_transfer_given_no_heads_still_names_the_sources(run):
    """Weights moved into a bare network (no module around it): the heads are named, not lost."""
    _, _, folder, _ = run
    stored = io.read_checkpoint(folder)
    report = io.transfer_weights(_module(stored).net, stored)
    assert sorted(report.skipped) == sorted(
        f"{name} (a training head ({name.split('.')[0]}); only the network was given)"
        for name in WORD_HEAD + ITM_HEAD)
