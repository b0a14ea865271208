"""Small shared builders for the shapes levers' model tests (as tests/models' own: a tiny
configuration that runs in milliseconds, and a batch for it)."""

import pytest
import torch

from vitbert.models import ImageTowerConfig, TextTowerConfig, VitBertConfig


def make_tiny_config(**overrides) -> VitBertConfig:
    """A 16×16-pixel, 2×2-patch, one-block-per-tower model with a 50-word vocabulary."""
    image = ImageTowerConfig(kind="vit", image_size=16, patch_size=8, dim=32, depth=1,
                             num_heads=2)
    text = TextTowerConfig(dim=24, depth=2, num_heads=2, max_len=12)
    config = VitBertConfig(image=image, text=text, vocab_size=50)
    for key, value in overrides.items():
        setattr(config, key, value)
    return config


@pytest.fixture
def batch():
    """Two captions (the second one padded) and two photos, with one [MASK]-like target each."""
    input_ids = torch.randint(5, 50, (2, 7))
    attention_mask = torch.ones(2, 7, dtype=torch.bool)
    attention_mask[1, 5:] = False
    input_ids[1, 5:] = 0
    images = torch.randint(0, 256, (2, 3, 16, 16), dtype=torch.uint8)
    target_mask = torch.zeros(2, 7, dtype=torch.bool)
    target_mask[0, 2] = target_mask[1, 3] = target_mask[0, 5] = True
    return input_ids, attention_mask, images, target_mask


@pytest.fixture
def tiny_config():
    """The builder itself, so tests can ask for variants: ``tiny_config(extension=...)``."""
    return make_tiny_config
