"""The frozen-tower feature cache: the cached tokens are the tower's output, the text side's loss
and gradients match running the frozen tower, a new tower (or new photos) means a new cache, and
a whole fit with ``freeze_image: {part: tower}`` trains on features and never moves the tower.

The files are the data layer's (`vitbert.data.features`); what goes into them, and when, is the
training side's (`vitbert.lit.frozen`)."""

from __future__ import annotations

import lightning as L
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from vitbert.data.datamodule import CaptionDataModule
from vitbert.data.features import BACKBONE_KEY, FEATURES_KEY
from vitbert.lit.frozen import ImageFreeze, build_image_features, compute_dtype, feature_key
from vitbert.lit.module import MaskedLMModule
from vitbert.models import VitBert, VitBertConfig
from vitbert.shapes import ShapesSource

IMAGE_SIZE = 16


def tiny_config(vocab_size: int, image_tokens: str = "patches") -> VitBertConfig:
    return VitBertConfig.from_dict({
        "image": {"kind": "conv_stem", "image_size": IMAGE_SIZE, "patch_size": 4, "dim": 16,
                  "depth": 2, "num_heads": 2, "stem_hidden_dim": 8, "drop_path": 0.5},
        "text": {"dim": 24, "depth": 1, "num_heads": 2, "max_len": 32},
        "vocab_size": vocab_size, "image_tokens": image_tokens})


@pytest.fixture
def datamodule(tmp_path):
    source = ShapesSource(root=str(tmp_path / "shapes"), num_train=96, num_val=32, num_test=32)
    dm = CaptionDataModule(source=source, batch_size=16, num_workers=0, image_size=IMAGE_SIZE,
                           max_length=32, persistent_workers=False)
    dm.prepare_data()
    dm.setup("fit")
    return dm


def _model(dm, image_tokens="patches", seed=0) -> VitBert:
    torch.manual_seed(seed)
    model = VitBert(tiny_config(dm.num_tokens, image_tokens))
    model.image_tower.requires_grad_(False)
    return model


