"""End to end through `scripts/train.py`: learn, checkpoint, resume, fine-tune, bf16, Flickr30k.

One tiny model trains once per session (``trained`` fixture); the tests then resume it, fine-tune
from it with another vocabulary, and load its checkpoint. Everything runs in a temporary folder
with a generated data set, so nothing depends on the machine or the network.
"""

from __future__ import annotations

import csv
import itertools
import warnings
from pathlib import Path

import pytest
import torch
from helpers import TINY_MODEL, objectives, write_tiny_bert
from tiny_run import tiny_shapes

from vitbert.cli import main
from vitbert.io import TOKENIZER_KEY, load_model, read_checkpoint
from vitbert.lit.conditions import CONDITIONS


def fit(tmp: Path, *extra: str, steps: int = 16, run: str = "run"):
    """`train.py fit` on the tiny model; returns the CLI (trainer, model, datamodule)."""
    args = [
        "fit", *TINY_MODEL, *tiny_shapes(tmp / "shapes"),
        "--trainer.max_steps", str(steps), "--trainer.max_epochs", "-1",  # steps alone
        "--trainer.val_check_interval", "8",
        "--trainer.log_every_n_steps", "2",
        "--trainer.enable_progress_bar", "false", "--trainer.default_root_dir", str(tmp / run),
        "--checkpoint.dirpath", str(tmp / run / "checkpoints"), *extra,
    ]
    return main(args)


def validation_figures(cli) -> dict[str, float]:
    return {k: float(v) for k, v in cli.trainer.callback_metrics.items() if k.startswith("val/")}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("train")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(tmp)  # runs/ goes here
        cli = fit(tmp, steps=16)
    return tmp, cli


def test_fit_learns_and_writes_checkpoints(trained):
    tmp, cli = trained
    assert cli.trainer.global_step == 16
    logged = list((tmp / "runs").rglob("metrics.csv"))
    assert logged, "the CSV logger wrote nothing"
    rows = list(csv.DictReader(logged[0].open()))
    losses = [float(r["train/loss"]) for r in rows if r.get("train/loss")]
    # From about log(V) (a uniform guess) the loss must clearly fall within 16 steps.
    assert sum(losses[-3:]) / 3 < sum(losses[:3]) / 3 - 0.3, losses
    assert {"val/top1", "val/top5_text", "val/top1_mismatch_content", "val/image_gain_top1"} <= set(
        validation_figures(cli)
    )
    names = {p.name for p in (tmp / "run" / "checkpoints").iterdir()}
    assert "last.ckpt" in names and any(n.startswith("best") for n in names)
    last = torch.load(tmp / "run" / "checkpoints" / "last.ckpt", weights_only=True)
    assert last["global_step"] == 16  # current, whether or not the last validation improved


def test_checkpoint_is_plain_and_carries_tokenizer(trained):
    tmp, cli = trained
    ckpt = torch.load(tmp / "run" / "checkpoints" / "last.ckpt", weights_only=True)
    assert ckpt["hyper_parameters"]["vocab_size"] == cli.model.net.config.vocab_size
    assert TOKENIZER_KEY in ckpt
    model, tokenizer = load_model(tmp / "run" / "checkpoints" / "last.ckpt")
    assert len(tokenizer) == model.config.vocab_size
    assert model.mlm_head.decoder.weight is model.text.embeddings.word.weight
    # Same weights as the module that trained them, hence the same outputs.
    net = cli.model.net.eval()
    ids = torch.tensor([tokenizer("a red circle left of a blue square")["input_ids"]])
    mask = torch.ones_like(ids, dtype=torch.bool)
    images = torch.randint(0, 256, (1, 3, 32, 32), dtype=torch.uint8)
    torch.testing.assert_close(model(ids, mask, model.image_features(images)),
                               net(ids, mask, net.image_features(images)))


def test_lightning_checkpoint_round_trip_keeps_the_tie(trained):
    tmp, _ = trained
    from vitbert.lit.module import MaskedLMModule

    module = MaskedLMModule.load_from_checkpoint(
        tmp / "run" / "checkpoints" / "last.ckpt", weights_only=True
    )
    net = module.net
    assert net.mlm_head.decoder.weight is net.text.embeddings.word.weight
    assert module.tokenizer is not None  # restored from the checkpoint itself


