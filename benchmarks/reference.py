"""What a user would build instead of vitbert: timm's ``VisionTransformer`` + transformers'
``BertForMaskedLM``, the image token(s) prepended through ``inputs_embeds``, logits (and the loss)
at every position. Same sizes as a :class:`VitBertConfig`; used by the training-step benchmark.

The image side gets the same patch embedding as ours (timm's conv patchify for ``kind="vit"``,
our conv stem wrapped in timm's embed-layer interface for ``kind="conv_stem"``), so the towers
do the same work and the comparison is about everything around them.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from vitbert.models.config import VitBertConfig
from vitbert.models.patch_embed import ConvStem

IGNORE_INDEX = -100


class TimmConvStem(ConvStem):
    """Our conv stem behind timm's ``embed_layer`` constructor and attributes."""

    def __init__(self, img_size: int = 32, patch_size: int = 4, in_chans: int = 3,
                 embed_dim: int = 128, hidden_dim: int = 32, **_: object) -> None:
        super().__init__(img_size, patch_size, in_chans, embed_dim, hidden_dim)
        self.num_patches = self.grid_size[0] * self.grid_size[1]
        self.img_size = (img_size, img_size) if isinstance(img_size, int) else tuple(img_size)

    def feat_ratio(self, as_scalar: bool = True) -> int:
        return self.patch_size


class ReferenceModel(nn.Module):
    """timm ViT → Linear projector → prepended to the word embeddings → ``BertForMaskedLM``.

    ``forward`` returns the MLM loss computed by transformers from logits at all B·(N + T)
    positions (image positions carry label −100), as its documentation shows.
    """

    def __init__(self, config: VitBertConfig) -> None:
        super().__init__()
        from functools import partial

        from timm.models.vision_transformer import VisionTransformer
        from transformers import BertConfig, BertForMaskedLM

        img, text = config.image, config.text
        if img.kind == "conv_stem":
            embed_layer = partial(TimmConvStem, hidden_dim=img.stem_hidden_dim)
        elif img.kind == "vit":
            from timm.layers import PatchEmbed

            embed_layer = PatchEmbed
        else:
            raise NotImplementedError(f"no reference for image tower kind {img.kind!r}")
        self.pooled = config.image_tokens == "pooled"
        self.vit = VisionTransformer(
            img_size=img.image_size, patch_size=img.patch_size, in_chans=img.in_chans,
            embed_dim=img.dim, depth=img.depth, num_heads=img.num_heads, mlp_ratio=img.mlp_ratio,
            class_token=img.class_token, global_pool="token" if img.pool == "cls" else "avg",
            num_classes=0, embed_layer=embed_layer, drop_path_rate=img.drop_path,
        )
        n_image = 1 if self.pooled else self.vit.patch_embed.num_patches
        self.projector = nn.Linear(img.dim, text.dim)
        bert = BertConfig(
            vocab_size=config.vocab_size, hidden_size=text.dim, num_hidden_layers=text.depth,
            num_attention_heads=text.num_heads, intermediate_size=int(text.dim * text.mlp_ratio),
            max_position_embeddings=n_image + text.max_len, hidden_dropout_prob=text.dropout,
            attention_probs_dropout_prob=text.dropout, pad_token_id=config.pad_token_id,
        )
        self.bert = BertForMaskedLM(bert)
        self.register_buffer("mean", torch.tensor(img.mean).view(1, -1, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(img.std).view(1, -1, 1, 1), persistent=False)

    def forward(self, input_ids: Tensor, attention_mask: Tensor, images: Tensor,
                labels: Tensor) -> Tensor:
        x = (images.float() / 255.0 - self.mean) / self.std
        features = self.vit.forward_features(x)  # (B, prefix + N, D_img)
        if self.pooled:
            tokens = self.vit.forward_head(features, pre_logits=True)[:, None]  # (B, 1, D_img)
        else:
            tokens = features[:, self.vit.num_prefix_tokens:]  # (B, N, D_img)
        image = self.projector(tokens)  # (B, N, D)
        words = self.bert.get_input_embeddings()(input_ids)  # (B, T, D)
        B, N = image.shape[:2]
        mask = torch.cat((attention_mask.new_ones(B, N), attention_mask), dim=1).long()
        ignore = labels.new_full((B, N), IGNORE_INDEX)
        out = self.bert(inputs_embeds=torch.cat((image, words), dim=1), attention_mask=mask,
                        labels=torch.cat((ignore, labels), dim=1))
        return out.loss
