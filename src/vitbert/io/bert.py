"""A pretrained BERT in and out: transformers' files read into the project's own text tower, and
that tower written back as a transformers ``BertForMaskedLM`` folder.

In BERT's layout (``TextTowerConfig.layout: bert``) the text tower is BERT tensor for tensor; only
the names differ, and BERT's separate query, key and value are our one fused ``qkv``:

    transformers (``bert.`` prefix or none)             ours
    embeddings.word_embeddings                          text.embeddings.word
    embeddings.position_embeddings                      text.embeddings.position  (max_len rows)
    embeddings.token_type_embeddings  [A, B]            text.embeddings.modality  [image, word]
    embeddings.LayerNorm                                text.embeddings.norm
    encoder.layer.{i}.attention.self.{query,key,value}  text.encoder.blocks.{i}.attn.qkv (stacked)
    encoder.layer.{i}.attention.output.dense            text.encoder.blocks.{i}.attn.proj
    encoder.layer.{i}.attention.output.LayerNorm        text.encoder.blocks.{i}.norm1
    encoder.layer.{i}.intermediate.dense                text.encoder.blocks.{i}.mlp.fc1
    encoder.layer.{i}.output.dense                      text.encoder.blocks.{i}.mlp.fc2
    encoder.layer.{i}.output.LayerNorm                  text.encoder.blocks.{i}.norm2
    cls.predictions.transform.{dense,LayerNorm}         mlm_head.{dense,norm}
    cls.predictions.bias                                mlm_head.decoder.bias  (weight: tied)

Words are BERT's segment A, image tokens its segment B. A folder without ``cls.predictions`` (a
sentence encoder such as all-MiniLM-L6-v2) leaves the MLM head at its initialisation, its decoder
tied; BERT's pooler is not used (our heads read the [CLS] row themselves).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import torch
from torch import Tensor, nn

from vitbert.io.files import (
    CheckpointError,
    StoredModel,
    load_tensors_file,
    safetensors_bytes,
    write_shared,
)
from vitbert.io.transfer import TransferReport, transfer_weights
from vitbert.models.config import TextTowerConfig

BERT_FILES = ("config.json", "model.safetensors", "pytorch_model.bin", "vocab.txt",
              "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
# BERT's module → ours, each with .weight and .bias: per block, then the rest; then single tensors.
BLOCK_NAMES = {"attention.output.dense": "attn.proj", "attention.output.LayerNorm": "norm1",
               "intermediate.dense": "mlp.fc1", "output.dense": "mlp.fc2",
               "output.LayerNorm": "norm2"}
MODULE_NAMES = {"embeddings.LayerNorm": "text.embeddings.norm",
                "cls.predictions.transform.dense": "mlm_head.dense",
                "cls.predictions.transform.LayerNorm": "mlm_head.norm"}
TENSOR_NAMES = {"embeddings.word_embeddings.weight": "text.embeddings.word.weight",
                "cls.predictions.bias": "mlm_head.decoder.bias"}
POSITIONS = "embeddings.position_embeddings.weight"
TOKEN_TYPES = "embeddings.token_type_embeddings.weight"


def bert_folder(source: str | Path) -> Path:
    """A local folder of transformers' BERT files, or the hub's copy of the model named
    ``source`` (downloaded once into the Hugging Face cache; an error offline)."""
    if Path(source).is_dir():
        return Path(source)
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(str(source), allow_patterns=list(BERT_FILES)))
    except Exception as error:  # offline, unknown name, no access: one line says the fix
        raise CheckpointError(
            f"text.pretrained {source}: no such folder, and the Hugging Face hub cannot give it "
            f"({type(error).__name__}); pass a folder with config.json and model.safetensors "
            f"(`make weights` writes weights/all-minilm-l6-v2)") from error


def text_tower_config(source: str | Path, text: TextTowerConfig) -> TextTowerConfig:
    """``text`` with the architecture the BERT at ``source`` has (its config.json): width, depth,
    heads, MLP width, LayerNorm epsilon, BERT's layout. ``max_len`` and ``dropout`` stay
    ``text``'s: a caption needs far fewer positions than BERT's 512."""
    folder = bert_folder(source)
    path = folder / "config.json"
    if not path.is_file():
        raise CheckpointError(f"{folder}: no config.json; a BERT folder holds transformers' "
                              f"config.json beside its weights")
    c = json.loads(path.read_text())
    if c.get("model_type") != "bert" or c.get("hidden_act", "gelu") != "gelu" or c.get(
            "position_embedding_type", "absolute") != "absolute":
        raise CheckpointError(f"{path}: a {c.get('model_type')} model with {c.get('hidden_act')} "
                              f"and {c.get('position_embedding_type')} positions; the text tower "
                              f"loads BERTs (model_type bert, gelu, absolute positions)")
    if text.max_len > c["max_position_embeddings"]:
        raise CheckpointError(f"text.max_len {text.max_len}: {path} has "
                              f"{c['max_position_embeddings']} positions; use at most that")
    return dataclasses.replace(
        text, dim=c["hidden_size"], depth=c["num_hidden_layers"],
        num_heads=c["num_attention_heads"], mlp_ratio=c["intermediate_size"] / c["hidden_size"],
        norm_eps=c["layer_norm_eps"], layout="bert", pretrained=str(source))


def read_bert_state(folder: Path) -> dict[str, Tensor]:
    """The tensors of a BERT folder (safetensors, or a ``pytorch_model.bin`` read with
    ``weights_only``), under BERT's names without the ``bert.`` prefix; old TF-converted files'
    LayerNorm ``gamma`` / ``beta`` as ``weight`` / ``bias``."""
    if (folder / "model.safetensors").is_file():
        from safetensors.torch import load_file

        state = load_file(folder / "model.safetensors")
    elif (folder / "pytorch_model.bin").is_file():
        state = load_tensors_file(folder / "pytorch_model.bin")
    else:
        raise CheckpointError(f"{folder}: no model.safetensors or pytorch_model.bin")
    return {key.removeprefix("bert.").replace("LayerNorm.gamma", "LayerNorm.weight")
            .replace("LayerNorm.beta", "LayerNorm.bias"): value for key, value in state.items()}


def _names(depth: int) -> dict[str, str]:
    """Every tensor's BERT name → ours, but the position and token-type tables and q, k, v."""
    modules = MODULE_NAMES | {f"encoder.layer.{i}.{theirs}": f"text.encoder.blocks.{i}.{ours}"
                              for i in range(depth) for theirs, ours in BLOCK_NAMES.items()}
    return TENSOR_NAMES | {f"{theirs}.{kind}": f"{ours}.{kind}" for theirs, ours in modules.items()
                           for kind in ("weight", "bias")}


