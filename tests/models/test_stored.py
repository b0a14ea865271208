"""Stored models (vitbert.io): one transfer for every source, faithful round trips, the tie after
every kind of load, safe unpickling, shareable files."""

from __future__ import annotations

import dataclasses
import json
import os
import stat

import pytest
import torch

from vitbert import io
from vitbert.data.tokenizer import tokenizer_to_json, train_wordpiece
from vitbert.io import load_network, write_exported
from vitbert.models import VitBert, build_network

CAPTIONS = ["a red circle left of a blue square", "a small green cross above a large diamond"]


def _tied(model: VitBert) -> bool:
    return model.mlm_head.decoder.weight is model.text.embeddings.word.weight


@pytest.fixture
def tokenizer():
    return train_wordpiece(CAPTIONS * 4, vocab_size=60, min_frequency=1)


@pytest.fixture
def ckpt(tmp_path, tokenizer, tiny_config):
    """A .ckpt in the layout training writes: plain config, ``net.`` weights, tokenizer JSON."""
    model = build_network(tiny_config(vocab_size=len(tokenizer)))
    path = tmp_path / "last.ckpt"
    torch.save({"hyper_parameters": {"net": model.config.to_dict()},
                "state_dict": {f"net.{k}": v for k, v in model.state_dict().items()},
                io.TOKENIZER_KEY: tokenizer_to_json(tokenizer)}, path)
    return path, model


def _timm_layout(tower) -> dict[str, torch.Tensor]:
    return {k.removeprefix("encoder.").replace("pos_embed.weight", "pos_embed"): v
            for k, v in tower.state_dict().items()}


def test_timm_weights_and_our_checkpoints_go_through_one_transfer(ckpt, tokenizer, tiny_config,
                                                                  monkeypatch):
    calls = []
    original = io.transfer.transfer_weights

    def spy(model, source, *args, **kwargs):
        calls.append(source.source)
        return original(model, source, *args, **kwargs)

    for module in (io.transfer, io.timm, io.load):
        monkeypatch.setattr(module, "transfer_weights", spy, raising=False)
    path, source = ckpt
    target = build_network(tiny_config(vocab_size=len(tokenizer)))
    from_timm = io.load_image_weights(target.image_tower, _timm_layout(source.image_tower))
    assert type(from_timm) is io.TransferReport and from_timm.missing == []
    report = io.initialize(target, init_from=str(path), tokenizer=tokenizer)
    copied = len(source.state_dict()) - 1  # the tied decoder matrix moves with the embedding
    assert report.startswith(f"Fine-tuning from {path}: copied {copied} tensors")
    assert calls == ["a state dict", str(path)]
    for key, value in source.state_dict().items():
        assert torch.equal(target.state_dict()[key], value), key


def test_rows_follow_their_tokens_when_only_the_ids_move(tokenizer, tiny_config):
    """Same vocabulary size, two tokens' ids swapped: every row (and the tied decoder) follows."""
    import json

    from vitbert.data.tokenizer import tokenizer_from_json

    spec = json.loads(tokenizer_to_json(tokenizer))
    vocab = spec["model"]["vocab"]
    a, b = "a", "of"
    vocab[a], vocab[b] = vocab[b], vocab[a]
    old_json = json.dumps(spec)
    assert tokenizer_from_json(old_json).get_vocab()[a] == tokenizer.get_vocab()[b]
    source = build_network(tiny_config(vocab_size=len(tokenizer)))
    target = build_network(tiny_config(vocab_size=len(tokenizer)))
    stored = io.StoredModel(source.config, source.state_dict(), old_json, "memory")
    report = io.transfer_weights(target, stored, tokenizer)
    assert "matched by text" in report.vocabulary and not report.skipped
    new_ids, old_ids = tokenizer.get_vocab(), tokenizer_from_json(old_json).get_vocab()
    for token in (a, b, "[MASK]"):
        new, old = new_ids[token], old_ids[token]
        assert torch.equal(target.text.embeddings.word.weight[new],
                           source.text.embeddings.word.weight[old]), token
        assert torch.equal(target.mlm_head.decoder.bias[new], source.mlm_head.decoder.bias[old])
    assert _tied(target)


def test_exported_folder_round_trip_is_bit_identical(tmp_path, tiny_config):
    model = build_network(tiny_config())
    write_exported(model, tmp_path / "a")
    loaded = load_network(tmp_path / "a")
    assert loaded.state_dict().keys() == model.state_dict().keys()
    for key, value in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[key], value), key
    write_exported(loaded, tmp_path / "b")
    for name in (io.WEIGHTS_FILE, io.CONFIG_FILE):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    from safetensors import safe_open

    with safe_open(tmp_path / "a" / io.WEIGHTS_FILE, "pt") as stored:
        names = set(stored.keys())
    assert io.TIED_KEY not in names and io.TIED_SOURCE in names


