"""Reading what training wrote: Lightning checkpoints and exported folders.

Two kinds of file hold a vitbert model:

* a Lightning checkpoint (``.ckpt``): everything needed to resume, with the architecture in
  ``hyper_parameters["net"]`` (plain values), the weights under ``state_dict`` prefixed ``net.``,
  and the tokenizer's JSON text under :data:`TOKENIZER_KEY`;
* an exported folder: ``config.json``, ``model.safetensors`` and ``tokenizer.json``, the
  shareable form that needs neither Lightning nor pickle.

Resuming (``--ckpt_path``) restores everything exactly and is Lightning's job. This module serves
the two other uses: loading a model to predict, and starting a new run from a model's weights
(fine-tuning), where the vocabulary may have changed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor

from vitbert.data.tokenizer import tokenizer_from_json, tokenizer_to_json
from vitbert.models import VitBert, VitBertConfig
from vitbert.models.multimodal import TIED_KEY, TIED_SOURCE

TOKENIZER_KEY = "vitbert_tokenizer"
CONFIG_FILE, WEIGHTS_FILE, TOKENIZER_FILE = "config.json", "model.safetensors", "tokenizer.json"
# Rows of these tensors are indexed by token id: on a vocabulary change they are matched by text.
VOCAB_ROWS = ("text.embeddings.word.weight", "mlm_head.decoder.bias")
IMAGE_POSITIONS = "image_tower.pos_embed.weight"  # (1, N, D) over the patch grid
TEXT_POSITIONS = "text.embeddings.position.weight"  # (max_len, D)


class CheckpointError(ValueError):
    """A file that is not a vitbert checkpoint, or one that lacks what is needed."""


@dataclass
class StoredModel:
    """What a checkpoint or exported folder holds, before any model is built."""

    config: VitBertConfig
    state_dict: dict[str, Tensor]
    tokenizer_json: str | None
    source: str


@dataclass
class TransferReport:
    """What :func:`transfer_weights` did, tensor by tensor."""

    copied: list[str] = field(default_factory=list)
    resized: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    vocabulary: str = ""

    def __str__(self) -> str:
        lines = [f"  copied {len(self.copied)} tensors"]
        if self.vocabulary:
            lines.append(f"  vocabulary: {self.vocabulary}")
        if self.resized:
            lines.append(f"  resized ({len(self.resized)}): {', '.join(self.resized)}")
        if self.skipped:
            lines.append(f"  skipped, left as initialised ({len(self.skipped)}): "
                         f"{', '.join(self.skipped)}")
        return "\n".join(lines)


def read_checkpoint(path: str | Path) -> StoredModel:
    """Read a ``.ckpt`` file or an exported folder, with a clear error for anything else."""
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"{path}: no such file or folder")
    if path.is_dir():
        return _read_exported(path)
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:
        reason = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise CheckpointError(
            f"{path}: not a readable PyTorch checkpoint ({type(error).__name__}: {reason}). "
            "Pass a .ckpt written by scripts/train.py or a folder written by scripts/export.py."
        ) from error
    hparams = checkpoint.get("hyper_parameters", {}) if isinstance(checkpoint, dict) else {}
    if "net" not in hparams or "state_dict" not in checkpoint:
        raise CheckpointError(
            f"{path}: a checkpoint, but not a vitbert one (no hyper_parameters['net'] or "
            "state_dict). Pass a .ckpt written by scripts/train.py."
        )
    state_dict = {
        key.removeprefix("net."): value
        for key, value in checkpoint["state_dict"].items()
        if key.startswith("net.")
    }
    config = VitBertConfig.from_dict(hparams["net"])
    return StoredModel(config, state_dict, checkpoint.get(TOKENIZER_KEY), str(path))


def check_same_vocabulary(stored_json: str, tokenizer) -> None:
    """Refuse to run a checkpoint's weights with another vocabulary: the ids would mean other
    words (and, same size or not, every guess would be wrong without an error)."""
    stored = tokenizer_from_json(stored_json).get_vocab()
    if stored != tokenizer.get_vocab():
        raise CheckpointError(
            f"the checkpoint's vocabulary ({len(stored)} pieces) is not the data's tokenizer's "
            f"({len(tokenizer)} pieces). Use the tokenizer the model was trained with "
            "(--data.init_args.tokenizer, or the same data), or scripts/predict.py, which "
            "reads the checkpoint's own; to train on a new vocabulary use --model.init_from."
        )


def _read_exported(folder: Path) -> StoredModel:
    from safetensors.torch import load_file

    missing = [name for name in (CONFIG_FILE, WEIGHTS_FILE) if not (folder / name).is_file()]
    if missing:
        raise CheckpointError(
            f"{folder}: not an exported vitbert folder (missing {', '.join(missing)}). "
            "Write one with: python scripts/export.py --ckpt CHECKPOINT --out FOLDER"
        )
    config = VitBertConfig.from_dict(json.loads((folder / CONFIG_FILE).read_text()))
    tokenizer_path = folder / TOKENIZER_FILE
    tokenizer_json = tokenizer_path.read_text() if tokenizer_path.is_file() else None
    state_dict = load_file(folder / WEIGHTS_FILE)
    # save_pretrained stores the tied decoder matrix once, under the word embedding.
    state_dict.setdefault(TIED_KEY, state_dict[TIED_SOURCE])
    return StoredModel(config, state_dict, tokenizer_json, str(folder))


def load_model(path: str | Path, map_location: str | torch.device = "cpu"):
    """(model in eval mode, tokenizer) from a ``.ckpt`` or an exported folder."""
    stored = read_checkpoint(path)
    if stored.tokenizer_json is None:
        raise CheckpointError(
            f"{path}: holds no tokenizer. Checkpoints written by scripts/train.py carry one; "
            f"for an exported folder, put its {TOKENIZER_FILE} beside {WEIGHTS_FILE}."
        )
    model = VitBert(stored.config, load_pretrained=False)  # the weights come from the file
    model.load_state_dict(stored.state_dict)
    return model.to(map_location).eval(), tokenizer_from_json(stored.tokenizer_json)


def export(checkpoint: str | Path, out: str | Path) -> Path:
    """Write the shareable folder: safetensors weights, config.json and tokenizer.json."""
    model, tokenizer = load_model(checkpoint)
    out = Path(out)
    model.save_pretrained(out)
    (out / TOKENIZER_FILE).write_text(tokenizer_to_json(tokenizer))
    return out


def transfer_weights(model: VitBert, source: StoredModel, tokenizer=None) -> TransferReport:
    """Copy a stored model's weights into ``model`` for fine-tuning; report what did not fit.

    Tensors of equal shape are copied. Rows indexed by token id are matched by token text when
    both tokenizers are known (else by id), so a grown or rebuilt vocabulary keeps every row it
    can. A longer or shorter text-position table keeps the common prefix. Anything else that
    differs in shape is skipped and named. The MLM decoder is re-tied afterwards.
    """
    report = TransferReport()
    target = model.state_dict()
    row_map = _vocabulary_row_map(source, tokenizer, target, report)
    with torch.no_grad():
        for name, value in source.state_dict.items():
            if name not in target:
                report.skipped.append(f"{name} (not in this model)")
                continue
            current = target[name]
            if current.shape == value.shape and (name not in VOCAB_ROWS or row_map is None):
                current.copy_(value)
                report.copied.append(name)
            elif name in VOCAB_ROWS and row_map is not None:
                new_rows, old_rows = row_map
                current[new_rows] = value[old_rows].to(current.dtype)
                report.resized.append(name)
            elif name == IMAGE_POSITIONS and (
                resampled := _resample_image_positions(value, source.config, model.config)
            ).shape == current.shape:
                current.copy_(resampled)
                report.resized.append(f"{name} (resampled to the new grid)")
            elif name == TEXT_POSITIONS and current.shape[-1] == value.shape[-1]:
                n = min(len(current), len(value))  # a longer table keeps the trained prefix
                current[:n] = value[:n]
                report.resized.append(f"{name} (first {n} positions)")
            else:
                report.skipped.append(f"{name} {tuple(value.shape)} → {tuple(current.shape)}")
    model.tie_weights()
    return report


def _resample_image_positions(table: Tensor, old: VitBertConfig, new: VitBertConfig) -> Tensor:
    """A position table trained on one image grid, interpolated onto another (same front end)."""
    from vitbert.models import build_image_tower, resample_pos_embed

    with torch.device("meta"):  # only the grid sizes are wanted: allocate nothing
        old_grid = build_image_tower(old.image, load_pretrained=False).grid_size
        new_grid = build_image_tower(new.image, load_pretrained=False).grid_size
    prefix = table.shape[1] - old_grid[0] * old_grid[1]  # a class token's row is kept as is
    grid = resample_pos_embed(table[:, prefix:], old_grid, new_grid)
    return torch.cat((table[:, :prefix], grid), dim=1)


def _vocabulary_row_map(source: StoredModel, tokenizer, target, report: TransferReport):
    """(new ids, old ids) of the tokens both vocabularies share, or None when nothing changed."""
    old_size = source.state_dict[VOCAB_ROWS[0]].shape[0]
    new_size = target[VOCAB_ROWS[0]].shape[0]
    if tokenizer is not None and source.tokenizer_json is not None:
        old_vocab = tokenizer_from_json(source.tokenizer_json).get_vocab()
        new_vocab = tokenizer.get_vocab()
        if old_vocab == new_vocab:
            return None
        shared = sorted(set(old_vocab) & set(new_vocab))
        report.vocabulary = (
            f"{old_size} → {new_size} pieces; {len(shared)} matched by text, "
            f"{new_size - len(shared)} new rows initialised"
        )
        return (
            torch.tensor([new_vocab[t] for t in shared], dtype=torch.long),
            torch.tensor([old_vocab[t] for t in shared], dtype=torch.long),
        )
    if old_size == new_size:
        return None
    common = min(old_size, new_size)
    report.vocabulary = f"{old_size} → {new_size} pieces; first {common} rows copied by id"
    ids = torch.arange(common)
    return ids, ids


__all__ = [
    "TOKENIZER_KEY",
    "CheckpointError",
    "StoredModel",
    "TransferReport",
    "check_same_vocabulary",
    "export",
    "load_model",
    "read_checkpoint",
    "transfer_weights",
]