def test_a_checkpoint_with_a_setting_this_version_has_not_stops_with_one_line(
        trained, tmp_path, monkeypatch, capsys):
    """An older vitbert's module setting (here its freeze setting of before ``freeze_image``):
    its run cannot be rebuilt, and resuming says so in one line naming ``--model.init_from``."""
    from vitbert.cli import main

    tmp, _ = trained
    monkeypatch.chdir(tmp_path)
    checkpoint = torch.load(tmp / "run" / "checkpoints" / "last.ckpt", weights_only=True)
    checkpoint["hyper_parameters"]["freeze_image_tower_steps"] = 3
    older = tmp_path / "older.ckpt"
    torch.save(checkpoint, older)
    with pytest.raises(SystemExit) as exit_:
        main(["fit", "--ckpt_path", str(older)])
    assert exit_.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"error: --ckpt_path {older}: its settings are not this vitbert's")
    assert "freeze_image_tower_steps" in line and "--model.init_from" in line


def test_resume_says_which_model_settings_it_ignores(trained, tmp_path, monkeypatch):
    """A resumed run trains the checkpoint's model (LightningCLI reads its settings back over the
    command line's): a flag that changed nothing is named, with the way to get what it asked."""
    tmp, _ = trained
    monkeypatch.chdir(tmp_path)
    last = tmp / "run" / "checkpoints" / "last.ckpt"
    without_mlm = objectives("itc", "words", "captions")
    with pytest.warns(UserWarning, match="resuming") as caught:
        cli = fit(tmp, "--ckpt_path", str(last), "--model.freeze_image.steps", "5",
                  *without_mlm, steps=16, run="resumed")
    assert cli.model.hparams.freeze_image is None
    assert [o["class_path"] for o in cli.model.hparams.objectives] == [
        "vitbert.lit.contrastive.Contrastive", "vitbert.lit.objectives.WordDetection",
        "vitbert.lit.objectives.CaptionWriting", "vitbert.lit.objectives.MaskedLM"]
    (message,) = [str(w.message) for w in caught if "resuming" in str(w.message)]
    assert "model.freeze_image {'part': 'tower', 'steps': 5} (the checkpoint's: None)" in message
    # Each objective by its class and arguments, not the parser's nested namespaces.
    assert "model.objectives [Contrastive(weight=1.0), WordDetection(weight=10.0), " in message
    assert "MaskedLM(weight=1.0)])" in message and "Namespace" not in message
    assert "--model.init_from" in message
    assert "vocab_size" not in message  # filled in from the data on every run, not a choice
    # The same command as the run's: nothing to say (a config may name a class by its package,
    # the checkpoint names it by its module).
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="resuming")
        fit(tmp, "--ckpt_path", str(last), steps=16, run="resumed")


def test_init_from_across_a_changed_vocabulary(trained, tmp_path, monkeypatch):
    tmp, _ = trained
    monkeypatch.chdir(tmp_path)
    source = read_checkpoint(tmp / "run" / "checkpoints" / "last.ckpt")
    # A smaller WordPiece vocabulary on the same captions: a different size and different ids.
    cli = fit(tmp, "--model.init_from", str(tmp / "run" / "checkpoints" / "last.ckpt"),
              "--data.vocab_size", "60", "--trainer.max_steps", "0", steps=0,
              run="finetune")
    net, tokenizer = cli.model.net, cli.datamodule.tokenizer
    old_rows = source.state_dict["text.embeddings.word.weight"]
    assert net.config.vocab_size == len(tokenizer) != old_rows.shape[0]
    from vitbert.data.tokenizer import tokenizer_from_json

    old_vocab = tokenizer_from_json(source.tokenizer_json).get_vocab()
    new_vocab = tokenizer.get_vocab()
    shared = sorted(set(old_vocab) & set(new_vocab))
    assert len(shared) > 30 and "[MASK]" in shared
    assert any(old_vocab[t] != new_vocab[t] for t in shared)  # ids moved: rows matched by text
    new_ids = torch.tensor([new_vocab[t] for t in shared])
    old_ids = torch.tensor([old_vocab[t] for t in shared])
    torch.testing.assert_close(net.text.embeddings.word.weight[new_ids], old_rows[old_ids])
    assert net.mlm_head.decoder.weight is net.text.embeddings.word.weight
    for name in ("text.encoder.blocks.0.attn.qkv.weight", "image_tower.encoder.norm.weight"):
        torch.testing.assert_close(net.state_dict()[name], source.state_dict[name])


def test_the_default_trains_word_detection_and_its_checkpoints_load_anywhere(trained):
    """configs/default.yaml lists the word detection loss: it is logged, its head is saved and
    restored, and vitbert.io loads the net alone (the head is the objective's)."""
    from vitbert.lit.module import MaskedLMModule
    from vitbert.lit.objectives import WordDetection

    tmp, cli = trained
    (words,) = [o for o in cli.model.objectives if isinstance(o, WordDetection)]
    assert words.weight > 0 and cli.model.heads["word_head"] is cli.model.word_head
    assert "train/word_loss" in cli.trainer.callback_metrics
    ckpt = tmp / "run" / "checkpoints" / "last.ckpt"
    restored = MaskedLMModule.load_from_checkpoint(ckpt, weights_only=True)
    torch.testing.assert_close(restored.word_head.classifier.weight,
                               cli.model.word_head.classifier.weight)
    model, _ = load_model(ckpt)
    torch.testing.assert_close(model.image_tower.encoder.norm.weight,
                               cli.model.net.image_tower.encoder.norm.weight)


