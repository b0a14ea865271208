"""Does the model bind what it sees to the words it fills? Swap tests (ARO, Yuksekgonul et al.
2023) on the shapes data, whose captions say which word belongs to which object.

For each picture, its caption against *negatives* (:func:`vitbert.shapes.captions.binding_swaps`):
the same caption with the two colours swapped, the two shapes swapped, or the relation turned
("a small blue circle left of a large red square" for "a small red circle left of a large blue
square"). A model that reads the picture as a bag of words cannot tell them apart; one that binds
prefers the true caption. Chance is 50%. Three scores, each the share of (caption, negative)
pairs the true one wins:

- ``pll``: the pseudo-log-likelihood of the caption's content pieces with the photo (each hidden
  in turn, the rest in view; Salazar et al. 2020), true against negative. Also ``pll_text``, with
  no image: what the words alone prefer (a swap that breaks the grammar is rejected by the text
  alone; the photo's part is ``pll`` minus ``pll_text``).
- ``fill``: fill-mask binding: in the *true* caption, each word the negative changed is hidden
  in turn, and the true word must score above the negative's word there (a colour hidden where
  the picture holds two colours: the right object's colour against the other object's).

:class:`BindingEvaluation` runs them as a callback a config lists (``trainer.callbacks``);
``scripts/analyze.py --binding`` runs them on any checkpoint trained on this data.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence

import numpy as np
import torch
from torch import Tensor

from vitbert.data.masking import STOP_WORDS
from vitbert.decoding.likelihood import pseudo_log_likelihood
from vitbert.lit.evaluation import SplitEvaluation, images_and_references
from vitbert.shapes.captions import binding_swaps

SwapMaker = Callable[[str], list[tuple[str, str]]]  # caption → [(kind, negative caption), …]


def content_pieces(tokenizer, captions: Sequence[str], max_length: int
                   ) -> tuple[Tensor, Tensor, Tensor]:
    """Tokenised captions: ids (B, T), attention mask (B, T) bool, content (B, T) bool (the
    pieces of words outside the function words, as the training batches mark them)."""
    enc = tokenizer(list(captions), padding="longest", truncation=True, max_length=max_length,
                    return_tensors="pt", return_token_type_ids=False)
    content = torch.zeros_like(enc["input_ids"], dtype=torch.bool)
    for b, caption in enumerate(captions):
        for pos, w in enumerate(enc.word_ids(b)):
            if w is not None:
                span = enc.word_to_chars(b, w)
                content[b, pos] = caption[span.start:span.end].lower() not in STOP_WORDS
    return enc["input_ids"], enc["attention_mask"].bool(), content


def _changed_words(true: str, negative: str) -> list[tuple[int, str, str]]:
    """(word index, true word, negative's word) where two captions of as many words differ."""
    a, b = true.split(), negative.split()
    if len(a) != len(b):
        return []
    return [(i, x, y) for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y]


@torch.no_grad()
def binding_scores(net, tokenizer, images: Tensor, captions: Sequence[Sequence[str]],
                   make: SwapMaker = binding_swaps, max_length: int = 64,
                   batch_pictures: int = 32) -> dict[str, float]:
    """The swap tests over pictures ``images`` (P, 3, S, S) uint8, ``captions[p]`` the captions
    of picture p (every one is tested: a photo with five captions gives five sets of pairs).

    Returns ``{score}_{kind}`` and ``{score}`` (all kinds pooled) for ``pll``, ``pll_text``,
    and ``fill``, each a share in [0, 1] (ties count a half), and
    ``pairs_{kind}``, how many (caption, negative) pairs each share is over.
    """
    was_training = net.training
    net.eval()
    device = next(net.parameters()).device
    vocab = tokenizer.get_vocab()  # a fresh dict on every call: once here
    wins: dict[tuple[str, str], list[float]] = defaultdict(list)  # (score, kind) → wins
    for start in range(0, len(images), batch_pictures):
        texts, photo, kinds, truth_of = [], [], [], []
        for p, picture_captions in enumerate(captions[start:start + batch_pictures]):
            for caption in picture_captions:
                truth = len(texts)
                for kind, text in [(None, caption), *make(caption)]:
                    texts.append(text)
                    photo.append(p)
                    kinds.append(kind)
                    truth_of.append(truth)
        ids, keep, content = (t.to(device) for t in content_pieces(tokenizer, texts, max_length))
        pixels = images[start:start + batch_pictures].to(device)
        index = torch.tensor(photo, device=device)
        mask_id = tokenizer.mask_token_id
        features = net.image_features(pixels)  # the tower once for the batch's pictures
        pll, fills = pseudo_log_likelihood(net, ids, keep, content, mask_id, features, index)
        pll_text, _ = pseudo_log_likelihood(net, ids, keep, content, mask_id, None)
        hidden_at = {}  # per true caption: its one-piece content words' readings
        for n, kind in enumerate(kinds):
            if kind is None:
                hidden_at[n] = _single_piece_words(tokenizer, texts[n], content[n])
                continue
            t = truth_of[n]
            for score, values in (("pll", pll), ("pll_text", pll_text)):
                wins[score, kind].append(_win(values[t], values[n]))
            for log_p, right, wrong in _fill_readings(vocab, texts[t], texts[n], hidden_at[t],
                                                      fills[t]):
                wins["fill", kind].append(_win(log_p[right], log_p[wrong]))
    net.train(was_training)
    figures = {}
    for score in ("pll", "pll_text", "fill"):
        pooled = []
        for (name, kind), values in sorted(wins.items()):
            if name == score:
                figures[f"{score}_{kind}"] = float(np.mean(values))
                pooled += values
        if pooled:
            figures[score] = float(np.mean(pooled))
    figures |= {f"pairs_{kind}": float(len(v)) for (name, kind), v in wins.items()
                if name == "pll"}
    return figures


def _fill_readings(vocab: dict[str, int], true: str, negative: str, hidden_at: dict[int, int],
                   fills: Tensor):
    """For each word the negative changed (a one-piece content word in both): the true caption's
    log-probabilities where it is hidden (V,), the true word's id and the negative's.
    ``hidden_at``: :func:`_single_piece_words` of the true caption."""
    for word_index, right, wrong in _changed_words(true, negative):
        k = hidden_at.get(word_index)
        right, wrong = vocab.get(right.lower()), vocab.get(wrong.lower())
        if k is not None and right is not None and wrong is not None:
            yield fills[k], right, wrong


def _single_piece_words(tokenizer, caption: str, content: Tensor) -> dict[int, int]:
    """Whitespace word index → the index of its piece among the caption's content pieces, for
    the content words that are one piece (a word of several pieces has no one reading)."""
    enc = tokenizer(caption, return_token_type_ids=False)
    starts = {}
    offset = 0
    for i, word in enumerate(caption.split()):
        offset = caption.index(word, offset)
        starts[offset] = (i, len(word))
        offset += len(word)
    order = {pos: k for k, pos in enumerate(content.nonzero().squeeze(1).tolist())}
    pieces: dict[int, list[int]] = defaultdict(list)
    for pos, w in enumerate(enc.word_ids()):
        if w is not None:
            pieces[w].append(pos)
    found = {}
    for w, positions in pieces.items():
        span = enc.word_to_chars(w)
        word = starts.get(span.start)
        if (word is not None and word[1] == span.end - span.start and len(positions) == 1
                and positions[0] in order):
            found[word[0]] = order[positions[0]]
    return found


def _win(true: Tensor, negative: Tensor) -> float:
    """1 when the true caption's score is higher, 0 when lower, a half when equal."""
    return 0.5 if bool(true == negative) else float(true > negative)


class BindingEvaluation(SplitEvaluation):
    """The swap tests at the end of each validation (a fixed sample of ``num_images`` pictures,
    every caption of each) and test (every picture of the split), logged as
    ``{stage}/binding_{score}[_{kind}]``; ``every_n_epochs`` as in
    :class:`vitbert.lit.evaluation.SplitEvaluation`. A config lists it::

        trainer:
          callbacks:
            - class_path: vitbert.shapes.BindingEvaluation
              init_args: {num_images: 200}

    The tests are the same on every process under DDP, and each process runs all of them.
    """

    prefix = "binding_"

    def __init__(self, num_images: int = 200, batch_pictures: int = 32,
                 every_n_epochs: int = 1) -> None:
        super().__init__(num_images, every_n_epochs)
        self.batch_pictures = batch_pictures

    def figures(self, trainer, pl_module, dataset, limit: int | None) -> dict[str, float]:
        _, firsts, captions = images_and_references(dataset, limit)
        images = torch.stack([dataset[i]["image"] for i in firsts])  # (P, 3, S, S)
        return binding_scores(pl_module.net, pl_module.tokenizer, images, captions,
                              binding_swaps, trainer.datamodule.max_length, self.batch_pictures)
