"""Reading the model's output, in one place: the words it guesses at a [MASK], and the captions it
writes.

- :mod:`vitbert.decoding.guesses`: top-k guesses at each [MASK] (special tokens never offered)
  and the prediction records shared by ``FillMask``, ``train.py predict`` and the printed
  validation examples.
- :mod:`vitbert.decoding.generate`: captions, left to right under the seq2seq mask (greedy,
  beam search and sampling, with a key/value cache) or by Mask-Predict from an MLM-only model.
- :mod:`vitbert.decoding.rerank`: sampled captions, reranked by the contrastive score.
"""

from vitbert.decoding.generate import (
    CaptionTokens,
    Generated,
    beam_search,
    greedy,
    mask_predict,
    sample,
)
from vitbert.decoding.guesses import (
    fill,
    guesses,
    prediction_records,
    show_targets_as_mask,
    special_token_ids,
)
from vitbert.decoding.rerank import rerank, sample_and_rerank

__all__ = [
    "CaptionTokens",
    "Generated",
    "beam_search",
    "fill",
    "greedy",
    "guesses",
    "mask_predict",
    "prediction_records",
    "rerank",
    "sample",
    "sample_and_rerank",
    "show_targets_as_mask",
    "special_token_ids",
]
