"""The image tower against timm: same features from the same weights, and full key coverage."""

import pytest
import torch

from vitbert.io import CheckpointError, TransferReport, load_image_weights
from vitbert.models import ImageTowerConfig, build_image_tower

timm = pytest.importorskip("timm")


def _tower(**kw):
    """A tower attending globally, as timm's ViTs do, unless ``attention_radius`` is given."""
    return build_image_tower(ImageTowerConfig(**{"attention_radius": None, **kw})).eval()


def _assert_same_features(ours, theirs, image_size, atol=1e-5):
    x = torch.randn(2, 3, image_size, image_size)
    with torch.no_grad():
        expected = theirs.forward_features(x)  # (B, 1 + N, D), after the final norm
        pooled, tokens = ours(x)
    torch.testing.assert_close(tokens, expected[:, 1:], atol=atol, rtol=1e-5)
    torch.testing.assert_close(pooled, expected[:, 0], atol=atol, rtol=1e-5)


def _timm(name, **kw):
    return timm.create_model(name, pretrained=False, **kw).eval()


def test_vit_tiny_matches_timm():
    theirs = _timm("vit_tiny_patch16_224", img_size=64, depth=3)
    ours = _tower(kind="vit", image_size=64, patch_size=16, dim=192, depth=3, num_heads=3,
                  class_token=True, pool="cls")
    report = load_image_weights(ours, theirs.state_dict())
    assert report.missing == []
    assert {k.split(".")[0] for k in report.skipped} == {"head"}
    _assert_same_features(ours, theirs, 64)


def test_hybrid_stem_only_matches_timm():
    """vit_tiny_r_s16_p8: the ResNetV2 stem alone, then 8×8 patches over its feature map."""
    theirs = _timm("vit_tiny_r_s16_p8_224", img_size=64, depth=2)
    ours = _tower(kind="hybrid", image_size=64, patch_size=8, hybrid_layers=(), dim=192,
                  depth=2, num_heads=3, class_token=True, pool="cls")
    assert ours.grid_size == tuple(theirs.patch_embed.grid_size)
    report = load_image_weights(ours, theirs.state_dict())
    assert report.missing == []
    _assert_same_features(ours, theirs, 64)


def test_hybrid_r50_stages_match_timm():
    """R50 stages (3, 4, 9) at a narrow width and 64 px: the stage keys and strides line up."""
    theirs = _timm("vit_base_r50_s16_224", img_size=64, depth=1, embed_dim=64, num_heads=2)
    ours = _tower(kind="hybrid", image_size=64, patch_size=1, hybrid_layers=(3, 4, 9), dim=64,
                  depth=1, num_heads=2, class_token=True, pool="cls")
    assert ours.grid_size == (4, 4)
    report = load_image_weights(ours, theirs.state_dict())
    assert report.missing == []
    _assert_same_features(ours, theirs, 64, atol=1e-4)


@pytest.mark.parametrize(
    ("name", "image"),
    [
        ("vit_base_patch16_224", dict(kind="vit", patch_size=16)),
        ("vit_base_r50_s16_224", dict(kind="hybrid", patch_size=1, hybrid_layers=(3, 4, 9))),
    ],
)
def test_base_size_mapping_covers_every_tensor(name, image):
    """Full-size models on the meta device: no memory, no compute, every key and shape checked."""
    with torch.device("meta"):
        theirs = timm.create_model(name, pretrained=False)
        ours = build_image_tower(
            ImageTowerConfig(image_size=224, dim=768, depth=12, num_heads=12, class_token=True,
                             pool="cls", **image)
        )
    report = load_image_weights(ours, theirs.state_dict())
    assert report.missing == []
    assert all(key.startswith("head.") for key in report.skipped)  # the classifier only
    assert len(report.copied) == len(ours.state_dict())


@pytest.fixture(scope="module")
def tiny_timm():
    return _timm("vit_tiny_patch16_224", img_size=32, depth=1)


