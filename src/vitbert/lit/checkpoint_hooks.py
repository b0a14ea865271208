"""What a training checkpoint holds beside the module's weights, and how one is read back.

A mixin of :class:`vitbert.lit.module.MaskedLMModule`'s two checkpoint hooks, apart so the
module stays a short list of the parts it wires together: a checkpoint carries the tokenizer (as
JSON: it loads with ``torch.load(weights_only=True)``), and reading one restores the tokenizer
and the step the weights were trained to, and drops weights since removed
(:func:`vitbert.io.loadable_state`, which refuses to resume a run that trained them).
"""

from __future__ import annotations

from typing import Any

from vitbert.data.tokenizer import tokenizer_to_json
from vitbert.io import TOKENIZER_KEY, loadable_state, stored_tokenizer


class CheckpointHooks:
    """``on_save_checkpoint`` / ``on_load_checkpoint`` for a LightningModule with ``tokenizer``
    and ``trained_steps`` attributes (put it first among the bases, before LightningModule)."""

    tokenizer: Any
    trained_steps: int

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        if self.tokenizer is not None:
            checkpoint[TOKENIZER_KEY] = tokenizer_to_json(self.tokenizer)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.trained_steps = int(checkpoint.get("global_step", 0))
        self.tokenizer = stored_tokenizer(checkpoint, self.tokenizer)
        fitting = self._trainer is not None and self.trainer.state.fn == "fit"
        checkpoint["state_dict"] = loadable_state(checkpoint,
                                                  self.trainer.ckpt_path if fitting else None)