def test_exported_files_are_readable_by_others(tmp_path, model):
    previous = os.umask(0o077)  # a private umask: the export must still be shareable
    try:
        write_exported(model, tmp_path / "out")
    finally:
        os.umask(previous)
    for path in (tmp_path / "out", *(tmp_path / "out").iterdir()):
        assert stat.S_IMODE(path.stat().st_mode) & 0o044 == 0o044, path
    # Written atomically: no temporary file is left beside them.
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [io.CONFIG_FILE,
                                                                     io.WEIGHTS_FILE]


def test_the_tie_holds_after_every_kind_of_load(tmp_path, ckpt, tokenizer, tiny_config):
    path, source = ckpt
    write_exported(source, tmp_path / "exported")
    (tmp_path / "exported" / io.TOKENIZER_FILE).write_text(tokenizer_to_json(tokenizer))
    loaded = [
        load_network(tmp_path / "exported"),
        io.load_model(tmp_path / "exported")[0],
        io.load_model(path)[0],
    ]
    grown = build_network(dataclasses.replace(tiny_config(), vocab_size=len(tokenizer) + 7))
    io.transfer_weights(grown, io.read_checkpoint(path), tokenizer)  # rows matched by text
    pretrained = build_network(tiny_config(vocab_size=len(tokenizer)))
    io.load_image_weights(pretrained.image_tower, _timm_layout(source.image_tower))
    for model in loaded:
        assert torch.equal(model.mlm_head.decoder.weight, source.mlm_head.decoder.weight)
    for model in (*loaded, grown, pretrained):
        assert _tied(model)
        with torch.no_grad():
            model.text.embeddings.word.weight[3] += 1.0  # one matrix: the decoder sees it
        assert torch.equal(model.mlm_head.decoder.weight[3], model.text.embeddings.word.weight[3])


class _Payload:
    """Unpickling this calls os.mkdir(marker): code run by merely loading a file."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return os.mkdir, (self.marker,)


def test_a_checkpoint_whose_pickle_runs_code_is_refused(tmp_path, ckpt):
    path, _ = ckpt
    checkpoint = torch.load(path, weights_only=True)
    marker = tmp_path / "code_ran"
    checkpoint["callbacks"] = _Payload(marker)
    evil = tmp_path / "evil.ckpt"
    torch.save(checkpoint, evil)
    export = lambda path: io.export(path, tmp_path / "out")  # noqa: E731
    for load in (io.read_checkpoint, io.load_model, export):
        with pytest.raises(io.CheckpointError, match=r"evil\.ckpt: refused.*run code"):
            load(evil)
    assert not marker.exists() and not (tmp_path / "out").exists()
    torch.load(evil, weights_only=False)  # the payload is real: an unsafe load runs it
    assert marker.is_dir()


def test_a_network_with_an_extension_round_trips_by_its_class_path(tmp_path, tiny_config, batch):
    """The extension is named in config.json as ``{"class_path", "init_args"}`` and rebuilt from
    it; its weights (the reader's) are stored under ``reader.*`` and come back exactly."""
    from vitbert.models import ImageTowerConfig
    from vitbert.shapes import BindingLevers

    config = tiny_config(extension=BindingLevers(hue_dim=8, lookup_heads=2, share_window=2))
    config.image = ImageTowerConfig(kind="conv_stem", image_size=16, patch_size=8, dim=32,
                                    depth=1, num_heads=2, stem_hidden_dim=8)
    model = build_network(config).eval()
    write_exported(model, tmp_path / "m")
    stored = json.loads((tmp_path / "m" / io.CONFIG_FILE).read_text())
    assert stored["extension"]["class_path"] == "vitbert.shapes.model.BindingLevers"
    assert stored["extension"]["init_args"]["lookup_heads"] == 2
    loaded = load_network(tmp_path / "m").eval()
    assert loaded.config == model.config and loaded.reader is not None
    assert any(key.startswith("reader.lookup.") for key in loaded.state_dict())
    assert any(key.startswith("reader.sharing.") for key in loaded.state_dict())
    for key, value in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[key], value), key
    input_ids, attention_mask, images, _ = batch
    with torch.no_grad():
        torch.testing.assert_close(loaded(input_ids, attention_mask, loaded.image_features(images)),
                                   model(input_ids, attention_mask, model.image_features(images)),
                                   rtol=0, atol=0)
