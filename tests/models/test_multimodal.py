"""The joint model: the tie, the photo's influence, sparse logits, save / load, precision."""

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from vitbert.io import load_network, write_exported
from vitbert.models import VitBert


def _tied(model: VitBert) -> bool:
    return model.mlm_head.decoder.weight is model.text.embeddings.word.weight


def test_tie_after_construction(model):
    assert _tied(model)
    names = [name for name, _ in model.named_parameters()]
    assert "mlm_head.decoder.weight" not in names  # counted once
    assert "mlm_head.decoder.bias" in names


def test_tie_after_load_state_dict(model):
    other = VitBert(model.config)
    other.load_state_dict(model.state_dict())
    assert _tied(other)
    torch.testing.assert_close(other.text.embeddings.word.weight, model.text.embeddings.word.weight)


def test_tie_after_assign_load_and_meta_construction(model):
    with torch.device("meta"):
        other = VitBert(model.config)
    other.load_state_dict(model.state_dict(), assign=True)  # replaces Parameters; hook re-ties
    assert _tied(other)
    other.mlm_head.decoder.weight = torch.nn.Parameter(other.mlm_head.decoder.weight.clone())
    assert not _tied(other)
    other.tie_weights()
    assert _tied(other)


def test_save_pretrained_round_trip(tmp_path, model, batch):
    input_ids, attention_mask, images, _ = batch
    write_exported(model, tmp_path)
    assert (tmp_path / "model.safetensors").is_file() and (tmp_path / "config.json").is_file()
    loaded = load_network(tmp_path).eval()
    assert _tied(loaded)
    assert loaded.config == model.config
    with torch.no_grad():
        torch.testing.assert_close(loaded(input_ids, attention_mask, loaded.image_features(images)),
                                   model(input_ids, attention_mask, model.image_features(images)),
                                   rtol=0, atol=0)


def test_from_pretrained_never_loads_timm_weights(tmp_path, tiny_config):
    config = tiny_config()
    config.image = dataclasses.replace(config.image, pretrained=str(tmp_path / "absent.pth"))
    write_exported(VitBert(config), tmp_path / "m")
    loaded = load_network(tmp_path / "m")  # would raise FileNotFoundError otherwise
    assert loaded.config.image.pretrained.endswith("absent.pth")


def test_the_photo_changes_the_logits_at_the_mask(model, batch):
    input_ids, attention_mask, images, target_mask = batch
    with torch.no_grad():
        a = model(input_ids, attention_mask, model.image_features(images), target_mask=target_mask)
        b = model(input_ids, attention_mask, model.image_features(images.flip(0)),
                  target_mask=target_mask)
    assert a.shape == (3, 50)
    assert (a - b).abs().max() > 1e-4


def test_no_image_equals_image_blocked(model, batch):
    input_ids, attention_mask, images, _ = batch
    blocked = torch.zeros(2, model.num_image_tokens, dtype=torch.bool)
    with torch.no_grad():
        without = model(input_ids, attention_mask)
        hidden = model(input_ids, attention_mask, model.image_features(images),
                       image_visible=blocked)
    torch.testing.assert_close(hidden, without, atol=1e-5, rtol=1e-5)


