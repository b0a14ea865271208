"""Whole models in and out: load one to predict, export one to share, start a run from one."""

from __future__ import annotations

from pathlib import Path

import torch

from vitbert.data.tokenizer import tokenizer_from_json, tokenizer_to_json
from vitbert.io.files import (
    TOKENIZER_FILE,
    WEIGHTS_FILE,
    CheckpointError,
    build_model,
    read_checkpoint,
    write_exported,
)
from vitbert.io.timm import load_image_weights
from vitbert.io.transfer import transfer_weights
from vitbert.models.multimodal import VitBert


def load_model(path: str | Path, map_location: str | torch.device = "cpu"):
    """(model in eval mode, tokenizer) from a ``.ckpt`` or an exported folder."""
    stored = read_checkpoint(path)
    if stored.tokenizer_json is None:
        raise CheckpointError(
            f"{path}: holds no tokenizer. Checkpoints written by scripts/train.py carry one; "
            f"for an exported folder, put its {TOKENIZER_FILE} beside {WEIGHTS_FILE}."
        )
    model = build_model(VitBert, stored, map_location)
    return model.eval(), tokenizer_from_json(stored.tokenizer_json)


def export(checkpoint: str | Path, out: str | Path) -> Path:
    """Write the shareable folder: safetensors weights, config.json and tokenizer.json."""
    model, tokenizer = load_model(checkpoint)
    return write_exported(model, out, tokenizer_to_json(tokenizer))


def initialize(net: VitBert, init_from: str | Path | None = None, tokenizer=None) -> str | None:
    """The weights a fresh run starts from, and a report of what was loaded (None: nothing).

    ``init_from`` (a ``.ckpt`` or exported folder) gives every weight it can, rows matched by
    token text; otherwise ``net.config.image.pretrained`` (timm name or file) gives the image
    tower's. A resumed run, or a model loaded to predict, takes its weights from its own file.
    """
    if init_from:
        report = transfer_weights(net, read_checkpoint(init_from), tokenizer)
        return f"Fine-tuning {report}"
    if net.config.image.pretrained:
        return f"Image tower {load_image_weights(net.image_tower, net.config.image.pretrained)}"
    return None