def from_bert_names(state: dict[str, Tensor], text: TextTowerConfig) -> dict[str, Tensor]:
    """BERT's tensors (:func:`read_bert_state`) under our names (module doc); the ones we have no
    place for (the pooler) keep theirs, so a transfer names them as not used."""
    names = _names(text.depth)
    state = dict(state)
    ours = {names[key]: state.pop(key) for key in list(state) if key in names}
    if "cls.predictions.decoder.bias" in state:  # older files keep the bias on the decoder
        ours.setdefault("mlm_head.decoder.bias", state.pop("cls.predictions.decoder.bias"))
    state.pop("cls.predictions.decoder.weight", None)  # the word embedding, tied
    state.pop("embeddings.position_ids", None)  # a buffer of older files: 0, 1, 2, …
    if POSITIONS in state:
        ours["text.embeddings.position.weight"] = state.pop(POSITIONS)[:text.max_len]
    if TOKEN_TYPES in state:  # [A, B] → [image, word] = [B, A]
        types = state.pop(TOKEN_TYPES)
        ours["text.embeddings.modality.weight"] = types[[min(1, len(types) - 1), 0]]
    for i in range(text.depth):
        attention = f"encoder.layer.{i}.attention.self."
        for kind in ("weight", "bias"):
            parts = [state.pop(f"{attention}{x}.{kind}", None) for x in ("query", "key", "value")]
            if all(p is not None for p in parts):
                ours[f"text.encoder.blocks.{i}.attn.qkv.{kind}"] = torch.cat(parts)
    return ours | state