@pytest.mark.parametrize("image_tokens", ["patches", "pooled"])
def test_cached_rows_are_the_towers_output(datamodule, image_tokens):
    model = _model(datamodule, image_tokens)
    features = build_image_features(model, datamodule.cache_dir, batch_size=40, progress=False)
    cached = features.array()
    assert model.image_tower.training  # the build restores the mode it found
    pixels = torch.from_numpy(np.load(datamodule.cache_dir / "images.npy"))
    model.image_tower.eval()
    dtype = compute_dtype(torch.device("cpu"))  # bf16 where the CPU has it, as the build ran
    with torch.no_grad(), torch.autocast("cpu", dtype, enabled=dtype != torch.float32):
        expected = model.image_features(pixels).float()  # (R, N, D_img)
    assert cached.dtype == np.float16 and cached.shape == tuple(expected.shape)
    assert cached.shape[1] == (1 if image_tokens == "pooled" else (IMAGE_SIZE // 4) ** 2)
    torch.testing.assert_close(torch.from_numpy(np.array(cached)).float(), expected,
                               rtol=1e-3, atol=1e-3)


def test_text_side_loss_and_gradients_match_the_frozen_tower(datamodule):
    model = _model(datamodule)
    model.image_tower.eval()  # a frozen tower is a fixed function: no stochastic depth
    features = build_image_features(model, datamodule.cache_dir, progress=False)
    pixel_batch = next(iter(datamodule.train_dataloader()))
    datamodule.use_image_features(features)
    torch.manual_seed(0)  # the same shuffle, so the same examples and masks
    feature_batch = next(iter(datamodule.train_dataloader()))
    datamodule.use_image_features(None)
    assert "images" not in feature_batch and FEATURES_KEY in feature_batch
    torch.manual_seed(0)
    pixel_batch = next(iter(datamodule.train_dataloader()))
    assert torch.equal(pixel_batch["index"], feature_batch["index"])
    assert torch.equal(pixel_batch["input_ids"], feature_batch["input_ids"])

    def loss_and_grads(features: torch.Tensor, index: torch.Tensor):
        model.zero_grad(set_to_none=True)
        b = pixel_batch
        targets_at = b["labels"] != -100
        logits = model(b["input_ids"], b["attention_mask"], features, index,
                       target_mask=targets_at)
        loss = F.cross_entropy(logits, b["labels"][targets_at])
        loss.backward()
        return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()
                               if p.grad is not None}

    index = pixel_batch["image_index"]  # (B,): each photo is stacked once
    assert torch.equal(feature_batch["image_index"], index)
    loss_pixels, grads_pixels = loss_and_grads(model.image_features(pixel_batch["images"]), index)
    # Cached features (fp16) are the tower's output as it is: wrapped, not run again.
    loss_cached, grads_cached = loss_and_grads(feature_batch[FEATURES_KEY], index)
    assert not any(n.startswith("image_tower") for n in grads_pixels)
    assert grads_pixels.keys() == grads_cached.keys()
    assert any(n.startswith("projector") for n in grads_cached)
    torch.testing.assert_close(loss_cached, loss_pixels, rtol=1e-3, atol=1e-4)
    for name, g in grads_pixels.items():
        torch.testing.assert_close(grads_cached[name], g, rtol=2e-2, atol=1e-4, msg=name)
    # The other photo's features give another answer: the features are per photo.
    other = model(pixel_batch["input_ids"], pixel_batch["attention_mask"],
                  feature_batch[FEATURES_KEY].roll(1, 0), index)
    same = model(pixel_batch["input_ids"], pixel_batch["attention_mask"],
                 feature_batch[FEATURES_KEY], index)
    assert not torch.allclose(other, same)


def test_new_tower_weights_or_settings_mean_a_new_cache(datamodule):
    model = _model(datamodule)
    first = build_image_features(model, datamodule.cache_dir, progress=False)
    stamp = first.path.stat().st_mtime_ns
    first_rows = np.array(first.array())
    again = build_image_features(model, datamodule.cache_dir, progress=False)
    assert again.key == first.key and again.path.stat().st_mtime_ns == stamp  # reused
    with torch.no_grad():
        model.image_tower.encoder.blocks[0].mlp.fc1.weight[0, 0] += 1e-3
    changed = build_image_features(model, datamodule.cache_dir, progress=False)
    assert changed.key != first.key
    assert first.path.exists()  # kept: another run may be reading it
    assert not np.array_equal(np.array(changed.array()), first_rows)  # rebuilt, not renamed
    pooled = _model(datamodule, "pooled")
    pooled.load_state_dict(model.state_dict())
    assert feature_key(datamodule.cache_dir, pooled)[0] != changed.key  # settings count too
    files = sorted(p.name for p in datamodule.cache_dir.glob("features-*"))
    assert files == sorted(p.name for c in (first, changed)
                           for p in (c.path, c.path.with_suffix(".json")))


class BatchKeys(L.Callback):
    """Records the keys of every training and validation batch, and the training loader the
    trainer holds at fit start (before the cache is attached) and at each training batch."""

    def __init__(self) -> None:
        self.seen: list[set[str]] = []
        self.loader_at_start = None
        self.loaders: list = []

    def on_fit_start(self, trainer, pl_module):
        self.loader_at_start = trainer.train_dataloader

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.seen.append(set(batch))
        self.loaders.append(trainer.train_dataloader)

    def on_validation_batch_start(self, trainer, pl_module, batch, batch_idx, dl_idx=0):
        self.seen.append(set(batch))


# A run bounded by steps alone counts them without a loader; one bounded by epochs has Lightning
# build the training loader before the fit starts (for the schedule's length), before the cache
# exists, and keep it: that loader must serve the cache (a fit once trained on pixels so).
# "workers": the same with a worker process, which takes its copy of the data at the first batch.
RUN_LENGTHS = {"steps": {"max_steps": 3}, "epochs": {"max_epochs": 1, "limit_train_batches": 3},
               "workers": {"max_epochs": 1, "limit_train_batches": 3}}


@pytest.mark.parametrize("length", RUN_LENGTHS)
def test_fit_with_a_frozen_tower_trains_on_cached_features(datamodule, tmp_path, length):
    if length == "workers":
        datamodule.num_workers = 1
    config = tiny_config(datamodule.num_tokens)
    module = MaskedLMModule(net=config, vocab_size=datamodule.num_tokens,
                            freeze_image=ImageFreeze("tower"))
    tower_before = {k: v.clone() for k, v in module.net.image_tower.state_dict().items()}
    spy = BatchKeys()
    trainer = L.Trainer(**RUN_LENGTHS[length], val_check_interval=3, limit_val_batches=1,
                        num_sanity_val_steps=1, accelerator="cpu", logger=False,
                        enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False,
                        default_root_dir=tmp_path, callbacks=[spy])
    trainer.fit(module, datamodule=datamodule)
    seen = spy.seen
    assert seen and all(FEATURES_KEY in keys and "images" not in keys for keys in seen)
    assert len(list(datamodule.cache_dir.glob("features-*.npy"))) == 1
    for k, v in module.net.image_tower.state_dict().items():
        assert torch.equal(v, tower_before[k]), k
    # Validation ran all three conditions, the another-photo one on other photos' features.
    assert len(seen) == 3 + 2 and any("mismatch" in k for k in trainer.callback_metrics)
    if length != "steps":  # the loader built before the cache existed is the one that served it
        assert spy.loader_at_start is not None
        assert all(loader is spy.loader_at_start for loader in spy.loaders)


@pytest.mark.parametrize("pool", [True, False], ids=["pooled", "map"])
def test_fit_with_a_frozen_cnn_trains_the_rest_of_the_tower_on_its_cached_output(
        datamodule, tmp_path, pool):
    """``freeze_image: {part: backbone}``: the hybrid tower's timm CNN is cached once (its map,
    or its mean), training reads the cache, the CNN never moves and stays in eval mode, every part
    after it trains; the loss is the one the tower would give run whole from the pixels."""
    config = VitBertConfig.from_dict({
        "image": {"kind": "hybrid", "backbone": "resnet10t", "backbone_grid": 1 if pool else None,
                  "image_size": 64, "patch_size": 1, "dim": 16, "depth": 1, "num_heads": 2},
        "text": {"dim": 24, "depth": 1, "num_heads": 2, "max_len": 32},
        "vocab_size": datamodule.num_tokens, "image_tokens": "patches"})
    datamodule.image_size = 64
    datamodule.train_transform = None  # the loss comparison below reads the pictures as they are
    module = MaskedLMModule(net=config, vocab_size=datamodule.num_tokens,
                            freeze_image=ImageFreeze("backbone"))
    tower = module.net.image_tower
    backbone_before = {k: v.clone() for k, v in tower.patch_embed.backbone.state_dict().items()}
    rest_before = {k: v.clone() for k, v in tower.state_dict().items()
                   if not k.startswith("patch_embed.backbone.")}
    spy = BatchKeys()
    trainer = L.Trainer(**RUN_LENGTHS["epochs"], limit_val_batches=1, num_sanity_val_steps=0,
                        accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False,
                        default_root_dir=tmp_path, callbacks=[spy])
    trainer.fit(module, datamodule=datamodule)
    assert spy.seen and all(BACKBONE_KEY in keys and "images" not in keys for keys in spy.seen)
    cached = np.load(next(datamodule.cache_dir.glob("features-*.npy")), mmap_mode="r")
    assert cached.shape[1:] == ((512, 1, 1) if pool else (512, 2, 2))  # resnet10t: stride 32
    assert not tower.patch_embed.backbone.training
    for k, v in tower.patch_embed.backbone.state_dict().items():
        assert torch.equal(v, backbone_before[k]), k  # running statistics included
    assert any(not torch.equal(v, rest_before[k]) for k, v in tower.state_dict().items()
               if k in rest_before)

    # The cache holds what the CNN gives each picture (stored in fp16, computed in bf16 where
    # the CPU has it), and the tower from it is the tower run whole from the pixels.
    datamodule.use_image_features(None)
    batch = next(iter(datamodule.val_dataloader()))  # pixels, one per distinct photo
    module.eval()
    with torch.no_grad():
        features = tower.patch_embed.features(tower.normalize(batch["images"]))  # (P, C, h, w)
        rows = batch["image_id"][torch.unique(batch["image_index"], return_inverse=False)]
        stored = torch.from_numpy(np.array(cached[rows.numpy()])).float()
        similarity = F.cosine_similarity(stored.flatten(1), features.flatten(1), dim=1)
        assert similarity.min() > 0.999
        torch.testing.assert_close(module.net.image_features_from_backbone(features),
                                   module.net.image_features(batch["images"]))


def test_a_frozen_cnns_cache_is_keyed_by_what_its_output_depends_on(datamodule):
    """The CNN's output does not depend on the tower's parts after it (width, blocks): changing
    them reads the same cache; changing the CNN's pooling, or its weights, builds a new one."""
    def hybrid(**image) -> VitBert:
        torch.manual_seed(0)
        return VitBert(VitBertConfig.from_dict({
            "image": {"kind": "hybrid", "backbone": "resnet10t", "image_size": 32,
                      "patch_size": 1, "dim": 16, "depth": 1, "num_heads": 2, **image},
            "text": {"dim": 24, "depth": 1, "num_heads": 2, "max_len": 32},
            "vocab_size": datamodule.num_tokens}))

    key = feature_key(datamodule.cache_dir, hybrid(), "backbone")[0]
    assert feature_key(datamodule.cache_dir, hybrid(dim=32, depth=2), "backbone")[0] == key
    assert feature_key(datamodule.cache_dir, hybrid(backbone_grid=1), "backbone")[0] != key
    other = hybrid()
    with torch.no_grad():
        other.image_tower.patch_embed.backbone.conv1[0].weight.add_(1.0)
    assert feature_key(datamodule.cache_dir, other, "backbone")[0] != key
    assert feature_key(datamodule.cache_dir, hybrid(), "tower")[0] != key  # another part
