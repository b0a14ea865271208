"""Whole models in and out: load one to predict, export one to share, start a run from one."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from vitbert.data.tokenizer import tokenizer_from_json, tokenizer_to_json
from vitbert.io.bert import load_text_weights, write_bert_folder
from vitbert.io.files import (
    HEADS,
    TIED_KEY,
    TOKENIZER_FILE,
    WEIGHTS_FILE,
    CheckpointError,
    StoredModel,
    build_model,
    read_checkpoint,
    write_exported,
)
from vitbert.io.timm import load_image_weights
from vitbert.io.transfer import transfer_weights
from vitbert.models.multimodal import VitBert

BERT_SUBFOLDER = "bert"  # an export's text tower as transformers reads it (BERT layout only)


def load_model(path: str | Path, map_location: str | torch.device = "cpu"):
    """(model in eval mode, tokenizer) from a ``.ckpt`` or an exported folder."""
    return model_of(read_checkpoint(path), path, map_location)


def model_of(stored: StoredModel, path: str | Path, map_location: str | torch.device = "cpu"):
    """(model in eval mode, tokenizer) of weights already read from ``path`` (named in errors):
    :func:`load_model` for a caller that also reads the stored heads, without a second read."""
    if stored.tokenizer_json is None:
        raise CheckpointError(
            f"{path}: holds no tokenizer. Checkpoints written by scripts/train.py carry one; "
            f"for an exported folder, put its {TOKENIZER_FILE} beside {WEIGHTS_FILE}."
        )
    try:
        model = build_model(stored, map_location)
    except (ValueError, TypeError, KeyError, RuntimeError, OSError) as error:
        # It passed the format checks but does not build a model (a hand-edited config.json,
        # weights of another architecture): still not a usable vitbert checkpoint.
        raise CheckpointError(f"{path}: not a loadable vitbert checkpoint "
                              f"({type(error).__name__}: {error})") from error
    return model.eval(), tokenizer_from_json(stored.tokenizer_json)


def load_network(path: str | Path, map_location: str | torch.device = "cpu") -> VitBert:
    """The network of a ``.ckpt`` or an exported folder, without its tokenizer (:func:`load_model`
    gives both); never loads the timm weights its config names."""
    return build_model(read_checkpoint(path), map_location)


def export(checkpoint: str | Path, out: str | Path, metadata: dict[str, str] | None = None
           ) -> Path:
    """Write the shareable folder: safetensors weights (the network and every trained head, and
    ``metadata`` in the header), config.json and tokenizer.json."""
    return export_and_describe(checkpoint, out, metadata)[0]


def export_and_describe(checkpoint: str | Path, out: str | Path,
                        metadata: dict[str, str] | None = None) -> tuple[Path, str]:
    """:func:`export`, and a line saying what went into the folder (scripts/export.py prints
    it). A text tower in BERT's layout is also written as a transformers ``BertForMaskedLM``
    folder, ``<out>/bert`` (:func:`vitbert.io.bert.write_bert_folder`): a BERT fine-tuned here
    goes back to transformers."""
    stored = read_checkpoint(checkpoint)
    model, tokenizer = model_of(stored, checkpoint)
    folder = write_exported(model, out, tokenizer_to_json(tokenizer), stored.heads, metadata)
    contents = _export_contents(model, stored)
    if model.config.text.layout == "bert":
        bert = write_bert_folder(model, tokenizer, folder / BERT_SUBFOLDER)
        contents += f"; the text tower as a transformers BertForMaskedLM in {bert}"
    return folder, contents


def _export_contents(model: VitBert, stored: StoredModel) -> str:
    """"the network (N tensors), word_head (2 tensors)", and what the checkpoint held that was
    left out, by name: nothing is dropped without a word."""
    network = [name for name in model.state_dict() if name != TIED_KEY]  # the tied one once
    parts = [f"the network ({len(network)} tensors)"]
    for head in HEADS:
        if count := sum(name.startswith(head + ".") for name in stored.heads):
            parts.append(f"{head} ({count} tensors)")
    line = ", ".join(parts)
    if stored.ignored:
        line += (f"; left out (not part of the model, nothing reads them): "
                 f"{', '.join(stored.ignored)}")
    return line


def initialize(net: VitBert, init_from: str | Path | None = None, tokenizer=None,
               heads: dict[str, nn.Module] | None = None) -> str | None:
    """The weights a fresh run starts from, and a report of what was loaded (None: nothing).

    ``init_from`` (a ``.ckpt`` or exported folder) gives every weight it can, rows matched by
    token text, into ``net`` and into the training ``heads`` this run trains (name → head); the
    report names every tensor copied, not used, or left as initialised.
    Otherwise ``net.config.image.pretrained`` (timm name or file) gives the image tower's and
    ``net.config.text.pretrained`` (a BERT folder or hub name) the text tower's. A
    resumed run, or a model loaded to predict, takes its weights from its own file.
    """
    if init_from:
        report = transfer_weights(net, read_checkpoint(init_from), tokenizer, heads=heads)
        return f"Fine-tuning {report}"
    image, text = net.config.image.pretrained, net.config.text.pretrained
    reports = ([f"Image tower {load_image_weights(net.image_tower, image)}"] if image else []) + (
        [f"Text tower {load_text_weights(net, text)}"] if text else [])
    return "\n".join(reports) or None
