"""The model's configuration: plain dataclasses of plain values.

They are saved inside checkpoints (``dataclasses.asdict``) and must load back with
``torch.load(weights_only=True)``, so they hold only numbers, strings, tuples and nested dicts,
never modules or tensors. LightningCLI reads them from YAML through their type hints.

:data:`PRESETS` names the configurations the project talks about: ``default`` (the embedded
CPU-minutes data set) and the Flickr30k models (the reference pretrained ViT-B/16 → one image token
→ 6-block BERT, its R50 hybrid twin, and the one-token-per-patch variant).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal


@dataclass
class ImageTowerConfig:
    """The ViT: which patch embedding, how wide and deep, how to pool, which pixels it expects."""

    kind: Literal["vit", "hybrid", "conv_stem"] = "conv_stem"
    image_size: int = 32
    patch_size: int = 4  # ViT patch; for hybrid the patch over the feature map (1 = cells)
    in_chans: int = 3
    dim: int = 128
    depth: int = 2
    num_heads: int = 4
    mlp_ratio: float = 4.0
    class_token: bool = False
    pool: Literal["mean", "cls"] = "mean"
    hybrid_layers: tuple[int, ...] = (3, 4, 9)  # ResNetV2 stage depths; () = stem only
    stem_hidden_dim: int = 32
    drop_path: float = 0.0
    norm_eps: float = 1e-6
    mean: tuple[float, float, float] = (0.5, 0.5, 0.5)  # pixel normalisation belongs to the weights
    std: tuple[float, float, float] = (0.5, 0.5, 0.5)
    pretrained: str | None = None  # timm model name (downloads when online) or a local file

    def __post_init__(self) -> None:
        # YAML and JSON give lists; keep the declared tuples so configs compare equal.
        self.hybrid_layers = tuple(self.hybrid_layers)
        self.mean = tuple(self.mean)
        self.std = tuple(self.std)
        if self.pool == "cls" and not self.class_token:
            raise ValueError("pool='cls' needs class_token=True")


@dataclass
class TextTowerConfig:
    """The BERT: width, depth, longest caption in word pieces, regularisation."""

    dim: int = 128
    depth: int = 2
    num_heads: int = 4
    mlp_ratio: float = 4.0
    max_len: int = 64
    dropout: float = 0.0
    drop_path: float = 0.0
    norm_eps: float = 1e-6


@dataclass
class VitBertConfig:
    """Both towers, the vocabulary, and how the image reaches the text (1 pooled or all patches)."""

    image: ImageTowerConfig = field(default_factory=ImageTowerConfig)
    text: TextTowerConfig = field(default_factory=TextTowerConfig)
    vocab_size: int = 8000
    pad_token_id: int = 0
    image_tokens: Literal["pooled", "patches"] = "pooled"
    projector_norm: bool = False

    def __post_init__(self) -> None:
        # Accept nested dicts (from_dict, jsonargparse) as well as the dataclasses themselves.
        if isinstance(self.image, dict):
            self.image = ImageTowerConfig(**self.image)
        if isinstance(self.text, dict):
            self.text = TextTowerConfig(**self.text)

    def to_dict(self) -> dict[str, Any]:
        """Plain nested dict (tuples stay tuples; ``json`` writes them as lists)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> VitBertConfig:
        """Inverse of :meth:`to_dict`; lists where tuples are expected are fine."""
        d = dict(d)
        image = ImageTowerConfig(**d.pop("image", {}))
        text = TextTowerConfig(**d.pop("text", {}))
        return cls(image=image, text=text, **d)


def _flickr30k() -> VitBertConfig:
    """The reference: pretrained ViT-B/16 at 224² → one pooled image token → 6-block BERT-base."""
    return VitBertConfig(
        image=ImageTowerConfig(
            kind="vit", image_size=224, patch_size=16, dim=768, depth=12, num_heads=12,
            class_token=True, pool="cls",
            pretrained="vit_base_patch16_224.augreg2_in21k_ft_in1k",
        ),
        text=TextTowerConfig(dim=768, depth=6, num_heads=12, max_len=64, dropout=0.1),
        vocab_size=8000,
    )


def _flickr30k_hybrid() -> VitBertConfig:
    """The ViT paper's R50+ViT-B/16: a ResNetV2 (3, 4, 9) feature map, its 14×14 cells as tokens."""
    config = _flickr30k()
    config.image = dataclasses.replace(
        config.image, kind="hybrid", patch_size=1, hybrid_layers=(3, 4, 9),
        pretrained="vit_base_r50_s16_224.orig_in21k",
    )
    return config


def _flickr30k_patches() -> VitBertConfig:
    """The reference, but every one of the 196 patch tokens reaches the text (LayerNorm'd)."""
    config = _flickr30k()
    config.image_tokens = "patches"
    config.projector_norm = True
    return config


PRESETS = {
    "default": VitBertConfig,
    "flickr30k": _flickr30k,
    "flickr30k_hybrid": _flickr30k_hybrid,
    "flickr30k_patches": _flickr30k_patches,
}


def preset(name: str) -> VitBertConfig:
    """A fresh copy of a named configuration (see :data:`PRESETS`)."""
    if name not in PRESETS:
        raise KeyError(f"unknown preset {name!r}; choose one of {sorted(PRESETS)}")
    return PRESETS[name]()
