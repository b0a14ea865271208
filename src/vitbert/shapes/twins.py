"""Twin photos and the twin contrast: a hidden word must be likelier under its own photo than
under its twin's.

A caption's *twins* are the photos of other captions that use the same content words with two
of them exchanged: "a small red circle left of a large blue square" and "a small blue circle
left of a large red square" name the same things; only what is bound to what differs. No word
list decides what may be exchanged: the training captions themselves do (two captions of
different photos whose content words, in order, differ by one exchange), as NegCLIP's swaps are
made, but from photos that exist. Content words are the words outside
:data:`vitbert.data.masking.STOP_WORDS`, split as BERT's pre-tokenizer splits (runs of letters and
digits; each punctuation mark alone), so the collator finds a word's pieces by their offsets.

The data side: :class:`TwinPhotos` gives each training item its twins' photos and
:func:`collate_twins` draws one per caption into the batch (the shapes source plugs both in,
``ShapesSource(twin_photos=True)``). The loss, :class:`TwinContrast`: shown the caption with a
word of the exchange hidden, a model that fills by elimination (the colour the caption has not
named yet) answers the same under both photos; one that binds answers each photo differently.
The masked-language loss never asks for that difference; this loss does, at each hidden piece of
an exchanged word, under the batch's MLM mask:

    loss = softplus(s_twin - s_own),  s = z_true - logsumexp(z_other)

where z are the logits at the hidden piece and s the log-odds of the true piece. Log-odds, not
log-probabilities: once the true piece is near-certain under the own photo, log p saturates near 0
and the contrast stops teaching, while the log-odds keep a margin to push. At chance (the same
answer under both photos) the loss is ln 2.

The contrast trains the neighbour lookup (:mod:`vitbert.shapes.model`), the tower it reads and
the head, not the joint encoder: its gradient stops at the encoder's word rows. Why: the encoder
cannot bind (a two-step circuit its blocks do not find), so what the contrast taught it was to
stop filling by elimination, and elimination is how a caption written left to right names its
second object (its colour comes before anything that says which object it is); with the encoder
out of its reach, captions and binding both held (docs/binding.md). Cost: one extra pass of the
joint encoder over the captions with a hidden exchanged word, each with both photos, and one
image-tower pass over the twins' photos.
"""

from __future__ import annotations

import contextlib
import re
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.data import Dataset

from vitbert.data.masking import IGNORE_INDEX, STOP_WORDS
from vitbert.lit.objectives import Batch, Objective, TrainingStep, caption_photos
from vitbert.models import ConfigError, Photos, VitBert

# Item fields: a caption's twins' photos and the spans of the words each exchanges; batch
# fields: the K twin photos drawn, which of them each caption sees (-1: none), and where its
# exchanged words are.
TWIN_IMAGES, TWIN_SPANS = "twin_images", "twin_spans"
TWIN_INDEX, TWIN_MASK = "twin_index", "twin_mask"
TWIN_KEYS = (TWIN_IMAGES, TWIN_INDEX, TWIN_MASK)

WORD = re.compile(r"\w+|[^\w\s]")
MAX_TWINS = 4  # photos an item carries; the collator draws one (more cost loading, teach little)


def content_words(caption: str) -> list[tuple[str, int, int]]:
    """(word lowercased, start, end) for each content word of ``caption``, in order."""
    return [(m.group().lower(), m.start(), m.end()) for m in WORD.finditer(caption)
            if m.group().lower() not in STOP_WORDS]