def test_bf16_mixed_training_steps_are_finite(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cli = fit(tmp_path, "--trainer.precision", "bf16-mixed", "--trainer.fast_dev_run", "2")
    # The MLM or the caption loss (whichever the batches drew), and the word detection loss.
    losses = {k: v for k, v in cli.trainer.callback_metrics.items() if k.endswith("_loss")
              or k == "train/loss"}
    assert "train/word_loss" in losses and len(losses) >= 2, losses
    assert all(torch.isfinite(loss) for loss in losses.values()), losses
    assert next(cli.model.net.parameters()).dtype == torch.float32  # weights stay fp32


def test_flickr30k_config_fast_dev_run_bf16_on_cpu(tmp_path, monkeypatch, karpathy_flickr):
    monkeypatch.chdir(tmp_path)
    config = Path(__file__).resolve().parents[2] / "configs" / "flickr30k.yaml"
    write_tiny_bert(tmp_path / "bert", positions=64)
    small = [
        "--model.net.image.image_size", "32", "--model.net.image.patch_size", "16",
        "--model.net.image.dim", "32", "--model.net.image.depth", "1",
        "--model.net.image.num_heads", "2", "--model.net.image.pretrained", "null",
        # bert-base-uncased's place: a tiny BERT in transformers' files (its layout, bf16 too)
        "--model.net.text.pretrained", str(tmp_path / "bert"),
    ]
    cli = main([
        "fit", "--config", str(config), *small,
        "--data.source.init_args.root", str(karpathy_flickr),
        "--data.source.init_args.cache_dir", str(tmp_path / "cache"),
        "--data.batch_size", "4", "--data.num_workers", "0",
        "--data.source.init_args.prepare_workers", "0",
        "--trainer.accelerator", "cpu", "--trainer.devices", "1",
        "--trainer.precision", "bf16-mixed", "--trainer.fast_dev_run", "true",
    ])
    assert torch.isfinite(cli.trainer.callback_metrics["train/loss"])
    assert cli.model.net.config.image_tokens == "pooled"
    assert cli.model.hparams.freeze_image == {"part": "tower", "steps": 500}


def test_transfer_resamples_image_positions_and_extends_text_positions():
    from dataclasses import replace

    from vitbert.io import StoredModel, transfer_weights
    from vitbert.models import VitBert, VitBertConfig

    small = VitBertConfig.from_dict({"vocab_size": 50, "image": {"image_size": 32, "dim": 32,
                                     "num_heads": 2}, "text": {"dim": 32, "num_heads": 2,
                                                              "max_len": 64}})
    source = VitBert(small)
    with torch.no_grad():  # a smooth table: every channel holds the row coordinate (8×8 grid)
        rows = torch.arange(8).repeat_interleave(8).float() / 7
        source.image_tower.pos_embed.weight.copy_(rows[None, :, None].expand(1, 64, 32))
    large = replace(small, image=replace(small.image, image_size=48),
                    text=replace(small.text, max_len=80))
    target = VitBert(large)
    stored = StoredModel(small, source.state_dict(), None, "memory")
    report = transfer_weights(target, stored)
    assert not report.skipped, report
    text_positions = target.text.embeddings.position.weight
    torch.testing.assert_close(text_positions[:64], source.text.embeddings.position.weight)
    resampled = target.image_tower.pos_embed.weight[0, :, 0].reshape(12, 12)  # 8×8 → 12×12
    row_means = resampled.mean(dim=1)
    assert (row_means[1:] > row_means[:-1]).all()  # still the row coordinate, finer
    assert row_means[0] < 0.05 and row_means[-1] > 0.95
    torch.testing.assert_close(resampled, resampled[:, :1].expand(12, 12))  # constant along rows


def test_export_round_trip_gives_identical_outputs(trained, tmp_path):
    import runpy

    tmp, _ = trained
    ckpt = tmp / "run" / "checkpoints" / "last.ckpt"
    export_main = runpy.run_path(str(Path(__file__).resolve().parents[2] / "scripts" / "export.py"))
    assert export_main["main"](["--ckpt", str(ckpt), "--out", str(tmp_path / "exported")]) == 0
    assert {p.name for p in (tmp_path / "exported").iterdir()} >= {
        "model.safetensors", "config.json", "tokenizer.json"}
    original, tokenizer = load_model(ckpt)
    exported, exported_tokenizer = load_model(tmp_path / "exported")
    assert exported.mlm_head.decoder.weight is exported.text.embeddings.word.weight
    assert exported_tokenizer.get_vocab() == tokenizer.get_vocab()
    ids = torch.tensor([tokenizer("a large green cross above a small red diamond")["input_ids"]])
    mask = torch.ones_like(ids, dtype=torch.bool)
    images = torch.randint(0, 256, (1, 3, 32, 32), dtype=torch.uint8)
    torch.testing.assert_close(exported(ids, mask, exported.image_features(images)),
                               original(ids, mask, original.image_features(images)), atol=0, rtol=0)
    # Not a checkpoint: a clear error and exit code 2, nothing written.
    (tmp_path / "junk.ckpt").write_bytes(b"not a checkpoint")
    out = tmp_path / "never"
    assert export_main["main"](["--ckpt", str(tmp_path / "junk.ckpt"), "--out", str(out)]) == 2
    assert not out.exists()


def test_pretrained_image_weights_load_at_fit_start_only(tmp_path, monkeypatch):
    """A fresh fit loads `image.pretrained`; a checkpoint restores everything without it."""
    import timm

    from vitbert.lit.module import MaskedLMModule

    monkeypatch.chdir(tmp_path)
    reference = timm.models.VisionTransformer(img_size=32, patch_size=16, embed_dim=32, depth=1,
                                              num_heads=2, num_classes=0)
    weights = tmp_path / "vit.pth"
    torch.save(reference.state_dict(), weights)
    vit = ["--model.net.image.kind", "vit", "--model.net.image.patch_size", "16",
           "--model.net.image.class_token", "true", "--model.net.image.pool", "cls",
           "--model.net.image.pretrained", str(weights)]
    cli = fit(tmp_path, *vit, steps=0, run="pretrained")
    ours = cli.model.net.image_tower.patch_embed.proj.weight
    torch.testing.assert_close(ours, reference.patch_embed.proj.weight)
    ckpt = tmp_path / "saved.ckpt"
    cli.trainer.save_checkpoint(ckpt)
    weights.unlink()  # gone: loading the checkpoint must not need it
    restored = MaskedLMModule.load_from_checkpoint(ckpt, weights_only=True)
    torch.testing.assert_close(restored.net.image_tower.patch_embed.proj.weight, ours)


def test_validate_prints_examples_at_the_checkpoints_step(trained, tmp_path, monkeypatch, capsys):
    tmp, _ = trained
    monkeypatch.chdir(tmp_path)
    main(["validate", *TINY_MODEL, *tiny_shapes(tmp / "shapes"), "--examples.num_examples", "2",
          "--trainer.enable_progress_bar", "false",
          "--ckpt_path", str(tmp / "run" / "checkpoints" / "last.ckpt")])
    out = capsys.readouterr().out
    lines = out[out.index("Example predictions after step 16 "):].splitlines()[1:]
    texts = [i for i, line in enumerate(lines) if line.startswith("  ") and line[2] != " "][:2]
    assert len(texts) == 2
    last = texts[-1] + 1 + lines[texts[-1]].count("[MASK]")
    for start, end in itertools.pairwise([*texts, last]):
        text, masks = lines[start], lines[start + 1:end]
        # One line per [MASK], numbered, each with its truth and the three readings.
        assert len(masks) == text.count("[MASK]") >= 1
        for n, line in enumerate(masks, start=1):
            assert line.startswith(f"    [MASK] {n}: truth ") and line.count("|") == 2


@pytest.mark.parametrize("subcommand, stage, title", [("validate", "val", "Validation"),
                                                      ("test", "test", "Test")])
def test_validate_and_test_end_with_the_table_fit_ends_with(
        trained, tmp_path, monkeypatch, capsys, subcommand, stage, title):
    """Conditions as rows, metrics as columns, the checkpoint's step; not Lightning's table."""
    tmp, _ = trained
    monkeypatch.chdir(tmp_path)
    cli = main([subcommand, *TINY_MODEL, *tiny_shapes(tmp / "shapes"),
                "--examples.num_examples", "0",
                "--trainer.enable_progress_bar", "false",
                "--ckpt_path", str(tmp / "run" / "checkpoints" / "last.ckpt")])
    out = capsys.readouterr().out
    assert "DataLoader 0" not in out  # Lightning's one row per metric
    table = out[out.index(f"{title} after 16 steps:"):].splitlines()[1:]
    assert table[0].split()[:2] == ["loss", "top1"]
    rows = table[2:2 + len(CONDITIONS)]
    assert [row[:26].strip() for row in rows] == [c.description for c in CONDITIONS]
    # The figures are this run's: the with-photo row's loss is the logged one.
    loss = float(cli.trainer.callback_metrics[f"{stage}/loss"])
    assert rows[0][26:].split()[0] == f"{loss:.4f}"
