"""The training module's step without a Trainer, for the objective tests.

``MaskedLMModule.training_step`` reads three things a fit provides: the tokenizer's [MASK] id,
the step and the run's length (``total_steps``, from the Trainer), and ``self.log_dict``. Here they
are given directly, and what the step logs is returned instead of logged, so a test can compare
the step's loss with the parts it is the sum of.
"""

from __future__ import annotations

from types import SimpleNamespace
from unittest import mock

from torch import Tensor


def training_step(module, batch: dict[str, Tensor], mask_token_id: int,
                  total_steps: int = 1) -> tuple[Tensor, dict[str, Tensor]]:
    """``module.training_step(batch, 0)`` as a fit runs it, at step 0 of ``total_steps``:
    (the loss it returns, what it logs by name, e.g. ``train/loss``)."""
    logged: dict[str, Tensor] = {}
    module.tokenizer = SimpleNamespace(mask_token_id=mask_token_id)
    length = mock.PropertyMock(return_value=total_steps)
    with mock.patch.object(type(module), "total_steps", length), \
            mock.patch.object(module, "log_dict", lambda values, **_: logged.update(values)):
        loss = module.training_step(batch, 0)
    return loss, logged
