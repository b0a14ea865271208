"""The ViT image tower: patch embedding → (class token) + learned positions → encoder → pool.

The patch embedding is injected (:func:`build_image_tower` picks it from the config): a conv
patchify (pure ViT), a ResNet front end (hybrid ViT: the same ViT, a different module), or the
small conv stem for tiny images. Names follow timm (``patch_embed``, ``cls_token``,
``pos_embed``), so pretrained timm weights map on by renaming (:mod:`vitbert.io.timm`)."""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor, nn

from vitbert.models.config import ImageTowerConfig
from vitbert.models.patch_embed import (
    ConvStem,
    HybridEmbed,
    PatchEmbed,
    resnetv2_backbone,
    timm_backbone,
)
from vitbert.nn import AttentionContext, BlockConfig, Encoder, LearnedPosition, local_mask
from vitbert.nn.attention import NO_CONTEXT

__all__ = ["ViT", "build_image_tower", "init_transformer_weights"]


def init_transformer_weights(module: nn.Module, std: float = 0.02) -> None:
    """BERT / timm initialisation: Linear and Embedding ~ N(0, 0.02) (truncated), biases 0."""
    for m in module.modules():
        if isinstance(m, nn.Linear):
            nn.init.trunc_normal_(m.weight, std=std)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.trunc_normal_(m.weight, std=std)


