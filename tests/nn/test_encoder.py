"""Encoder-level invariants: padding changes nothing, gradients reach everything, seeds repeat."""

import pytest
import torch

from vitbert.nn import AttentionContext, BlockConfig, Encoder, key_padding_mask


def make_encoder(depth=2, **kwargs):
    return Encoder(BlockConfig(**(dict(dim=32, num_heads=4) | kwargs)), depth).eval()


@pytest.mark.parametrize("mlp", ["gelu", "relu", "swiglu"])
def test_padding_does_not_change_real_positions(mlp):
    encoder = make_encoder(mlp=mlp)
    x = torch.randn(1, 5, 32)
    alone = encoder(x)
    padded = torch.cat([x, torch.randn(1, 3, 32) * 10], dim=1)  # random junk after the end
    real = torch.tensor([[True] * 5 + [False] * 3])
    out = encoder(padded, AttentionContext(key_padding_mask(real)))
    torch.testing.assert_close(out[:, :5], alone, atol=1e-5, rtol=1e-5)


def test_every_parameter_gets_a_gradient():
    encoder = make_encoder(mlp="swiglu").train()
    x = torch.randn(2, 6, 32)
    encoder(x).square().mean().backward()
    for name, p in encoder.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_same_seed_same_outputs():
    outs = []
    for _ in range(2):
        torch.manual_seed(123)
        encoder = make_encoder(drop=0.1, drop_path=0.2).train()
        outs.append(encoder(torch.randn(2, 6, 32)))
    torch.testing.assert_close(outs[0], outs[1], atol=0, rtol=0)


def test_drop_path_only_in_training():
    encoder = make_encoder(drop_path=0.5)
    x = torch.randn(4, 6, 32)
    encoder.eval()
    torch.testing.assert_close(encoder(x), encoder(x))
    encoder.train()
    torch.manual_seed(0)
    a = encoder(x)
    torch.manual_seed(1)
    b = encoder(x)
    assert not torch.allclose(a, b)


def test_pre_norm_has_final_norm_post_norm_does_not():
    pre, post = make_encoder(), make_encoder(norm_first=False)
    assert isinstance(pre.norm, torch.nn.LayerNorm)
    assert isinstance(post.norm, torch.nn.Identity)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_padded_batch_is_finite(dtype):
    encoder = make_encoder()
    x = torch.randn(3, 6, 32)
    real = torch.arange(6)[None] < torch.tensor([6, 2, 0])[:, None]  # last row fully padded
    if dtype == torch.bfloat16:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = encoder(x, AttentionContext(key_padding_mask(real)))
    else:
        out = encoder.to(dtype)(x.to(dtype), AttentionContext(key_padding_mask(real)))
        assert out.dtype == dtype
    assert torch.isfinite(out).all()
    assert (out[0] != 0).any()  # a real row carries signal (finite is not enough: zeros are too)


def test_return_attention_gives_one_map_per_block():
    encoder = make_encoder(depth=3)
    x = torch.randn(2, 5, 32)
    out, maps = encoder(x, return_attention=True)
    assert len(maps) == 3 and maps[0].shape == (2, 4, 5, 5)
    torch.testing.assert_close(out, encoder(x), atol=1e-5, rtol=1e-5)


def test_drop_path_rises_linearly_from_zero_to_the_configured_rate():
    encoder = make_encoder(depth=3, drop_path=0.2)
    first, *rest = encoder.blocks
    assert isinstance(first.drop_path, torch.nn.Identity)  # rate 0: no module at all
    assert [b.drop_path.drop_prob for b in rest] == pytest.approx([0.1, 0.2])


def test_state_dict_keeps_timm_names():
    """Checkpoints and timm ViT weights map on by these names; a rename breaks both."""
    keys = set(make_encoder(depth=1).state_dict())
    layers = ("norm1", "attn.qkv", "attn.proj", "norm2", "mlp.fc1", "mlp.fc2")
    expected = {f"blocks.0.{layer}.{p}" for layer in layers for p in ("weight", "bias")}
    assert keys == expected | {"norm.weight", "norm.bias"}
