"""Why attention divides the scores by √d: the gate measurement and a toy model to train.

For q, k with unit-variance entries, ``q · k`` is a sum of d products of variance 1: its variance
is d. Without ``1/√d`` the scores spread as √d, so a wide head's softmax puts nearly all of its
weight on one key (the largest gate → 1) and its gradient ``p (1 − p)`` vanishes: the head is
frozen at initialisation. With the scale the score variance is 1 at every width.

The toy model is key–value recall with one attention layer of the project's
:class:`~vitbert.nn.Attention` (``scale=True`` / ``False``): a query token must find, among
``pairs`` (key + value) tokens, the one whose key matches, and read its value.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from vitbert.nn import Attention


def max_gate(d: int, scale: bool, num_keys: int = 64, trials: int = 2000, seed: int = 0) -> float:
    """Mean over trials of the largest of ``num_keys`` softmax gates, q, k ~ N(0, I_d)."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(trials, 1, d, generator=gen)
    k = torch.randn(trials, num_keys, d, generator=gen)
    scores = (q * k).sum(-1)  # (trials, num_keys)
    if scale:
        scores = scores / math.sqrt(d)
    return scores.softmax(-1).amax(-1).mean().item()


def make_recall(
    n: int, pairs: int = 8, symbols: int = 16, seed: int = 0
) -> tuple[Tensor, Tensor]:
    """Inputs (n, 1 + 2·pairs) = [query, keys…, values…] and labels (n,): the query's value.

    Keys are distinct within a row and the query is one of them; packing everything into one
    integer tensor lets the experiments' ordinary training loop batch it like images.
    """
    gen = torch.Generator().manual_seed(seed)
    keys = torch.rand(n, symbols, generator=gen).argsort(-1)[:, :pairs]  # distinct per row
    values = torch.randint(symbols, (n, pairs), generator=gen)
    which = torch.randint(pairs, (n,), generator=gen)
    rows = torch.arange(n)
    inputs = torch.cat((keys[rows, which][:, None], keys, values), dim=1)
    return inputs, values[rows, which]


class RecallModel(nn.Module):
    """Embed (query, key+value pairs) → LayerNorm → one Attention → read the query token.

    The q/k/v projection is initialised with std 1/√D, so that q and k have unit-variance
    entries (the assumption of the gate measurement) and the only difference between the two
    runs is the ``1/√Dh`` in the scores.
    """

    def __init__(self, dim: int = 256, symbols: int = 16, scale: bool = True) -> None:
        super().__init__()
        self.key_emb = nn.Embedding(symbols, dim)
        self.value_emb = nn.Embedding(symbols, dim)
        self.query_emb = nn.Embedding(symbols, dim)
        self.norm = nn.LayerNorm(dim)
        self.attn = Attention(dim, num_heads=1, scale=scale)
        nn.init.normal_(self.attn.qkv.weight, std=dim**-0.5)
        self.head = nn.Linear(dim, symbols)

    def forward(self, inputs: Tensor) -> Tensor:
        """inputs: (B, 1 + 2P) as made by :func:`make_recall`."""
        P = (inputs.shape[1] - 1) // 2
        query, keys, values = inputs[:, 0], inputs[:, 1:1 + P], inputs[:, 1 + P:]
        tokens = self.key_emb(keys) + self.value_emb(values)  # (B, P, D)
        x = torch.cat((self.query_emb(query)[:, None], tokens), dim=1)  # (B, 1 + P, D)
        out, _ = self.attn(self.norm(x))  # (B, 1 + P, D)
        return self.head(out[:, 0])  # (B, symbols), read at the query token