class ViT(nn.Module):
    """Image (B, 3, S, S), already normalised → (pooled (B, D), patch tokens (B, N, D)).

    ``pool="cls"`` returns the class token (attention pooling learned by the encoder);
    ``pool="mean"`` averages the patch tokens after the final LayerNorm. An input of another size
    than the one the tower was built for works: the position table is resampled (bicubic) to the
    new grid on the fly. :meth:`normalize` turns uint8 or [0, 1] pixels into the tower's input.
    """

    def __init__(
        self,
        patch_embed: nn.Module,
        dim: int,
        depth: int,
        num_heads: int,
        mlp_ratio: float = 4.0,
        class_token: bool = False,
        pool: Literal["mean", "cls"] = "mean",
        drop_path: float = 0.0,
        norm_eps: float = 1e-6,
        mean: tuple[float, ...] = (0.5, 0.5, 0.5),
        std: tuple[float, ...] = (0.5, 0.5, 0.5),
        attention_radius: int | None = None,
    ) -> None:
        super().__init__()
        if pool == "cls" and not class_token:
            raise ValueError("pool='cls' needs a class token")
        self.dim, self.pool, self.attention_radius = dim, pool, attention_radius
        self.patch_embed = patch_embed
        self.grid_size: tuple[int, int] = tuple(patch_embed.grid_size)
        # Pixels per token along each side: to find the grid of an input of another size.
        self.stride = getattr(patch_embed, "reduction", 1) * patch_embed.patch_size
        self.num_prefix_tokens = int(class_token)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim)) if class_token else None
        self.pos_embed = LearnedPosition(self.num_prefix_tokens + self.num_patches, dim)
        block = BlockConfig(dim, num_heads, mlp_ratio, drop_path=drop_path, norm_eps=norm_eps)
        self.encoder = Encoder(block, depth)
        # Pixel statistics belong to the weights; not saved (they come from the config).
        self.register_buffer("pixel_mean", torch.tensor(mean).view(1, -1, 1, 1), persistent=False)
        self.register_buffer("pixel_std", torch.tensor(std).view(1, -1, 1, 1), persistent=False)
        init_transformer_weights(self.encoder)
        if self.cls_token is not None:
            nn.init.normal_(self.cls_token, std=1e-6)

    @property
    def num_patches(self) -> int:
        return self.grid_size[0] * self.grid_size[1]

    def normalize(self, images: Tensor) -> Tensor:
        """uint8 [0, 255] or float [0, 1] pixels (B, 3, S, S) → (x − mean) / std."""
        if images.dtype == torch.uint8:
            images = images.float() / 255.0
        return (images - self.pixel_mean) / self.pixel_std

    def positions(self, grid: tuple[int, int]) -> Tensor:
        """(1, prefix + rows·cols, D): the learned table, resampled when ``grid`` is new.

        Positions are a smooth function of (row, col) after training, so interpolating the table
        (bicubic, as timm and the ViT paper do) is how a ViT trained at one resolution runs at
        another.
        """
        table = self.pos_embed.weight
        if tuple(grid) == self.grid_size:
            return table
        from timm.layers import resample_abs_pos_embed

        return resample_abs_pos_embed(table, new_size=list(grid), old_size=list(self.grid_size),
                                      num_prefix_tokens=self.num_prefix_tokens)

    def context(self, grid: tuple[int, int]) -> AttentionContext:
        """Who sees whom among the tower's tokens: everyone, or a window (``attention_radius``)."""
        if self.attention_radius is None:
            return NO_CONTEXT
        return AttentionContext(local_mask(grid, self.attention_radius, self.num_prefix_tokens,
                                           self.pos_embed.weight.device))

    def forward(self, images: Tensor) -> tuple[Tensor, Tensor]:
        return self.pool_tokens(self.features(images))

    def forward_backbone_features(self, features: Tensor) -> tuple[Tensor, Tensor]:
        """:meth:`forward` from a hybrid front end's backbone output (B, C, h, w) (a frozen
        backbone's cache: `vitbert.data.features`): the rest of the tower, which trains."""
        tokens = self.patch_embed.embed(features)  # (B, N, D)
        P = self.patch_embed.patch_size
        grid = (features.shape[-2] // P, features.shape[-1] // P)
        return self.pool_tokens(self.encode(tokens, grid))

    def features(self, images: Tensor) -> Tensor:
        """Normalised images (B, 3, H, W) → every token after the final LayerNorm
        (B, prefix + N, D): the class token (if any), then the patches in row-major order."""
        _, _, H, W = images.shape
        if H % self.stride or W % self.stride:
            raise ValueError(f"{H}×{W} pixels do not tile into {self.stride}-pixel tokens; "
                             f"use a multiple of {self.stride}")
        return self.encode(self.patch_embed(images), (H // self.stride, W // self.stride))

    def encode(self, x: Tensor, grid: tuple[int, int]) -> Tensor:
        """Patch tokens (B, N, D) on a ``grid`` → (class token +) positions → the encoder."""
        if self.cls_token is not None:
            x = torch.cat((self.cls_token.expand(len(x), -1, -1), x), dim=1)  # (B, 1 + N, D)
        x = x + self.positions(grid)
        return self.encoder(x, self.context(grid))  # (B, prefix + N, D)

    def pool_tokens(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """The encoder's output (B, prefix + N, D) → (pooled (B, D), patch tokens (B, N, D))."""
        tokens = x[:, self.num_prefix_tokens:]  # (B, N, D)
        pooled = x[:, 0] if self.pool == "cls" else tokens.mean(dim=1)  # (B, D)
        return pooled, tokens


def build_patch_embed(cfg: ImageTowerConfig) -> nn.Module:
    """The module that turns pixels into tokens, by ``cfg.kind``."""
    if cfg.kind == "vit":
        return PatchEmbed(cfg.image_size, cfg.patch_size, cfg.in_chans, cfg.dim)
    if cfg.kind == "hybrid":
        backbone = (timm_backbone(cfg.backbone, cfg.in_chans) if cfg.backbone
                    else resnetv2_backbone(cfg.hybrid_layers, cfg.in_chans))
        return HybridEmbed(*backbone, cfg.image_size, cfg.patch_size, cfg.dim,
                           cfg.backbone_grid)
    if cfg.kind == "conv_stem":
        return ConvStem(cfg.image_size, cfg.patch_size, cfg.in_chans, cfg.dim,
                        cfg.stem_hidden_dim)
    raise ValueError(f"unknown image tower kind {cfg.kind!r}; choose vit, hybrid or conv_stem")


def build_image_tower(cfg: ImageTowerConfig) -> ViT:
    """A freshly initialised ViT for ``cfg``.

    ``cfg.pretrained`` is not loaded here: a fresh run loads it when training starts
    (:func:`vitbert.io.initialize`); a checkpoint brings every weight itself.
    """
    return ViT(
        build_patch_embed(cfg), cfg.dim, cfg.depth, cfg.num_heads, cfg.mlp_ratio,
        cfg.class_token, cfg.pool, cfg.drop_path, cfg.norm_eps, cfg.mean, cfg.std,
        cfg.attention_radius,
    )
