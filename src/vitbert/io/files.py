"""Where a vitbert model lives on disk: the file names, and reading and writing them.

Two kinds of file hold a model:

* a Lightning checkpoint (``.ckpt``): everything needed to resume, with the architecture in
  ``hyper_parameters["net"]`` (plain values), the weights under ``state_dict`` prefixed ``net.``,
  the training heads beside it (:data:`HEADS`) under their own names, and the tokenizer's JSON
  text under :data:`TOKENIZER_KEY`; Lightning writes it;
* an exported folder: :data:`CONFIG_FILE`, :data:`WEIGHTS_FILE` and :data:`TOKENIZER_FILE`, the
  shareable form that needs neither Lightning nor pickle. The tied MLM decoder matrix is stored
  once, under the word embedding (:data:`TIED_SOURCE`); the heads are stored beside the network's
  tensors under the names they have in a checkpoint (``word_head.classifier.weight``).

Both are read into a :class:`StoredModel`: the network's tensors, and the heads' apart, so a
model built to predict loads the network alone and a run started from the file
(``--model.init_from``) gets the heads too.

Every read goes through :func:`read_checkpoint`, which unpickles with ``weights_only=True``: a
file whose pickle would run code is refused. Every write is atomic and readable by others
(:func:`vitbert.data.files.atomic_write`, the project's one atomic-write helper).
"""

from __future__ import annotations

import json
import pickle
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from vitbert.data.files import atomic_write
from vitbert.models.config import VitBertConfig
from vitbert.models.multimodal import build_network

if TYPE_CHECKING:
    from torch import nn

TOKENIZER_KEY = "vitbert_tokenizer"  # the tokenizer's JSON text inside a .ckpt
CONFIG_FILE, WEIGHTS_FILE, TOKENIZER_FILE = "config.json", "model.safetensors", "tokenizer.json"
# The MLM decoder shares the word-embedding matrix: an exported folder stores it once.
TIED_KEY, TIED_SOURCE = "mlm_head.decoder.weight", "text.embeddings.word.weight"
_SHARED_FILE_MODE, _SHARED_FOLDER_MODE = 0o644, 0o755  # exported models are for others to read
CONFIG_SUFFIXES = (".yaml", ".yml", ".json", ".toml")  # what a config passed by mistake looks like
# The heads of the training objectives, kept by the training module beside ``net``
# (vitbert.models.heads), each with the objective that trains it (a report names it when a run
# has no such head, or its source had none).
HEADS = {"word_head": "vitbert.lit.objectives.WordDetection"}


class CheckpointError(ValueError):
    """A file that is not a vitbert checkpoint, or one that lacks what is needed."""


@dataclass
class StoredModel:
    """Weights read from disk, before any model is built.

    ``config`` and ``tokenizer_json`` are None for weights that come without them (timm's).
    ``heads``: the training heads' tensors (:data:`HEADS`), named as in a checkpoint
    (``word_head.classifier.weight``); not part of the network ``state_dict`` builds.
    ``ignored``: the names of a checkpoint's tensors that are neither, which nothing reads.
    """

    config: VitBertConfig | None
    state_dict: dict[str, Tensor]
    tokenizer_json: str | None
    source: str
    heads: dict[str, Tensor] = field(default_factory=dict)
    ignored: list[str] = field(default_factory=list)


def is_head_weight(name: str) -> bool:
    """Whether a module-level weight name (``word_head.classifier.weight``) is a head's."""
    return name.split(".", 1)[0] in HEADS


def not_a_checkpoint(path: Path) -> str | None:
    """Why the file at ``path`` cannot be a checkpoint, told before torch reads it; None when it
    may be one.

    torch writes checkpoints as zip archives. Anything else (a YAML config passed by mistake, a
    text file) would reach ``torch.load`` and come back as an unpickling error with advice to
    retry with ``weights_only=False``: wrong, and unsafe, for a file that is no checkpoint at all.
    """
    if path.suffix in CONFIG_SUFFIXES:
        return "this is a config, not a checkpoint"
    if not zipfile.is_zipfile(path):
        return "not a readable PyTorch checkpoint (torch saves checkpoints as zip archives)"
    return None


