"""The contrastive heads in the network (VitBert.embed_images / embed_texts): unit vectors of
the configured width, a text side that never sees the photo, an image side that is the tower's
mean pool, and weights that travel with the network through every load."""

from __future__ import annotations

import math

import pytest
import torch

from vitbert import io
from vitbert.data.tokenizer import tokenizer_to_json, train_wordpiece
from vitbert.io import write_exported
from vitbert.models import VitBert, VitBertConfig
from vitbert.models.contrastive import INITIAL_TEMPERATURE, TEMPERATURE_RANGE

CAPTIONS = ["a red circle left of a blue square", "a small green cross above a large diamond"]


def test_no_contrastive_heads_by_default_and_old_configs_read_as_none(tiny_config):
    model = VitBert(tiny_config())
    assert not model.has_itc and model.itc is None
    assert not any(name.startswith("itc.") for name in model.state_dict())
    stored = tiny_config().to_dict()
    del stored["itc_dim"]  # a config written before the contrastive heads existed
    assert VitBertConfig.from_dict(stored).itc_dim == 0
    with pytest.raises(ValueError, match="itc_dim 128"):
        model.embed_texts(torch.ones(1, 3, dtype=torch.long), torch.ones(1, 3, dtype=torch.bool))


def test_embeddings_are_unit_vectors_of_itc_dim(tiny_config, batch):
    model = VitBert(tiny_config(itc_dim=16)).eval()
    input_ids, attention_mask, images, _ = batch
    assert model.has_itc
    texts = model.embed_texts(input_ids, attention_mask)
    photos = model.embed_images(images)
    assert texts.shape == photos.shape == (2, 16)
    torch.testing.assert_close(texts.norm(dim=-1), torch.ones(2))
    torch.testing.assert_close(photos.norm(dim=-1), torch.ones(2))
    assert model.itc.temperature.item() == pytest.approx(INITIAL_TEMPERATURE)


def test_text_side_reads_the_words_alone_and_ignores_padding(tiny_config, batch):
    model = VitBert(tiny_config(itc_dim=16)).eval()
    input_ids, attention_mask, _, _ = batch
    alone = model.embed_texts(input_ids[1:, :5], attention_mask[1:, :5])  # caption 1 unpadded
    padded = model.embed_texts(input_ids, attention_mask)[1:]
    torch.testing.assert_close(alone, padded)
    cls = model.encode(input_ids, attention_mask)[0][:, 0]  # the text-only reading's [CLS]
    torch.testing.assert_close(model.embed_texts(input_ids, attention_mask),
                               torch.nn.functional.normalize(model.itc.text_proj(cls), dim=-1))


@pytest.mark.parametrize("image_tokens", ["pooled", "patches"])
def test_image_side_is_the_towers_mean_pool(tiny_config, batch, image_tokens):
    model = VitBert(tiny_config(itc_dim=16, image_tokens=image_tokens)).eval()
    images = batch[2]
    pooled, _ = model.image_tower(model.image_tower.normalize(images))  # pool="mean"
    expected = torch.nn.functional.normalize(model.itc.image_proj(pooled), dim=-1)
    torch.testing.assert_close(model.embed_images(images), expected)
    # Training reads the tower's output once and embeds from it: the same vectors.
    torch.testing.assert_close(model.embed_image_features(model.image_features(images)), expected)


def test_temperature_is_clamped_and_learned(tiny_config, batch):
    model = VitBert(tiny_config(itc_dim=8))
    with torch.no_grad():
        model.itc.log_temperature.fill_(math.log(1e-4))
    assert model.itc.temperature.item() == pytest.approx(TEMPERATURE_RANGE[0])
    with torch.no_grad():
        model.itc.log_temperature.fill_(math.log(0.1))
    input_ids, attention_mask, images, _ = batch
    scores = model.embed_texts(input_ids, attention_mask) @ model.embed_images(images).T
    torch.nn.functional.cross_entropy(scores / model.itc.temperature, torch.arange(2)).backward()
    assert model.itc.log_temperature.grad is not None and model.itc.log_temperature.grad != 0
    assert model.itc.image_proj.weight.grad.abs().sum() > 0
    assert model.itc.text_proj.weight.grad.abs().sum() > 0


def test_export_and_load_model_give_the_same_embeddings(tmp_path, tiny_config, batch):
    tokenizer = train_wordpiece(CAPTIONS * 4, vocab_size=60, min_frequency=1)
    model = VitBert(tiny_config(itc_dim=16, vocab_size=len(tokenizer))).eval()
    with torch.no_grad():
        model.itc.log_temperature.fill_(-3.0)  # not its initial value: it must travel too
    ckpt = tmp_path / "last.ckpt"
    torch.save({"hyper_parameters": {"net": model.config.to_dict()},
                "state_dict": {f"net.{k}": v for k, v in model.state_dict().items()},
                io.TOKENIZER_KEY: tokenizer_to_json(tokenizer)}, ckpt)
    input_ids, attention_mask, images, _ = batch
    expected = (model.embed_texts(input_ids, attention_mask), model.embed_images(images))
    exported = io.export(ckpt, tmp_path / "exported")
    for path in (ckpt, exported):
        loaded, _ = io.load_model(path)
        assert loaded.has_itc and loaded.itc.log_temperature.item() == pytest.approx(-3.0)
        torch.testing.assert_close(loaded.embed_texts(input_ids, attention_mask), expected[0])
        torch.testing.assert_close(loaded.embed_images(images), expected[1])
    # init_from: a fresh run's network takes them as it takes every other weight.
    fresh = VitBert(tiny_config(itc_dim=16, vocab_size=len(tokenizer))).eval()
    report = io.initialize(fresh, str(exported), tokenizer)
    assert "itc 5" in report and "left as initialised" not in report
    torch.testing.assert_close(fresh.embed_images(images), expected[1])


def test_init_from_a_model_without_contrastive_heads_names_them(tmp_path, tiny_config):
    tokenizer = train_wordpiece(CAPTIONS * 4, vocab_size=60, min_frequency=1)
    without = VitBert(tiny_config(vocab_size=len(tokenizer)))
    write_exported(without, tmp_path / "without")
    with_itc = VitBert(tiny_config(itc_dim=8, vocab_size=len(tokenizer)))
    report = io.transfer_weights(with_itc, io.read_checkpoint(tmp_path / "without"))
    assert "itc.image_proj.weight" in report.missing  # left as initialised, and said so
    write_exported(with_itc, tmp_path / "with")
    report = io.transfer_weights(without, io.read_checkpoint(tmp_path / "with"))
    assert any("itc_dim is 0" in entry for entry in report.skipped)
