"""The pseudo-log-likelihood of a caption given a photo: each content piece hidden in turn, the
rest in view (Salazar et al. 2020, "Masked Language Model Scoring").

A masked-language model has no left-to-right probability of a sentence; the sum of log p(piece)
over its pieces, each hidden once, stands in for it. Over the *content* pieces only (the function
words' are the grammar's), with the photo, it says how well the words the photo decides fit it:
a data set's binding swap tests may compare a caption with its swapped copy by it, and reranking
adds it to the contrastive score (:mod:`vitbert.decoding.rerank`).
"""

from __future__ import annotations

import torch
from torch import Tensor


@torch.no_grad()
def pseudo_log_likelihood(net, ids: Tensor, keep: Tensor, content: Tensor, mask_token_id: int,
                          image_features: Tensor | None, image_index: Tensor | None = None,
                          chunk: int = 1024) -> tuple[Tensor, list[Tensor]]:
    """Per caption, the sum of log p(piece) over its content pieces, each hidden in turn with the
    rest in view: (B,). Also, per caption, the log-probabilities (C_b, V) at each hidden piece,
    in position order (the fill-mask readings).

    ``image_features``: the photos the captions see (P, N, D_img), caption b shown photo
    ``image_index[b]`` (None: photo b); None: no image (text only).
    """
    row, col = content.nonzero(as_tuple=True)  # (M,) one sequence per hidden piece
    if image_index is None:  # P = B: caption b sees photo b
        image_index = torch.arange(len(ids), device=ids.device)
    total = torch.zeros(len(ids), device=ids.device)
    readings: list[list[Tensor]] = [[] for _ in range(len(ids))]
    for start in range(0, len(row), chunk):
        r, c = row[start:start + chunk], col[start:start + chunk]
        masked = ids[r].clone()
        masked[torch.arange(len(r)), c] = mask_token_id
        target = torch.zeros_like(masked, dtype=torch.bool)
        target[torch.arange(len(r)), c] = True
        logits = net(masked, keep[r], image_features, image_index[r], target_mask=target)  # (m, V)
        log_p = logits.float().log_softmax(-1)
        total.index_add_(0, r, log_p.gather(1, ids[r, c][:, None]).squeeze(1))
        for k, b in enumerate(r.tolist()):
            readings[b].append(log_p[k])
    return total, [torch.stack(x) if x else torch.zeros(0) for x in readings]