def _tiny_tower(**kw):
    defaults = dict(kind="vit", image_size=32, patch_size=16, dim=192, depth=1, num_heads=3,
                    class_token=True, pool="cls")
    return _tower(**{**defaults, **kw})


def test_load_from_safetensors_file(tmp_path, tiny_timm):
    from safetensors.torch import save_file

    save_file({k: v.contiguous() for k, v in tiny_timm.state_dict().items()},
              tmp_path / "vit.safetensors")
    ours = _tiny_tower()
    report = load_image_weights(ours, tmp_path / "vit.safetensors")
    assert report.missing == [] and "vit.safetensors" in str(report)
    _assert_same_features(ours, tiny_timm, 32)


def test_load_from_nested_pth_file(tmp_path, tiny_timm):
    state = {f"module.{k}": v for k, v in tiny_timm.state_dict().items()}
    torch.save({"epoch": 3, "state_dict": state}, tmp_path / "vit.pth")
    ours = _tiny_tower()
    report = load_image_weights(ours, str(tmp_path / "vit.pth"))
    assert report.missing == []
    _assert_same_features(ours, tiny_timm, 32)


def test_missing_file_is_an_error_not_a_download(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_image_weights(_tiny_tower(), tmp_path / "absent.safetensors")


def test_weight_file_whose_pickle_runs_code_is_refused(tmp_path):
    import os

    class Payload:
        def __reduce__(self):
            return os.mkdir, (str(tmp_path / "ran"),)

    torch.save({"pos_embed": torch.zeros(1, 5, 192), "x": Payload()}, tmp_path / "evil.pth")
    with pytest.raises(CheckpointError, match=r"evil\.pth: refused"):
        load_image_weights(_tiny_tower(), tmp_path / "evil.pth")
    assert not (tmp_path / "ran").exists()


def test_wrong_width_raises_before_writing(tiny_timm):
    ours = _tiny_tower(dim=96)
    before = ours.encoder.norm.weight.clone()
    with pytest.raises(ValueError, match="do not fit"):
        load_image_weights(ours, tiny_timm.state_dict())
    assert torch.equal(ours.encoder.norm.weight, before)


def test_pos_embed_resampled_on_load_and_class_token_dropped(tiny_timm):
    """A 2×2-grid checkpoint into a mean-pooled 4×4 tower: table resampled, cls row dropped."""
    ours = _tiny_tower(image_size=64, class_token=False, pool="mean")
    report = load_image_weights(ours, tiny_timm.state_dict())
    assert isinstance(report, TransferReport)
    assert "cls_token (not in this model)" in report.skipped
    assert "pos_embed.weight (resampled from 2×2 to 4×4)" in report.resized
    assert any("class-token position dropped" in note for note in report.notes)
    # Independent reference: the 2×2 grid (class row removed) interpolated bicubically.
    grid = tiny_timm.pos_embed[:, 1:].detach().reshape(1, 2, 2, 192).permute(0, 3, 1, 2)
    expected = torch.nn.functional.interpolate(grid, size=(4, 4), mode="bicubic",
                                               align_corners=False, antialias=True)
    torch.testing.assert_close(ours.pos_embed.weight, expected.permute(0, 2, 3, 1).reshape(1, 16,
                                                                                          192))


def test_on_the_fly_positions_are_smooth():
    """A table linear in (row, col) stays monotone when the tower reads a larger image."""
    tower = _tower(kind="vit", image_size=24, patch_size=8, dim=8, depth=1, num_heads=2)
    r, c = torch.meshgrid(torch.arange(3.0), torch.arange(3.0), indexing="ij")
    with torch.no_grad():
        tower.pos_embed.weight.copy_((r + 2 * c).reshape(1, 9, 1).expand(1, 9, 8))
    assert tower.positions((3, 3)) is tower.pos_embed.weight
    up = tower.positions((6, 6))[0, :, 0].reshape(6, 6)
    assert (up[:, 1:] >= up[:, :-1] - 1e-4).all() and (up[1:] >= up[:-1] - 1e-4).all()
    assert up[0, 0] < up[-1, -1]


def test_other_input_size_resamples_positions_on_the_fly():
    tower = _tower(kind="vit", image_size=32, patch_size=8, dim=32, depth=1, num_heads=2)
    pooled, tokens = tower(torch.randn(1, 3, 48, 48))
    assert tokens.shape == (1, 36, 32) and pooled.shape == (1, 32)
    with pytest.raises(ValueError, match="multiple of 8"):
        tower(torch.randn(1, 3, 44, 44))


@pytest.mark.parametrize("kind", ["vit", "conv_stem"])
def test_tower_shapes_and_normalize(kind):
    tower = _tower(kind=kind, image_size=32, patch_size=4, dim=32, depth=1, num_heads=2)
    assert tower.grid_size == (8, 8)
    images = torch.randint(0, 256, (2, 3, 32, 32), dtype=torch.uint8)
    x = tower.normalize(images)
    torch.testing.assert_close(x, tower.normalize(images.float() / 255))
    assert x.min() >= -1 and x.max() <= 1
    pooled, tokens = tower(x)
    assert pooled.shape == (2, 32) and tokens.shape == (2, 64, 32)
    torch.testing.assert_close(pooled, tokens.mean(dim=1))


def test_load_by_timm_name_goes_through_create_model(monkeypatch):
    """The online path, offline: timm.create_model(name, pretrained=True) is intercepted."""
    calls = []

    def fake_create_model(name, pretrained=False, **kw):
        calls.append((name, pretrained))
        return _timm_create(name, pretrained=False, img_size=32, depth=1)

    _timm_create = timm.create_model
    monkeypatch.setattr(timm, "create_model", fake_create_model)
    ours = _tiny_tower()
    ours.pixel_mean.fill_(0.45)  # as if the config said ImageNet statistics
    report = load_image_weights(ours, "vit_tiny_patch16_224.augreg_in21k")
    assert calls == [("vit_tiny_patch16_224.augreg_in21k", True)]
    assert report.missing == [] and report.source == "timm:vit_tiny_patch16_224.augreg_in21k"
    assert any("pixel mean" in note for note in report.notes)


@pytest.mark.parametrize("radius", [None, 2])
def test_loading_into_a_windowed_tower_says_the_weights_attend_globally(tiny_timm, radius):
    """The embedded default's window (attention_radius: 2) is not what timm's weights were
    trained with; a hand-built pretrained config that keeps it is told, not silently changed."""
    report = load_image_weights(_tiny_tower(attention_radius=radius), tiny_timm.state_dict())
    noted = [note for note in report.notes if "attention_radius" in note]
    assert len(noted) == (radius is not None)
    assert radius is None or "attention_radius=2" in noted[0]


@pytest.mark.parametrize("radius", [None, 1])
def test_local_attention_tower_is_blind_to_far_pixels(radius):
    """Two blocks of 3×3-window attention over a conv stem: a token's view reaches a few patches,
    not the far corner of an 8×8 grid; with global attention every token sees it."""
    tower = _tower(kind="conv_stem", image_size=32, patch_size=4, dim=32, depth=2, num_heads=2,
                   attention_radius=radius)
    images = torch.randn(1, 3, 32, 32)
    changed = images.clone()
    changed[..., 24:, 24:] += 1.0  # the bottom-right 2×2 patches
    with torch.no_grad():
        _, tokens = tower(images)
        _, tokens_changed = tower(changed)
    top_left = tokens[0, 0], tokens_changed[0, 0]
    assert torch.allclose(*top_left) == (radius is not None)
    assert not torch.allclose(tokens[0, 63], tokens_changed[0, 63])
