"""Stored models, in one place: every read and write of a model's weights goes through here.

* :mod:`.files`: the file names, :func:`read_checkpoint` (a ``.ckpt`` or an exported folder,
  unpickled with ``weights_only=True``), :func:`write_exported`.
* :mod:`.transfer`: :func:`transfer_weights`, the one way weights move into a model that may
  differ from the one that wrote them, and its :class:`TransferReport`.
* :mod:`.timm`: pretrained timm ViT weights renamed for the image tower.
* :mod:`.load`: :func:`load_model` (to predict), :func:`export` (the network and the training
  heads), :func:`initialize` (the start of a fresh run: the network and the heads).
"""

from vitbert.io.files import (
    CONFIG_FILE,
    TIED_KEY,
    TIED_SOURCE,
    TOKENIZER_FILE,
    TOKENIZER_KEY,
    WEIGHTS_FILE,
    CheckpointError,
    StoredModel,
    is_head_weight,
    not_a_checkpoint,
    read_checkpoint,
    stored_tokenizer,
    write_exported,
)
from vitbert.io.load import (
    export,
    export_and_describe,
    initialize,
    load_model,
    load_network,
)
from vitbert.io.timm import load_image_weights
from vitbert.io.transfer import TransferReport, transfer_weights

__all__ = [
    "CONFIG_FILE",
    "TIED_KEY",
    "TIED_SOURCE",
    "TOKENIZER_FILE",
    "TOKENIZER_KEY",
    "WEIGHTS_FILE",
    "CheckpointError",
    "StoredModel",
    "TransferReport",
    "export",
    "export_and_describe",
    "initialize",
    "is_head_weight",
    "load_image_weights",
    "load_model",
    "load_network",
    "not_a_checkpoint",
    "read_checkpoint",
    "stored_tokenizer",
    "transfer_weights",
    "write_exported",
]