def read_checkpoint(path: str | Path) -> StoredModel:
    """Read a ``.ckpt`` file or an exported folder, with a clear error for anything else."""
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"{path}: no such file or folder")
    if path.is_dir():
        return _read_exported(path)
    if (problem := not_a_checkpoint(path)) is not None:
        raise CheckpointError(f"{path}: {problem}; pass a .ckpt written by scripts/train.py or a "
                              "folder written by scripts/export.py")
    checkpoint = load_tensors_file(path)
    hparams = checkpoint.get("hyper_parameters", {}) if isinstance(checkpoint, dict) else {}
    if "net" not in hparams or "state_dict" not in checkpoint:
        raise CheckpointError(
            f"{path}: a checkpoint, but not a vitbert one (no hyper_parameters['net'] or "
            "state_dict). Pass a .ckpt written by scripts/train.py."
        )
    weights = checkpoint["state_dict"]
    state_dict = {key.removeprefix("net."): value for key, value in weights.items()
                  if key.startswith("net.")}
    heads = {key: value for key, value in weights.items() if is_head_weight(key)}
    ignored = [key for key in weights if not key.startswith("net.") and key not in heads]
    config, state_dict = upgraded(hparams["net"], state_dict, path)
    return StoredModel(config, state_dict, checkpoint.get(TOKENIZER_KEY), str(path), heads,
                       ignored)


def upgraded(config: dict[str, Any], state_dict: dict[str, Tensor], path: Path
             ) -> tuple[VitBertConfig, dict[str, Tensor]]:
    """A stored network's config and weights as this version builds them; a file of an older
    version whose settings this one does not know is refused with the fix."""
    try:
        return VitBertConfig.from_dict(config), state_dict
    except TypeError as error:  # a setting this version does not have
        raise CheckpointError(f"{path}: written by an older vitbert, whose settings this one does "
                              f"not know ({error}); convert it: python "
                              f"scripts/upgrade_checkpoint.py {path} NEW_PATH") from error


def check_same_vocabulary(stored_json: str, tokenizer) -> None:
    """Refuse to run a checkpoint's weights with another vocabulary: the ids would mean other
    words (and, same size or not, every guess would be wrong without an error)."""
    from vitbert.data.tokenizer import tokenizer_from_json

    stored = tokenizer_from_json(stored_json).get_vocab()
    if stored != tokenizer.get_vocab():
        raise CheckpointError(
            f"the checkpoint's vocabulary ({len(stored)} pieces) is not the data's tokenizer's "
            f"({len(tokenizer)} pieces). Use the tokenizer the model was trained with "
            "(--data.tokenizer, or the same data), or scripts/predict.py, which "
            "reads the checkpoint's own; to train on a new vocabulary use --model.init_from."
        )


def stored_tokenizer(checkpoint: dict[str, Any], tokenizer=None):
    """The tokenizer a Lightning checkpoint (the loaded dict) carries, else ``tokenizer``; when
    both exist they must agree (:func:`check_same_vocabulary`) and ``tokenizer`` is kept."""
    from vitbert.data.tokenizer import tokenizer_from_json

    if TOKENIZER_KEY in checkpoint and tokenizer is None:
        return tokenizer_from_json(checkpoint[TOKENIZER_KEY])
    if TOKENIZER_KEY in checkpoint:
        check_same_vocabulary(checkpoint[TOKENIZER_KEY], tokenizer)
    return tokenizer