def find_twins(captions: Sequence[str], photos: Sequence[int]
               ) -> list[list[tuple[int, tuple[int, int]]]]:
    """For each caption, its twins: ``(other caption, (i, j))`` where the other caption is of
    another photo and its content words are this one's with words ``i`` and ``j`` (content-word
    places, i < j, different words) exchanged.

    Captions are grouped by their bag of content words first, so the work is the sum of the
    squared group sizes, not the square of the data set.
    """
    words = [tuple(w for w, _, _ in content_words(c)) for c in captions]
    groups: dict[tuple[str, ...], list[int]] = defaultdict(list)
    for k, w in enumerate(words):
        if len(w) >= 2:
            groups[tuple(sorted(w))].append(k)
    twins: list[list[tuple[int, tuple[int, int]]]] = [[] for _ in captions]
    for members in groups.values():
        for a_pos, a in enumerate(members):
            for b in members[a_pos + 1:]:
                if photos[a] == photos[b]:
                    continue
                places = [i for i, (x, y) in enumerate(zip(words[a], words[b], strict=True))
                          if x != y]
                if len(places) == 2:  # same bag, two places differ: they are exchanged
                    twins[a].append((b, (places[0], places[1])))
                    twins[b].append((a, (places[0], places[1])))
    return twins


class TwinPhotos(Dataset):
    """A caption data set whose items also carry their twins' photos (up to :data:`MAX_TWINS`)
    and, for each, the character spans of the two exchanged words in the item's own caption:
    ``twin_images`` uint8 (K, 3, S, S), ``twin_spans`` [(start, end), (start, end)] × K. Items
    without a twin carry K = 0. The collator draws one twin per caption (:func:`collate_twins`).
    """

    def __init__(self, dataset: Dataset) -> None:
        self.dataset = dataset
        self.captions = dataset.captions
        self.rows = dataset.rows
        self.twins = find_twins(self.captions, [int(r) for r in self.rows])

    def __len__(self) -> int:
        return len(self.dataset)

    def share(self) -> float:
        """The share of captions with at least one twin."""
        return sum(bool(t) for t in self.twins) / max(len(self.twins), 1)

    def __getitem__(self, i: int) -> dict[str, Any]:
        item = self.dataset[i]
        twins = self.twins[i][:MAX_TWINS]
        spans = content_words(self.captions[i])
        item[TWIN_SPANS] = [[spans[p][1:] for p in places] for _, places in twins]
        images = [self.dataset[other]["image"] for other, _ in twins]
        item[TWIN_IMAGES] = (torch.stack(images) if images
                             else torch.zeros(0, *item["image"].shape, dtype=torch.uint8))
        return item


def collate_twins(items: list[dict[str, Any]], encoding: Any, rngs: list[np.random.Generator],
                  image: Callable[[Any], Tensor]) -> dict[str, Tensor]:
    """The batch fields of :class:`TwinPhotos` items (``MLMCollator``'s ``extra``): one twin
    photo drawn per caption that has any, with the caption's own generator after its mask (so
    the masks are those of a batch without twins): ``twin_images`` uint8 (K, 3, S, S),
    ``twin_index`` long (B,) the caption's twin among them or -1, and ``twin_mask`` bool (B, T)
    the pieces of the two words its twin's caption exchanges. ``image`` is the collator's
    treatment of a photo (the training crop)."""
    B, T = encoding["input_ids"].shape
    twin_index = np.full(B, -1, dtype=np.int64)
    twin_mask = np.zeros((B, T), dtype=bool)
    images = []
    for b, (item, rng) in enumerate(zip(items, rngs, strict=True)):
        if not len(item[TWIN_IMAGES]):
            continue
        k = int(rng.integers(len(item[TWIN_IMAGES])))
        twin_index[b] = len(images)
        images.append(image(item[TWIN_IMAGES][k]))
        for pos, w in enumerate(encoding.word_ids(b)):
            if w is not None:  # a piece of a word inside one of the exchanged words' spans
                span = encoding.word_to_chars(b, w)
                twin_mask[b, pos] = any(start <= span.start and span.end <= end
                                        for start, end in item[TWIN_SPANS][k])
    empty = torch.zeros(0, *items[0]["image"].shape, dtype=torch.uint8)
    return {TWIN_IMAGES: torch.stack(images) if images else empty,
            TWIN_INDEX: torch.from_numpy(twin_index),
            TWIN_MASK: torch.from_numpy(twin_mask)}


# ----------------------------------------------------------------------------- the loss


