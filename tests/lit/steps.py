"""The training module's step without a Trainer, for the objective tests.

``MaskedLMModule.training_step`` reads two things a fit provides: the tokenizer's [MASK] id and
``self.log_dict``. Here the first is given directly, and what the step logs is returned instead
of logged, so a test can compare the step's loss with the parts it is the sum of.
"""

from __future__ import annotations

from types import SimpleNamespace
from unittest import mock

from torch import Tensor


def training_step(module, batch: dict[str, Tensor], mask_token_id: int
                  ) -> tuple[Tensor, dict[str, Tensor]]:
    """``module.training_step(batch, 0)`` as a fit runs it: (the loss it returns, what it logs
    by name, e.g. ``train/loss``)."""
    logged: dict[str, Tensor] = {}
    module.tokenizer = SimpleNamespace(mask_token_id=mask_token_id)
    with mock.patch.object(module, "log_dict", lambda values, **_: logged.update(values)):
        loss = module.training_step(batch, 0)
    return loss, logged
