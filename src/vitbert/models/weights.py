"""Pretrained timm ViT weights → our image tower, and position tables moved between grids.

timm's ViT is pre-norm with the same block layout and names as ours (``qkv``, ``proj``, ``fc1``,
``fc2``, ``norm1``, ``norm2``), so the mapping is a renaming of a few prefixes:

    timm                          ours (ViT)
    cls_token                     cls_token
    pos_embed                     pos_embed.weight     (prefix rows fitted, grid resampled)
    patch_embed.proj.*            patch_embed.proj.*
    patch_embed.backbone.*        patch_embed.backbone.*   (hybrid: timm's own ResNetV2 modules)
    blocks.{i}.*                  encoder.blocks.{i}.*
    norm.*                        encoder.norm.*
    head.*, fc_norm.*, …          — (reported as unexpected)

A source is a timm model name (``timm.create_model(name, pretrained=True)``: needs network or a
warm Hugging Face cache), a local ``.safetensors`` / ``.pth`` / ``.bin`` file (possibly nested
under ``"state_dict"`` or ``"model"``), or a state dict.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor

if TYPE_CHECKING:
    from vitbert.models.vit import ViT


def resample_pos_embed(
    table: Tensor, old_grid: tuple[int, int], new_grid: tuple[int, int]
) -> Tensor:
    """(1, R·C, D) position table on an R×C grid → (1, R'·C', D), bicubic in 2D.

    Positions are a smooth function of (row, col) after training, so interpolating the table
    is how a ViT trained at one resolution is run at another (timm and the ViT paper do the same).
    """
    if tuple(old_grid) == tuple(new_grid):
        return table
    D = table.shape[-1]
    grid = table.reshape(1, old_grid[0], old_grid[1], D).permute(0, 3, 1, 2)  # (1, D, R, C)
    grid = F.interpolate(grid, size=tuple(new_grid), mode="bicubic", align_corners=False,
                         antialias=True)
    return grid.permute(0, 2, 3, 1).reshape(1, new_grid[0] * new_grid[1], D)


@dataclass
class WeightReport:
    """What a load did: our keys filled, source keys left over, our keys left at their init."""

    source: str
    mapped: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        lines = [f"loaded {len(self.mapped)} tensors from {self.source}"]
        if self.missing:
            lines.append(f"  missing (kept their init): {_summarise(self.missing)}")
        if self.unexpected:
            lines.append(f"  unexpected (not used): {_summarise(self.unexpected)}")
        lines += [f"  note: {note}" for note in self.notes]
        return "\n".join(lines)


def _summarise(keys: list[str], limit: int = 8) -> str:
    shown = ", ".join(keys[:limit])
    return shown + (f", … ({len(keys) - limit} more)" if len(keys) > limit else "")


def timm_key(key: str) -> str | None:
    """Our name for a timm ViT state-dict key, or None when we have no such tensor."""
    if key == "pos_embed":
        return "pos_embed.weight"
    if key == "cls_token" or key.startswith("patch_embed."):
        return key
    if key.startswith(("blocks.", "norm.")):
        return "encoder." + key
    return None


def read_state_dict(
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
        loaded = torch.load(path, map_location="cpu", weights_only=True)
        return _unwrap(loaded), str(path), {}
    if path.suffix in (".safetensors", ".pth", ".pt", ".bin", ".ckpt"):
        raise FileNotFoundError(f"no weight file at {path}")
    import timm

    model = timm.create_model(str(source), pretrained=True)
    return model.state_dict(), f"timm:{source}", dict(model.pretrained_cfg)


def _unwrap(state: Mapping) -> dict[str, Tensor]:
    """The tensors under ``{"state_dict": …}`` / ``{"model": …}``, without ``module.`` prefixes."""
    while True:
        for wrapper in ("state_dict", "model"):
            if isinstance(state.get(wrapper), Mapping):
                state = state[wrapper]
                break
        else:
            break
    state = {k: v for k, v in state.items() if isinstance(v, Tensor)}
    if state and all(k.startswith("module.") for k in state):
        state = {k[len("module."):]: v for k, v in state.items()}
    return state


def load_timm_weights(
    tower: ViT, source: str | Path | Mapping[str, Tensor]
) -> WeightReport:
    """Copy a timm ViT / hybrid ViT state dict into ``tower`` in place; see the module docstring.

    Tensors are copied into the existing Parameters (identity kept). A shape that cannot be
    reconciled (another width, depth or patch size) raises before anything is written; a position
    table on another grid is resampled, and its class-token row dropped or kept to match ours.
    """
    state, name, pretrained_cfg = read_state_dict(source)
    report = WeightReport(source=name)
    for stat in ("mean", "std"):  # only timm names come with the statistics they were trained on
        expected = pretrained_cfg.get(stat)
        if expected is None:
            continue
        ours_stat = getattr(tower, f"pixel_{stat}").flatten().tolist()
        if not torch.allclose(torch.tensor(expected), torch.tensor(ours_stat), atol=1e-3):
            report.notes.append(f"the weights expect pixel {stat} {tuple(expected)}, the config "
                                f"says {tuple(round(v, 4) for v in ours_stat)}: set image.{stat}")
    ours = tower.state_dict(keep_vars=True)
    updates: dict[str, Tensor] = {}
    mismatched = []
    for key, value in state.items():
        target = timm_key(key)
        if target is None or target not in ours:
            report.unexpected.append(key)
            continue
        if target == "pos_embed.weight":
            value = _fit_pos_embed(value, state, tower, report)
        if value.shape != ours[target].shape:
            mismatched.append(f"{key} {tuple(value.shape)} → {target} {tuple(ours[target].shape)}")
            continue
        updates[target] = value
    if mismatched:
        raise ValueError(
            "these timm tensors do not fit the tower (check dim / depth / patch_size / kind / "
            "hybrid_layers in the image config):\n  " + "\n  ".join(mismatched)
        )
    with torch.no_grad():
        for target, value in updates.items():
            ours[target].copy_(value)
    report.mapped = sorted(updates)
    report.missing = [k for k in ours if k not in updates]
    return report


def _fit_pos_embed(value: Tensor, state: Mapping[str, Tensor], tower: ViT,
                   report: WeightReport) -> Tensor:
    """timm's (1, prefix + R·C, D) table → ours: match the prefix rows, resample the grid."""
    src_prefix = int("cls_token" in state)
    if "reg_token" in state:
        src_prefix += state["reg_token"].shape[1]
    cells = value.shape[1] - src_prefix
    if math.isqrt(cells) ** 2 != cells:  # no_embed_class models: no rows for prefix tokens
        src_prefix, cells = 0, value.shape[1]
    side = math.isqrt(cells)
    if side * side != cells:
        return value  # not a square grid: let the shape check report it
    prefix, grid = value[:, :src_prefix], value[:, src_prefix:]
    ours = tower.pos_embed.weight
    if tower.num_prefix_tokens:
        if src_prefix:
            prefix = prefix[:, :1]
        else:
            prefix = ours[:, :1].detach()
            report.notes.append("source has no class-token position; ours kept its init")
    elif src_prefix:
        prefix = prefix[:, :0]
        report.notes.append("class-token position dropped (class_token=False)")
    if (side, side) != tuple(tower.grid_size):
        report.notes.append(
            f"pos_embed resampled from {side}×{side} to {tower.grid_size[0]}×{tower.grid_size[1]}"
        )
        grid = resample_pos_embed(grid.to(ours.dtype), (side, side), tower.grid_size)
    return torch.cat((prefix.to(ours.dtype), grid.to(ours.dtype)), dim=1)
