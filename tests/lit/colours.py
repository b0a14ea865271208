"""A batch whose photo is learnable from its words: four one-colour photos, each caption naming
its photo's colour; and the tiny network the objective tests train on it."""

from __future__ import annotations

import torch

from vitbert.data.features import IMAGE_INDEX
from vitbert.data.masking import IGNORE_INDEX
from vitbert.models import ImageTowerConfig, TextTowerConfig, VitBertConfig

MASK = 4
COLOURS = torch.tensor([[230, 20, 20], [20, 200, 20], [20, 20, 230], [230, 230, 20]])


def tiny_config() -> VitBertConfig:
    image = ImageTowerConfig(kind="vit", image_size=16, patch_size=8, dim=32, depth=1, num_heads=2)
    text = TextTowerConfig(dim=32, depth=1, num_heads=2, max_len=8)
    return VitBertConfig(image=image, text=text, vocab_size=30)


def colour_batch(captions_per_photo: int = 2, each_photo_once: bool = False
                 ) -> dict[str, torch.Tensor]:
    """Four one-colour photos, each with captions "[CLS] the <its colour's word> [SEP]"; one
    caption piece is an MLM target. Whether a photo is a caption's is learnable from the colour.
    ``each_photo_once``: the photos as the collator gives them, the 4 distinct ones and an
    ``image_index``; else one copy per caption."""
    image_id = torch.arange(4).repeat_interleave(captions_per_photo)  # (B,)
    shown = torch.arange(4) if each_photo_once else image_id
    images = COLOURS[shown][:, :, None, None].expand(len(shown), 3, 16, 16).to(torch.uint8)
    caption = torch.stack([torch.tensor([2, 7, 10 + int(i), 3]) for i in image_id])  # (B, 4)
    labels = torch.full_like(caption, IGNORE_INDEX)
    labels[:, 1] = caption[:, 1]
    input_ids = caption.clone()
    input_ids[:, 1] = MASK
    batch = {"input_ids": input_ids, "attention_mask": torch.ones_like(caption, dtype=torch.bool),
             "labels": labels, "image_id": image_id, "images": images.clone()}
    return batch | ({IMAGE_INDEX: image_id} if each_photo_once else {})
