"""Pretrained timm weights, renamed for our image tower and handed to the one transfer.

timm's ViT is pre-norm with the same block layout and names as ours (``qkv``, ``proj``, ``fc1``,
``fc2``, ``norm1``, ``norm2``), so the mapping is a renaming of a few prefixes:

    timm                          ours (ViT)
    cls_token                     cls_token
    pos_embed                     pos_embed.weight     (prefix rows fitted, grid resampled)
    patch_embed.proj.*            patch_embed.proj.*
    patch_embed.backbone.*        patch_embed.backbone.*   (hybrid: timm's own ResNetV2 modules)
    blocks.{i}.*                  encoder.blocks.{i}.*
    norm.*                        encoder.norm.*
    head.*, fc_norm.*, …          — (kept under timm's name: reported as not used)

A file that holds every tensor of the tower's CNN backbone (a hybrid tower's,
``image.backbone``: ``weights/tf_efficientnet_lite0.safetensors``, timm's own state dict of that
CNN) is read under the backbone's names, ``patch_embed.backbone.*``, whatever its keys look like:
the mapping follows the module the weights are for.

A source is a timm model name (``timm.create_model(name, pretrained=True)``: needs network or a
warm Hugging Face cache), a local ``.safetensors`` / ``.pth`` / ``.bin`` file (possibly nested
under ``"state_dict"`` or ``"model"``, possibly with ``module.`` prefixes), or a state dict.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import torch
from torch import Tensor

from vitbert.io.files import StoredModel, load_tensors_file
from vitbert.io.transfer import TransferReport, transfer_weights
from vitbert.models.vit import ViT

TIMM_POSITIONS = "pos_embed"


def load_image_weights(tower: ViT, source: str | Path | Mapping[str, Tensor]) -> TransferReport:
    """Copy a timm ViT / hybrid ViT state dict into ``tower`` in place; see the module docstring.

    A shape that cannot be reconciled (another width, depth or patch size) raises before anything
    is written; a position table on another grid is resampled.
    """
    state, name, pretrained_cfg = read_timm_state_dict(source)
    report = transfer_weights(tower, StoredModel(None, to_our_names(state, tower), None, name),
                              strict=True)
    if tower.attention_radius is not None:  # timm's ViTs were trained with global attention
        report.notes.append(f"the weights were trained with every patch seeing every patch; "
                            f"attention_radius={tower.attention_radius} limits each to a window: "
                            f"set image.attention_radius: null to use them as trained")
    for stat in ("mean", "std"):  # only timm names come with the statistics they were trained on
        expected = pretrained_cfg.get(stat)
        if expected is None:
            continue
        ours = getattr(tower, f"pixel_{stat}").flatten().tolist()
        if not torch.allclose(torch.tensor(expected), torch.tensor(ours), atol=1e-3):
            report.notes.append(f"the weights expect pixel {stat} {tuple(expected)}, the config "
                                f"says {tuple(round(v, 4) for v in ours)}: set image.{stat}")
    return report


def timm_key(key: str) -> str:
    """Our name for a timm ViT state-dict key (timm's own name when we have no such tensor)."""
    if key == TIMM_POSITIONS:
        return "pos_embed.weight"
    if key.startswith(("blocks.", "norm.")):
        return "encoder." + key
    return key


def to_our_names(state: Mapping[str, Tensor], tower: ViT | None = None) -> dict[str, Tensor]:
    """timm's keys renamed for ``tower``: a CNN's own weights, when they are every tensor of the
    tower's CNN backbone, under the backbone; else a ViT's, register-token rows taken out of the
    position table."""
    backbone = getattr(getattr(tower, "patch_embed", None), "backbone", None)
    if backbone is not None and set(backbone.state_dict()) <= set(state):
        return {f"patch_embed.backbone.{key}": value for key, value in state.items()}
    state = dict(state)
    if "reg_token" in state and TIMM_POSITIONS in state:
        table, registers = state[TIMM_POSITIONS], state["reg_token"].shape[1]
        prefix = int("cls_token" in state)
        if table.shape[1] > prefix + registers:  # else no_embed_class: no rows for prefix tokens
            state[TIMM_POSITIONS] = torch.cat(
                (table[:, :prefix], table[:, prefix + registers:]), dim=1)
    return {timm_key(key): value for key, value in state.items()}


def read_timm_state_dict(
    source: str | Path | Mapping[str, Tensor],
) -> tuple[dict[str, Tensor], str, dict]:
    """A state dict from a dict, a local file, or a timm model name.

    Returns (state dict, printable source, timm's pretrained config or {} when not from timm).
    """
    if isinstance(source, Mapping):
        return _unwrap(source), "a state dict", {}
    path = Path(source)
    if path.is_file():
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            return load_file(str(path)), str(path), {}
        return _unwrap(load_tensors_file(path)), str(path), {}
    if path.suffix in (".safetensors", ".pth", ".pt", ".bin", ".ckpt"):
        raise FileNotFoundError(f"no weight file at {path}")
    import timm

    model = timm.create_model(str(source), pretrained=True)
    return model.state_dict(), f"timm:{source}", dict(model.pretrained_cfg)


def _unwrap(state: Mapping) -> dict[str, Tensor]:
    """The tensors under ``{"state_dict": …}`` / ``{"model": …}``, without wrapper prefixes."""
    from timm.models import clean_state_dict  # DDP's module., torch.compile's _orig_mod.

    while True:
        for wrapper in ("state_dict", "model"):
            if isinstance(state.get(wrapper), Mapping):
                state = state[wrapper]
                break
        else:
            break
    return clean_state_dict({k: v for k, v in state.items() if isinstance(v, Tensor)})