def to_bert_names(state: dict[str, Tensor], text: TextTowerConfig) -> dict[str, Tensor]:
    """Our text tower's and MLM head's tensors under ``BertForMaskedLM``'s names: the inverse of
    :func:`from_bert_names` (the tied decoder weight is not stored: transformers ties it)."""
    theirs = {ours: name for name, ours in _names(text.depth).items()}
    out = {("" if name.startswith("cls.") else "bert.") + name: state[ours]
           for ours, name in theirs.items()}
    out["bert." + POSITIONS] = state["text.embeddings.position.weight"]
    out["bert." + TOKEN_TYPES] = state["text.embeddings.modality.weight"][[1, 0]]
    for i in range(text.depth):
        for kind in ("weight", "bias"):
            q, k, v = state[f"text.encoder.blocks.{i}.attn.qkv.{kind}"].chunk(3)
            for name, value in (("query", q), ("key", k), ("value", v)):
                out[f"bert.encoder.layer.{i}.attention.self.{name}.{kind}"] = value
    return {name: value.detach().contiguous() for name, value in out.items()}


def load_text_weights(net: nn.Module, source: str | Path) -> TransferReport:
    """Copy the BERT at ``source`` into ``net``'s (a ``VitBert``'s) text tower and MLM head, in
    place; every tensor must fit (the config came from the same folder:
    :func:`text_tower_config`) and the vocabulary must be the BERT's own."""
    folder = bert_folder(source)
    state = from_bert_names(read_bert_state(folder), net.config.text)
    words = state.get("text.embeddings.word.weight")
    if words is not None and len(words) != net.config.vocab_size:
        raise CheckpointError(f"{folder}: a vocabulary of {len(words)} pieces, and the data's "
                              f"tokenizer has {net.config.vocab_size}: use the BERT's own "
                              f"tokenizer (leave data.tokenizer unset)")
    text_side = nn.ModuleDict({"text": net.text, "mlm_head": net.mlm_head})  # our names, as is
    return transfer_weights(text_side, StoredModel(None, state, None, str(folder)), strict=True)


def write_bert_folder(net: nn.Module, tokenizer, folder: str | Path) -> Path:
    """``net``'s (a ``VitBert``'s) text tower and MLM head as a transformers ``BertForMaskedLM``
    folder (config.json, model.safetensors, the tokenizer's files): what it answers from text
    alone, ``AutoModelForMaskedLM.from_pretrained(folder)`` answers too."""
    text = net.config.text
    if text.layout != "bert":
        raise CheckpointError(f"a {text.layout} text tower is not BERT's layout; only a tower "
                              f"with text.layout: bert (text.pretrained) is a BertForMaskedLM")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    config = {"architectures": ["BertForMaskedLM"], "model_type": "bert",
              "vocab_size": net.config.vocab_size, "hidden_size": text.dim,
              "num_hidden_layers": text.depth, "num_attention_heads": text.num_heads,
              "intermediate_size": round(text.dim * text.mlp_ratio), "hidden_act": "gelu",
              "hidden_dropout_prob": text.dropout, "attention_probs_dropout_prob": text.dropout,
              "max_position_embeddings": text.max_len, "type_vocab_size": 2,
              "layer_norm_eps": text.norm_eps, "pad_token_id": net.config.pad_token_id,
              "tie_word_embeddings": True}
    write_shared(folder / "config.json", json.dumps(config, indent=2) + "\n")
    write_shared(folder / "model.safetensors",
                 safetensors_bytes(to_bert_names(net.state_dict(), text)))
    tokenizer.save_pretrained(str(folder))
    return folder
