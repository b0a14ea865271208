"""Does the model bind what it sees to the words it fills? Swap tests (ARO, Yuksekgonul et al.
2023), on any captions.

For each picture, its caption against *negatives*: the same caption with two words swapped
between the things it names ("a small blue circle left of a large red square" for "a small red
circle left of a large blue square") or a word replaced by its opposite. A model that reads the
picture as a bag of words cannot tell them apart; one that binds prefers the true caption.
Chance is 50%. Three scores, each the share of (caption, negative) pairs the true one wins:

- ``pll``: the pseudo-log-likelihood of the caption's content pieces with the photo (each hidden
  in turn, the rest in view; Salazar et al. 2020), true against negative. Also ``pll_text``, with
  no image: what the words alone prefer (a swap that breaks the grammar is rejected by the text
  alone; the photo's part is ``pll`` minus ``pll_text``).
- ``fill``: fill-mask binding: in the *true* caption, each word the negative changed is hidden
  in turn, and the true word must score above the negative's word there (a colour hidden where
  the picture holds two colours: the right object's colour against the other object's).

The negatives come from the data: a data source may say how to make them (``binding_swaps``:
caption → ``[(kind, negative caption), …]``; the shapes data swaps the two colours, the two
shapes, and a relation for its opposite); otherwise two content words are swapped where every
word pair the swap makes is one the training captions use (:mod:`vitbert.lit.negatives`).
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
from vitbert.lit.negatives import SwapNegatives

SwapMaker = Callable[[str], list[tuple[str, str]]]  # caption → [(kind, negative caption), …]
GENERIC_KIND = "words"


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


def generic_swaps(tokenizer, swaps: SwapNegatives, max_length: int, seed: int = 0
                  ) -> SwapMaker:
    """Negatives for any captions: two content words swapped where every word pair the swap
    makes is one the training captions use (``swaps``), drawn per caption from ``seed`` and the
    caption's text, so the same at every evaluation."""

    def make(caption: str) -> list[tuple[str, str]]:
        ids, _, content = content_pieces(tokenizer, [caption], max_length)
        generator = torch.Generator().manual_seed(seed * 1_000_003 + hash_text(caption))
        negative, has = swaps(ids, content, generator)
        if not has[0]:
            return []
        return [(GENERIC_KIND, tokenizer.decode(negative[0], skip_special_tokens=True))]

    return make


def swap_maker(source, tokenizer, training_swaps: Callable[[], SwapNegatives], max_length: int
               ) -> SwapMaker:
    """The data source's own negatives (``DataSource.binding_swaps``) where it makes them, else
    :func:`generic_swaps` over ``training_swaps()``, the swaps the training captions allow
    (asked for only then: building them reads every training caption)."""
    own = source.binding_swaps()
    if own is not None:
        return own
    return generic_swaps(tokenizer, training_swaps(), max_length)


def hash_text(text: str) -> int:
    """A hash of a string that is the same in every process (``hash`` is salted per process)."""
    return int.from_bytes(text.encode()[:64].ljust(8, b"\0")[-8:], "little") % (2**31)


def _changed_words(true: str, negative: str) -> list[tuple[int, str, str]]:
    """(word index, true word, negative's word) where two captions of as many words differ."""
    a, b = true.split(), negative.split()
    if len(a) != len(b):
        return []
    return [(i, x, y) for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y]


@torch.no_grad()
def binding_scores(net, tokenizer, images: Tensor, captions: Sequence[Sequence[str]],
                   make: SwapMaker, max_length: int = 64,
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
        photos = net.photos(pixels, index)  # the tower once for the batch's pictures
        pll, fills = pseudo_log_likelihood(net, ids, keep, content, mask_id, photos)
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
    ``{stage}/binding_{score}[_{kind}]``; off (``num_images`` 0) unless a config asks for them;
    ``every_n_epochs`` as in :class:`vitbert.lit.evaluation.SplitEvaluation`.

    The negatives are the data source's own (``binding_swaps``) where it has them, else
    :func:`generic_swaps` over the word pairs of the training captions (built once per
    tokenizer), or, for a source that streams its training set, of the captions tested (a
    streamed training set is never read for them). The tests are the same on every process
    under DDP, and each process runs all of them.
    """

    prefix = "binding_"

    def __init__(self, num_images: int = 0, batch_pictures: int = 32,
                 every_n_epochs: int = 1) -> None:
        super().__init__(num_images, every_n_epochs)
        self.batch_pictures = batch_pictures
        self._swaps: tuple[object, SwapNegatives] | None = None  # (tokenizer, its swaps)

    def figures(self, trainer, pl_module, dataset, limit: int | None) -> dict[str, float]:
        datamodule = trainer.datamodule
        _, firsts, captions = images_and_references(dataset, limit)
        images = torch.stack([dataset[i]["image"] for i in firsts])  # (P, 3, S, S)

        def training_swaps() -> SwapNegatives:
            tested = [caption for picture in captions for caption in picture]
            return self.training_swaps(datamodule, pl_module.tokenizer, tested)

        make = swap_maker(datamodule.source, pl_module.tokenizer, training_swaps,
                          datamodule.max_length)
        return binding_scores(pl_module.net, pl_module.tokenizer, images, captions, make,
                              datamodule.max_length, self.batch_pictures)

    def training_swaps(self, datamodule, tokenizer, tested: list[str]) -> SwapNegatives:
        """The swaps the training captions allow (``tested``, the captions under test, for a
        source that streams its training set), built once per tokenizer."""
        if self._swaps is None or self._swaps[0] is not tokenizer:
            captions = datamodule.train_captions()
            self._swaps = (tokenizer, SwapNegatives.from_captions(
                tokenizer, tested if captions is None else captions))
        return self._swaps[1]
