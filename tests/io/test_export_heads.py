"""Nothing dropped in silence: an export carries the trained head (the word detector) beside the
network, and a run started from it (``--model.init_from``) copies it, or names each tensor it did
not copy, with the setting that explains it."""

from __future__ import annotations

import contextlib
from io import StringIO

import pytest
import torch
from helpers import TINY_MODEL, load_script, objectives
from safetensors import safe_open

from vitbert import io
from vitbert.cli import main
from vitbert.lit.module import MaskedLMModule
from vitbert.lit.objectives import MaskedLM, WordDetection

TINY = [*TINY_MODEL, "--examples.num_examples", "0",
        "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false"]
WORD_HEAD = ["word_head.classifier.weight", "word_head.classifier.bias"]


def _fit(tmp, *extra: str):
    """Two steps of `train.py fit` on tiny generated data (the embedded default trains the word
    detector)."""
    return main(["fit", *TINY, "--data.source.init_args.root", str(tmp / "shapes"),
                 "--data.source.init_args.num_train", "64", "--data.source.init_args.num_val", "8",
                 "--data.source.init_args.num_test", "8", "--data.num_workers", "0",
                 "--data.batch_size", "8", "--trainer.max_steps", "2",
                 "--trainer.limit_val_batches", "0", "--checkpoint.monitor", "null", *extra])


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """(working folder, checkpoint, exported folder, what scripts/export.py printed) of a run
    that trained the word detector."""
    tmp = tmp_path_factory.mktemp("heads")
    out = StringIO()
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(tmp)
        _fit(tmp, *objectives("itc", "words", "captions", "mlm"),
             "--checkpoint.dirpath", str(tmp / "ckpt"))
        ckpt = tmp / "ckpt" / "last.ckpt"
        with contextlib.redirect_stdout(out):
            code = load_script("export").main(["--ckpt", str(ckpt), "--out", str(tmp / "out")])
    assert code == 0
    return tmp, ckpt, tmp / "out", out.getvalue()


def _module(stored: io.StoredModel, *heads) -> MaskedLMModule:
    """A module over the stored network that trains masked-language modelling and ``heads``
    (objectives with a head: WordDetection)."""
    return MaskedLMModule(stored.config, objectives=[MaskedLM(), *heads])


def _heads(module: MaskedLMModule) -> dict:
    assert set(module.heads) <= {"word_head"}, module.heads
    return module.heads


def test_export_writes_every_trained_head_and_says_so(run):
    _, ckpt, folder, printed = run
    trained = torch.load(ckpt, weights_only=True)["state_dict"]
    with safe_open(folder / io.WEIGHTS_FILE, "pt") as stored:
        names = set(stored.keys())
    assert set(WORD_HEAD) <= names
    assert "the network (" in printed and "word_head (2 tensors)" in printed, printed
    assert printed.strip().endswith("word_head (2 tensors)"), printed  # nothing left out
    reread = io.read_checkpoint(folder)
    assert sorted(reread.heads) == sorted(WORD_HEAD)
    for name in WORD_HEAD:
        assert torch.equal(reread.heads[name], trained[name]), name
    assert not any(io.is_head_weight(name) for name in reread.state_dict)  # the network alone
    io.load_model(folder)  # still loads, strictly, to predict


def test_with_the_same_heads_every_tensor_is_copied(run):
    _, ckpt, folder, _ = run
    stored = io.read_checkpoint(folder)
    tokenizer = io.load_model(folder)[1]
    module = _module(stored, WordDetection(weight=1.0))
    report = io.initialize(module.net, str(folder), tokenizer, _heads(module))
    assert "not used" not in report and "left as initialised" not in report, report
    assert "word_head 2" in report.splitlines()[0], report
    trained = torch.load(ckpt, weights_only=True)["state_dict"]
    ours = module.state_dict()
    # Metric states are the run's state, not weights.
    for name in (n for n in trained if not n.startswith(("val_", "test_"))):
        assert torch.equal(ours[name], trained[name]), name


def test_heads_this_run_lacks_are_named_as_not_used(run, tmp_path, monkeypatch, capsys):
    """End to end: ``--model.init_from`` the export without the word detector: the fit names
    its tensors."""
    _, _, folder, _ = run
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    # The embedded default's objectives without the word detector
    _fit(tmp_path, "--model.init_from", str(folder),
         *objectives("itc", "captions", "mlm"))
    out = capsys.readouterr().out
    (line,) = [line for line in out.splitlines() if line.startswith("  not used")]
    assert line == (  # in the exported file's order (safetensors sorts the names)
        "  not used (2): word_head.classifier.bias, word_head.classifier.weight (this run has no "
        "word_head: its model.objectives have no WordDetection)")
    assert "left as initialised" not in out


def test_heads_the_source_lacks_are_named_as_left_as_initialised(run):
    _, _, folder, _ = run
    stored = io.read_checkpoint(folder)
    stored.heads = {}  # a run without the word detector
    module = _module(stored, WordDetection(weight=1.0))
    fresh = {k: v.clone() for k, v in module.word_head.state_dict().items()}
    report = io.transfer_weights(module.net, stored, io.load_model(folder)[1],
                                 heads=_heads(module))
    assert report.missing == WORD_HEAD and not report.skipped
    assert any("the source has no word_head (trained without WordDetection)" in note
               for note in report.notes)
    assert f"left as initialised (2): {', '.join(WORD_HEAD)}" in str(report)
    for key, value in module.word_head.state_dict().items():
        assert torch.equal(value, fresh[key]), key


def test_a_transfer_given_no_heads_still_names_the_sources(run):
    """Weights moved into a bare network (no module around it): the heads are named, not lost."""
    _, _, folder, _ = run
    stored = io.read_checkpoint(folder)
    report = io.transfer_weights(_module(stored).net, stored)
    assert sorted(report.skipped) == sorted(
        f"{name} (a training head ({name.split('.')[0]}); only the network was given)"
        for name in WORD_HEAD)
