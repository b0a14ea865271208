"""Ways to turn an image into a sequence of tokens: (B, 3, H, W) → (B, N, D).

Every variant exposes ``grid_size`` (rows, cols of the token grid, N = rows × cols), so position
schemes (learned tables, 2D RoPE, offset bias) can be built for it. The ViT takes one of these
as its ``patch_embed``: the hybrid ViT is the same ViT with a different module injected."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn


def _pair(size: int | tuple[int, int]) -> tuple[int, int]:
    return (size, size) if isinstance(size, int) else tuple(size)


def _grid(img_size: int | tuple[int, int], patch_size: int) -> tuple[int, int]:
    """(rows, cols) of P×P patches; the image must tile exactly."""
    rows, cols = _pair(img_size)
    if rows % patch_size or cols % patch_size:
        raise ValueError(f"image size {(rows, cols)} is not a multiple of patch size {patch_size}")
    return rows // patch_size, cols // patch_size


class PatchEmbed(nn.Module):
    """Cut the image into P×P patches with one shared projection: a conv, kernel = stride = P.

    224² at P = 16 gives a 14 × 14 grid: 196 tokens. timm's name ``proj`` keeps weights mappable.
    """

    def __init__(
        self, img_size: int | tuple[int, int] = 224, patch_size: int = 16, in_chans: int = 3,
        embed_dim: int = 768,
    ) -> None:
        super().__init__()
        self.patch_size = patch_size
        self.grid_size = _grid(img_size, patch_size)
        self.proj = nn.Conv2d(in_chans, embed_dim, kernel_size=patch_size, stride=patch_size)

    def forward(self, x: Tensor) -> Tensor:
        x = self.proj(x)  # (B, D, rows, cols)
        return x.flatten(2).transpose(1, 2)  # (B, N, D)


class ConvStem(nn.Module):
    """Two 3×3 convs, then a P×P patch conv: a little local feature extraction before the tokens.

    For small images (the 40×40 experiments, the 32×32 embedded default), where a bare linear
    patch projection has too little to work with.
    """

    def __init__(
        self, img_size: int | tuple[int, int] = 40, patch_size: int = 4, in_chans: int = 3,
        embed_dim: int = 64, hidden_dim: int = 32,
    ) -> None:
        super().__init__()
        self.patch_size = patch_size
        self.grid_size = _grid(img_size, patch_size)
        self.stem = nn.Sequential(
            nn.Conv2d(in_chans, hidden_dim, 3, padding=1, bias=False),
            nn.BatchNorm2d(hidden_dim),
            nn.ReLU(inplace=True),
            nn.Conv2d(hidden_dim, hidden_dim, 3, padding=1, bias=False),
            nn.BatchNorm2d(hidden_dim),
            nn.ReLU(inplace=True),
        )
        self.proj = nn.Conv2d(hidden_dim, embed_dim, kernel_size=patch_size, stride=patch_size)

    def forward(self, x: Tensor) -> Tensor:
        x = self.proj(self.stem(x))  # (B, D, rows, cols)
        return x.flatten(2).transpose(1, 2)  # (B, N, D)


class HybridEmbed(nn.Module):
    """A CNN's last feature map as the tokens: the ViT paper's hybrid (R50+ViT-B/16), generalised.

    The ``backbone`` is any CNN that maps pixels to a feature map of ``feature_dim`` channels at
    ``1 / reduction`` of the input's side: timm's ResNetV2 built exactly as timm's hybrid ViTs
    build it (:func:`resnetv2_backbone`, so pretrained hybrid weights load unchanged) or any timm
    CNN (:func:`timm_backbone`: EfficientNet, ResNet, …, its ``forward_features``). A P×P conv
    ``proj`` (P = 1: one token per cell) maps the feature map to the ViT width; with ``grid`` the
    map is first averaged to ``grid`` × ``grid`` cells (1: one token for the whole photo, the
    course's pooled image token). :meth:`features` and :meth:`embed` split the two steps, so a
    frozen backbone's output can be computed once per photo and cached (`vitbert.data.features`).
    """

    def __init__(self, backbone: nn.Module, feature_dim: int, reduction: int,
                 img_size: int | tuple[int, int] = 224, patch_size: int = 1,
                 embed_dim: int = 768, grid: int | None = None) -> None:
        super().__init__()
        self.backbone = backbone
        img_size = _pair(img_size)
        step = reduction * patch_size
        if img_size[0] % step or img_size[1] % step:
            raise ValueError(
                f"image size {img_size} is not a multiple of {step} "
                f"(backbone reduction {reduction} × patch {patch_size})"
            )
        if grid and patch_size != 1:
            raise ValueError(f"an averaged feature map is a token per cell: patch_size must be 1, "
                             f"not {patch_size}")
        self.grid = grid
        # Pixels per token: a grid cell's share of the photo when averaged.
        self.patch_size = patch_size
        self.reduction = img_size[0] // grid if grid else reduction
        self.grid_size = (grid, grid) if grid else (img_size[0] // step, img_size[1] // step)
        self.proj = nn.Conv2d(feature_dim, embed_dim, kernel_size=patch_size, stride=patch_size)

    def forward(self, x: Tensor) -> Tensor:
        return self.embed(self.features(x))  # (B, N, D)

    def features(self, x: Tensor) -> Tensor:
        """Pixels (B, 3, H, W) → the backbone's feature map (B, C, H/r, W/r), or it averaged to
        (B, C, grid, grid): what a frozen backbone's cache holds."""
        x = self.backbone(x)
        return F.adaptive_avg_pool2d(x, self.grid) if self.grid else x

    def embed(self, features: Tensor) -> Tensor:
        """The feature map (B, C, h, w) → tokens (B, N, D), N = h·w / P²."""
        x = self.proj(features)  # (B, D, rows, cols)
        return x.flatten(2).transpose(1, 2)  # (B, N, D)


def timm_backbone(name: str, in_chans: int = 3) -> tuple[nn.Module, int, int]:
    """Any timm CNN by name, built without weights (a run loads them when it starts,
    ``image.pretrained``), its classifier and pooling removed: calling it gives its last feature
    map. Returns (backbone, output channels, total stride)."""
    import timm

    backbone = timm.create_model(name, pretrained=False, num_classes=0, global_pool="",
                                 in_chans=in_chans)
    return backbone, backbone.num_features, backbone.feature_info[-1]["reduction"]


def resnetv2_backbone(layers: tuple[int, ...], in_chans: int = 3) -> tuple[nn.Module, int, int]:
    """timm's ResNetV2 as ``timm.models.vision_transformer_hybrid._resnetv2`` makes it.

    Returns (backbone, output channels, total stride). Built from timm's public constructors;
    the equivalence test against timm's own hybrid ViT keeps the two in step.
    """
    from functools import partial

    from timm.layers import StdConv2dSame
    from timm.models.resnetv2 import ResNetV2, create_resnetv2_stem

    conv_layer = partial(StdConv2dSame, eps=1e-8)
    if layers:
        backbone = ResNetV2(
            layers=layers, num_classes=0, global_pool="", in_chans=in_chans, preact=False,
            stem_type="same", conv_layer=conv_layer,
        )
        info = backbone.feature_info[-1]
        return backbone, info["num_chs"], info["reduction"]
    stem = create_resnetv2_stem(in_chans, stem_type="same", preact=False, conv_layer=conv_layer)
    return stem, 64, 4  # stem_chs=64; 7×7 conv stride 2, then 3×3 max pool stride 2
