"""Moved to :mod:`vitbert.io`; these names are kept so that older imports keep working."""

from vitbert.io import (
    TOKENIZER_KEY,
    CheckpointError,
    StoredModel,
    TransferReport,
    export,
    load_model,
    read_checkpoint,
    transfer_weights,
)

__all__ = [
    "TOKENIZER_KEY",
    "CheckpointError",
    "StoredModel",
    "TransferReport",
    "export",
    "load_model",
    "read_checkpoint",
    "transfer_weights",
]