def load_tensors_file(path: Path, mmap: bool = False) -> Any:
    """``torch.load`` of a pickle that may hold only tensors and plain values, on the CPU.
    ``mmap``: the tensors stay in the file until read, for a caller that wants the settings
    beside them (a checkpoint's hyperparameters) without reading every weight."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as error:
        raise CheckpointError(
            f"{path}: refused, its pickle holds more than tensors and plain values (loading it "
            "could run code). Pass a .ckpt written by scripts/train.py or an exported folder; "
            f"if you trust the file, convert it to safetensors first. ({_first_line(error)})"
        ) from error
    except Exception as error:
        raise CheckpointError(
            f"{path}: not a readable PyTorch checkpoint ({type(error).__name__}: "
            f"{_first_line(error)}). Pass a .ckpt written by scripts/train.py or a folder "
            "written by scripts/export.py."
        ) from error


def _first_line(error: Exception) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else ""


def _read_exported(folder: Path) -> StoredModel:
    from safetensors.torch import load_file

    missing = [name for name in (CONFIG_FILE, WEIGHTS_FILE) if not (folder / name).is_file()]
    if missing:
        raise CheckpointError(
            f"{folder}: not an exported vitbert folder (missing {', '.join(missing)}). "
            "Write one with: python scripts/export.py --ckpt CHECKPOINT --out FOLDER"
        )
    tokenizer_path = folder / TOKENIZER_FILE
    tokenizer_json = tokenizer_path.read_text() if tokenizer_path.is_file() else None
    weights = load_file(folder / WEIGHTS_FILE)
    heads = {key: weights.pop(key) for key in list(weights) if is_head_weight(key)}
    config, state_dict = upgraded(json.loads((folder / CONFIG_FILE).read_text()), weights,
                                  folder)
    state_dict.setdefault(TIED_KEY, state_dict[TIED_SOURCE])  # stored once: see write_exported
    return StoredModel(config, state_dict, tokenizer_json, str(folder), heads)


def safetensors_bytes(state: dict[str, Tensor], metadata: dict[str, str] | None = None) -> bytes:
    """``state`` as a ``.safetensors`` file's bytes, marked as PyTorch's (``format: pt``), with
    ``metadata`` (text) in its header."""
    from safetensors.torch import save

    return save(state, metadata={"format": "pt", **(metadata or {})})


def write_shared(path: str | Path, data: str | bytes) -> Path:
    """``data`` to ``path``, replaced in one step and readable by all: how every file meant for
    others is written (an exported model's, a pretrained tower's)."""
    return atomic_write(path, data, permissions=_SHARED_FILE_MODE)


def write_exported(model: nn.Module, folder: str | Path, tokenizer_json: str | None = None,
                   heads: dict[str, Tensor] | None = None,
                   metadata: dict[str, str] | None = None) -> Path:
    """``model.safetensors`` + ``config.json`` (+ ``tokenizer.json``), the tied matrix once.

    ``heads`` (named as in a checkpoint, :data:`HEADS`) are stored beside the network's tensors:
    a fine-tune from the folder starts them from what they learnt, as from the checkpoint.
    ``metadata``: facts about the training run, in the weights file's header (how it was trained,
    which the config does not say: ``vitbert.captioner.WRITES_KEY``).
    """
    folder = Path(folder)
    if not folder.is_dir():
        folder.mkdir(parents=True)
        folder.chmod(_SHARED_FOLDER_MODE)
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items() if k != TIED_KEY}
    state |= {k: v.detach().contiguous() for k, v in (heads or {}).items()}
    files = {WEIGHTS_FILE: safetensors_bytes(state, metadata),
             CONFIG_FILE: json.dumps(model.config.to_dict(), indent=2) + "\n"}
    if tokenizer_json is not None:
        files[TOKENIZER_FILE] = tokenizer_json
    for name, data in files.items():
        write_shared(folder / name, data)
    return folder


def build_model(stored: StoredModel, map_location: str | torch.device = "cpu") -> nn.Module:
    """The network ``stored.config`` describes (:func:`vitbert.models.build_network`), holding the
    stored weights (the load re-ties the decoder)."""
    model = build_network(stored.config)
    model.load_state_dict(stored.state_dict)
    return model.to(map_location)