class TwinContrast(Objective):
    """The twin contrast (module doc) in the batches the masked-language objective trains on
    (not in claimed ones: in seq2seq batches too, it bound less). Needs the neighbour lookup
    (``vitbert.shapes.BindingLevers``) and batches that carry twins
    (``ShapesSource(twin_photos=True)``)."""

    name = "twin_loss"

    def build(self, net: VitBert) -> dict[str, nn.Module]:
        if net.reader is None:
            raise ConfigError("the twin contrast trains the neighbour lookup, which this model "
                              "lacks: add the extension vitbert.shapes.BindingLevers to "
                              "model.net (lookup_heads 4), or drop TwinContrast")
        return {}

    def prepare(self, datamodule, tokenizer) -> None:
        if not getattr(getattr(datamodule, "source", None), "twin_photos", False):
            raise ConfigError("the twin contrast reads each caption's twin photo: set "
                              "--data.source.init_args.twin_photos true (ShapesSource), or drop "
                              "TwinContrast from model.objectives")

    def __call__(self, net: VitBert, step: TrainingStep) -> Tensor | None:
        if step.claimed_by is not None:
            return None
        return twin_contrast_loss(net, step.batch, step.tower)


def log_odds(logits: Tensor, target: Tensor) -> Tensor:
    """(M, V) logits, (M,) true piece → (M,) log p / (1 - p) of the true piece, computed stably."""
    true = logits.gather(1, target[:, None]).squeeze(1)  # (M,)
    others = logits.scatter(1, target[:, None], float("-inf"))  # (M, V) without the true piece
    return true - others.logsumexp(dim=1)


@contextlib.contextmanager
def encoder_out_of_reach(net: VitBert) -> Iterator[None]:
    """Within it, gradients stop at the joint encoder's output: a loss trains what lies beside
    and after the encoder (the reader, the tower it reads, the head), not the encoder."""
    handle = net.text.encoder.register_forward_hook(
        lambda module, args, out: tuple(o.detach() if isinstance(o, Tensor) else o for o in out)
        if isinstance(out, tuple) else out.detach())
    try:
        yield
    finally:
        handle.remove()


def twin_contrast_loss(net: VitBert, batch: Batch, tower: Tensor, encoder_grad: bool = False
                       ) -> Tensor:
    """Mean softplus(s_twin - s_own) over the hidden pieces of exchanged words (module doc), of
    an MLM ``batch`` whose photos the tower turned into ``tower`` (P, N, D_img) and which carries
    ``twin_images``, ``twin_index`` and ``twin_mask`` (:func:`collate_twins`);
    ``encoder_grad`` True lets it train the joint encoder too (the module doc says why not). A
    batch where no exchanged word is hidden gives a zero that keeps the graph.
    """
    if TWIN_INDEX not in batch:
        raise ConfigError("the twin contrast needs batches that carry twin photos: set "
                          "--data.source.init_args.twin_photos true (and no frozen image tower)")
    targets = batch[TWIN_MASK] & (batch["labels"] != IGNORE_INDEX)  # (B, T)
    rows = ((batch[TWIN_INDEX] >= 0) & targets.any(dim=1)).nonzero().squeeze(1)  # (R,)
    if not len(rows):
        return tower.sum() * 0.0
    twin_photos = net.tower_tokens(batch[TWIN_IMAGES])  # (K, N, D_img)
    photos = torch.cat((tower, twin_photos))  # (P + K, N, D_img)
    own = caption_photos(batch)[rows]  # (R,)
    twin = len(tower) + batch[TWIN_INDEX][rows]  # (R,)
    ids, keep = batch["input_ids"][rows], batch["attention_mask"][rows]  # (R, T)
    reach = contextlib.nullcontext() if encoder_grad else encoder_out_of_reach(net)
    with reach:
        logits = net(ids.repeat(2, 1), keep.repeat(2, 1), Photos(photos, torch.cat((own, twin))),
                     target_mask=targets[rows].repeat(2, 1))  # (2M, V): own's M, then twin's M
    true = batch["labels"][rows][targets[rows]]  # (M,)
    s_own, s_twin = log_odds(logits.float(), true.repeat(2)).chunk(2)  # (M,) each
    return F.softplus(s_twin - s_own).mean()