def test_sparse_logits_equal_full_logits_gathered(model, batch):
    input_ids, attention_mask, images, target_mask = batch
    with torch.no_grad():
        full = model(input_ids, attention_mask, model.image_features(images))
        sparse = model(input_ids, attention_mask, model.image_features(images),
                       target_mask=target_mask)
    assert full.shape == (2, 7, 50)
    torch.testing.assert_close(sparse, full[target_mask], atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize(("image_tokens", "n"), [("pooled", 1), ("patches", 4)])
def test_pooled_and_patch_image_tokens(image_tokens, n, batch, tiny_config):
    input_ids, attention_mask, images, _ = batch
    model = VitBert(tiny_config(image_tokens=image_tokens, projector_norm=True)).eval()
    assert model.num_image_tokens == n
    assert model.image_tokens(model.image_features(images)).shape == (2, n, 24)
    logits, attention = model(input_ids, attention_mask, model.image_features(images),
                              return_attention=True)
    assert logits.shape == (2, 7, 50)
    assert len(attention) == 2 and attention[0].shape == (2, 2, n + 7, n + 7)
    # Padded words are never attended to; blocked image tokens neither.
    visible = torch.ones(2, n, dtype=torch.bool)
    visible[0] = False
    _, attention = model(input_ids, attention_mask, model.image_features(images),
                         image_visible=visible,
                         return_attention=True)
    assert attention[0][1, :, :, n + 5:].abs().max() == 0
    assert attention[0][0, :, :, :n].abs().max() == 0


@pytest.mark.parametrize("image_tokens", ["pooled", "patches"])
@pytest.mark.parametrize("cached", [False, True], ids=["pixels", "features"])
def test_each_photo_once_gives_the_logits_and_gradients_of_one_copy_per_caption(
        image_tokens, cached, tiny_config):
    """Five captions over two photos (3 + 2, interleaved): the tower runs on the 2 photos and
    ``image_index`` hands them out, against the same batch with the photo repeated per caption."""
    torch.manual_seed(0)
    model = VitBert(tiny_config(image_tokens=image_tokens, projector_norm=True)).train()
    photos = torch.randint(0, 256, (2, 3, 16, 16), dtype=torch.uint8)  # (P, 3, S, S)
    image_index = torch.tensor([1, 0, 1, 0, 1])  # (B,)
    input_ids = torch.randint(5, 50, (5, 6))
    attention_mask = torch.ones(5, 6, dtype=torch.bool)
    attention_mask[3, 4:] = False
    target_mask = torch.zeros(5, 6, dtype=torch.bool)
    target_mask[:, 2] = target_mask[0, 4] = True
    targets = input_ids[target_mask]
    if cached:  # a frozen tower's output, as the feature cache stores it
        model.image_tower.requires_grad_(False)
        with torch.no_grad():
            photos = model.image_features(photos).half()  # (P, N, D_img)

    def logits_and_grads(photos, index=None):
        model.zero_grad(set_to_none=True)
        # Cached features are wrapped as they are; pixels go through the tower (once).
        features = photos if cached else model.image_features(photos)
        logits = model(input_ids, attention_mask, features, index, target_mask=target_mask)
        F.cross_entropy(logits, targets).backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        return logits.detach(), grads

    once, once_grads = logits_and_grads(photos, image_index)
    repeated, repeated_grads = logits_and_grads(photos[image_index])  # (B, ...) copies
    torch.testing.assert_close(once, repeated, rtol=1e-5, atol=1e-6)
    assert once_grads.keys() == repeated_grads.keys()
    assert any(n.startswith("image_tower") for n in once_grads) != cached
    for name, grad in repeated_grads.items():
        torch.testing.assert_close(once_grads[name], grad, rtol=1e-4, atol=1e-6, msg=name)
    # The index is honoured: handing the captions the other photo changes the answer.
    swapped, _ = logits_and_grads(photos, 1 - image_index)
    assert (swapped - once).abs().max() > 1e-4


def test_uint8_and_unit_float_pixels_agree(model, batch):
    _, _, images, _ = batch
    with torch.no_grad():
        torch.testing.assert_close(model.image_tokens(model.image_features(images)),
                                   model.image_tokens(model.image_features(images.float() / 255)))


def test_bf16_autocast_is_finite_and_trains(batch, model):
    input_ids, attention_mask, images, target_mask = batch
    model.train()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(input_ids, attention_mask, model.image_features(images),
                       target_mask=target_mask)
    assert torch.isfinite(logits).all()
    loss = torch.nn.functional.cross_entropy(logits.float(), input_ids[target_mask])
    loss.backward()
    word = model.text.embeddings.word.weight
    assert torch.isfinite(word.grad).all()
    assert (word.grad.abs().sum(dim=1) > 0).float().mean() > 0.9  # tied: almost every row learns
    assert model.image_tower.patch_embed.proj.weight.grad.abs().sum() > 0
    assert word.dtype == torch.float32  # the model never casts its own weights


def test_text_only_input_too_long_is_an_error(model):
    ids = torch.ones(1, 13, dtype=torch.long)
    with pytest.raises(ValueError, match="max_len"):
        model(ids, torch.ones_like(ids, dtype=torch.bool))


def test_pretrained_file_in_the_config_is_loaded_by_initialize_not_the_constructor(
        tmp_path, tiny_config):
    """config.image.pretrained = a local timm-layout file: a fresh run's start loads it."""
    from vitbert.io import initialize

    source = VitBert(tiny_config()).image_tower
    timm_layout = {
        k.removeprefix("encoder.").replace("pos_embed.weight", "pos_embed"): v
        for k, v in source.state_dict().items()
    }
    torch.save(timm_layout, tmp_path / "tower.pth")
    config = tiny_config()
    config.image = dataclasses.replace(config.image, pretrained=str(tmp_path / "tower.pth"))
    model = VitBert(config)
    key = "patch_embed.proj.weight"
    assert not torch.equal(model.image_tower.state_dict()[key], source.state_dict()[key])
    report = initialize(model)
    assert "tower.pth" in report
    for key, value in source.state_dict().items():
        assert torch.equal(model.image_tower.state_dict()[key], value), key


@pytest.mark.parametrize("rows", [0, 1, 63, 64, 65, 130])
def test_the_mlm_head_pads_the_masked_rows_to_few_shapes_and_gives_each_row_its_own_logits(rows):
    """A bf16 matmul on a CPU keeps buffers per shape: the vocabulary projection sees multiples
    of 64 rows whatever M is, and each of the M rows gets what it gets alone (the padding is
    sliced off, so a zero row cannot leak into a real one)."""
    from vitbert.models.bert import MLMHead

    torch.manual_seed(0)
    head = MLMHead(dim=16, vocab_size=50).eval()
    seen = []
    head.decoder.register_forward_hook(lambda module, args, out: seen.append(args[0].shape[0]))
    h = torch.randn(rows, 16)
    logits = head(h)
    assert logits.shape == (rows, 50)
    assert seen[-1] % 64 == 0 and seen[-1] - rows < 64
    alone = [head.decoder(head.norm(head.act(head.dense(row[None])))) for row in h]
    if rows:
        torch.testing.assert_close(logits, torch.cat(alone), rtol=1e-5, atol=1e-6)
    (B, T) = (2, 5)  # (B, T, D) is every word's row: left as it is
    assert head(torch.randn(B, T, 16)).shape == (B, T, 50) and seen[-1] == B
