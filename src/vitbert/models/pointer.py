"""The word pointer: after a colour, the word for the thing of that colour, read where it is.

A caption names an object by its attributes and its kind: "a small *red triangle*". A text head
that writes the next word from the encoder's row must bind "red" to the region that is red and
read that region's kind, across the attention of every layer; in the embedded default it often
reads the kind of the other object, or the kind red things usually have in training. The pointer
does the binding directly, as the visual-word slots of Neural Baby Talk (Lu et al. 2018) and the
copy step of pointer-generator networks (See et al. 2017) do:

    key word k (a colour) ─ query q_k (d,) ─┐
    photo ─ pixels of each patch (N, 3·p·p) ─ MLP ─ keys (N, d) ─┴─ α = softmax(keys · q_k) (N,)
    tower tokens (N, D_img) ─ value detector ─ log p_n(w) over the value words (N, W)
    p(w | k, photo) = Σ_n α_n p_n(w)

The keys are the patches' *pixels*, not the tower's tokens: a colour word names what the pixels
show, and a key that cannot mix patches cannot point at the wrong object. The value detector is
a word detector (:class:`WordDetectorHead`, max over the tokens) of the value words alone, read
per token at writing time. Both learn from the captions
(:func:`vitbert.lit.objectives.pointer_loss`) on the tower's tokens held fixed; the other way
round, with where each colour points held fixed, the tower's tokens there learn to name the shape
the captions write after it (:func:`~vitbert.lit.objectives.pointer_tower_loss`), so that the
shape is where the pointer reads it.

Writing a caption (:mod:`vitbert.decoding.generate`), after a key word the text head still says
*whether* a value word comes next (its probability mass on the value words); the pointer says
*which* (:meth:`WordPointer.next_word`). Once a key word and its value word are written, the
object is named: the patches around where the value was read are covered, and later pointing
avoids them (the coverage of See et al. 2017), since a colour names two objects when both have
it and each must be named once. The same coverage guides the choice of the key word: the text
head says *whether* a colour comes next, and its choice among the colours is weighed by how
surely each names an object not covered yet (``key_presence``). Without it the text
head often named the first object's colour again for the second, and the pointer then read the
first object again ("a small purple diamond sits right of a small purple diamond").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vitbert.models.config import PointerConfig
from vitbert.models.heads import WordDetectorHead

MISSING = -1  # the id of a key or value word that is not one piece of the vocabulary


@dataclass
class Grounding:
    """What the pointer reads from R photos, once per caption written: each patch's key
    (R, N, d) and each patch's value words' log-probabilities (R, N, W); and, as the caption is
    written, how much of each patch is covered by the objects named so far (R, N), in [0, 1]."""

    keys: Tensor
    values: Tensor
    covered: Tensor

    def select(self, index: Tensor) -> Grounding:
        """The rows ``index`` (R',), in that order (beams that survive)."""
        return Grounding(self.keys[index], self.values[index], self.covered[index])


def patch_pixels(images: Tensor, side: int) -> Tensor:
    """uint8 [0, 255] or float [0, 1] pixels (B, C, S, S) → each patch's pixels (B, N, C·side²),
    patches in row-major order, as the tower's tokens are."""
    x = images.float() / 255.0 if images.dtype == torch.uint8 else images.float()
    B, C, S, _ = x.shape
    g = S // side
    x = x.reshape(B, C, g, side, g, side).permute(0, 2, 4, 1, 3, 5)  # (B, g, g, C, side, side)
    return x.reshape(B, g * g, C * side * side)


class WordPointer(nn.Module):
    """Which value word follows a key word, from the patches the key word points at.

    The word ids live in buffers (saved with the weights): :meth:`bind` looks them up in a
    tokenizer when training starts; a word that is not one piece of it is never pointed from or
    to (id :data:`MISSING`).
    """

    def __init__(self, config: PointerConfig, image_dim: int, image_size: int, grid: int,
                 in_chans: int = 3) -> None:
        super().__init__()
        self.config = config
        self.grid = grid  # patches per side: the tower's tokens are a grid × grid, row-major
        self.patch_side = image_size // grid
        self.register_buffer("key_ids", torch.full((len(config.key_words),), MISSING))
        self.register_buffer("value_ids", torch.full((len(config.value_words),), MISSING))
        self.query = nn.Embedding(len(config.key_words), config.dim)
        self.key = nn.Sequential(nn.Linear(in_chans * self.patch_side**2, config.hidden_dim),
                                 nn.GELU(), nn.Linear(config.hidden_dim, config.dim))
        self.value = WordDetectorHead(image_dim, len(config.value_words))

    def bind(self, tokenizer) -> list[str]:
        """Look the key and value words up in ``tokenizer``; return those it lacks (as one
        piece), which the pointer will never point from or to."""
        vocab = tokenizer.get_vocab()
        missing = []
        for ids, words in ((self.key_ids, self.config.key_words),
                           (self.value_ids, self.config.value_words)):
            ids.copy_(torch.tensor([vocab.get(word, MISSING) for word in words]))
            missing += [word for word in words if word not in vocab]
        return missing

    @staticmethod
    def index_of(ids: Tensor, words: Tensor) -> Tensor:
        """Each piece of ``words`` (any shape) as its index in ``ids`` (K,), or -1 if absent."""
        match = words[..., None] == ids  # (..., K)
        return torch.where(match.any(-1), match.float().argmax(-1), -1)

    def read(self, images: Tensor, tokens: Tensor) -> Grounding:
        """Pixels (R, C, S, S) and the tower's tokens (R, N, D_img) → their :class:`Grounding`,
        nothing covered yet."""
        keys = self.key(patch_pixels(images, self.patch_side))  # (R, N, d)
        values = self.value.classifier(tokens.to(self.value.classifier.weight.dtype))  # (R, N, W)
        return Grounding(keys, values.float().log_softmax(dim=-1), keys.new_zeros(keys.shape[:2]))

    def scores(self, queries: Tensor, keys: Tensor, covered: Tensor | None = None) -> Tensor:
        """How well each patch's pixels match each query: queries (M, Q, d) and the patches'
        ``keys`` (M, N, d) → (M, Q, N), lowered by log(1 − the ``covered`` share) (M, N)."""
        scores = torch.einsum("mqd,mnd->mqn", queries, keys) / math.sqrt(keys.shape[-1])
        if covered is not None:
            scores = scores + torch.log1p(-covered.clamp(max=1.0 - 1e-6))[:, None, :]
        return scores.float()

    def attention(self, key_index: Tensor, keys: Tensor, covered: Tensor | None = None) -> Tensor:
        """(M, N) log α: where key word ``key_index`` (M,) points among the patches' ``keys``
        (M, N, d), away from the ``covered`` share of each patch (M, N) when given."""
        return self.scores(self.query(key_index)[:, None], keys, covered)[:, 0].log_softmax(-1)

    def presence(self, keys: Tensor, covered: Tensor | None = None) -> Tensor:
        """(M, K) logits that each key word is seen in some patch of the photos' ``keys``
        (M, N, d) not ``covered``: the log-mean-exp of its scores over the patches, a smooth
        maximum that one patch can carry. Attention is the same scores made relative; this makes
        them absolute (trained by :func:`vitbert.lit.objectives.pointer_loss`)."""
        queries = self.query.weight.expand(len(keys), -1, -1)  # (M, K, d)
        return self.scores(queries, keys, covered).logsumexp(dim=-1) - math.log(keys.shape[1])

    def unnamed(self, keys: Tensor, covered: Tensor) -> Tensor:
        """(M, K) log-probability that each key word names an object not named yet: that it is
        seen in the photo (:meth:`presence`), times the share of its evidence (the patches'
        exp-scores) outside the ``covered`` patches. The share, not the presence among the
        uncovered patches alone: an object's edge patches, outside its covered window, still
        show some of its colour, and that presence stayed high enough for the text head to name
        the object again."""
        seen = self.presence(keys)  # (M, K)
        return F.logsigmoid(seen) + (self.presence(keys, covered) - seen)

    def forward(self, key_index: Tensor, keys: Tensor, values: Tensor,
                covered: Tensor | None = None) -> Tensor:
        """key_index (M,) into the key words; keys (M, N, d); values (M, N, W) log-probabilities
        → (M, W) log p(value word | key word, photo) = log Σ_n α_n p_n."""
        log_alpha = self.attention(key_index, keys, covered)  # (M, N)
        return torch.logsumexp(log_alpha[..., None] + values, dim=1)

    def next_word(self, log_probs: Tensor, written: Tensor, grounding: Grounding) -> Tensor:
        """The text head's next-piece log-probabilities (R, V) after ``written`` (R, t), with
        the key words' mass re-shared by what is not named yet (``key_presence``: p(k) ∝
        p_text(k) · p(k names an object not named yet), :meth:`unnamed`) in every row, and the
        value words' mass re-shared by the pointer in the rows whose last piece is a key word
        (p(w) = p_text(any value word) · p_pointer(w)). The total of each group, and every other
        piece, are left as they are.

        An object is named once: when the last two pieces are a key word and a value word, the
        patches around where that value was read are added to ``grounding.covered``, and later
        pointing, and the key words' presence, avoid them. Two objects of one colour would
        otherwise get the same shape twice: the colour points at both.
        """
        if written.shape[1] >= 2:
            self._cover(written[:, -2], written[:, -1], grounding)
        if self.config.key_presence:
            unnamed = self.unnamed(grounding.keys, grounding.covered)  # (R, K)
            text = log_probs[:, self.key_ids.clamp(min=0)]  # (R, K)
            log_probs = self._reshare(log_probs, self.key_ids, text + unnamed)
        key_index = self.index_of(self.key_ids, written[:, -1])  # (R,)
        after_key = key_index >= 0
        if not after_key.any():
            return log_probs
        pointed = self(key_index.clamp(min=0), grounding.keys, grounding.values,
                       grounding.covered)  # (R, W)
        return self._reshare(log_probs, self.value_ids, pointed, after_key)

    @staticmethod
    def _reshare(log_probs: Tensor, ids: Tensor, share: Tensor, rows: Tensor | None = None
                 ) -> Tensor:
        """``log_probs`` (R, V) with, in ``rows`` (R,) (every row when None), the total mass of
        the words ``ids`` (K,) given out among them as ``share`` (R, K) (log-weights,
        normalised here over the words the vocabulary has)."""
        present = ids != MISSING  # (K,)
        ids = ids[present]
        mass = log_probs[:, ids].logsumexp(dim=-1, keepdim=True)  # (R, 1)
        shared = log_probs.index_copy(1, ids, mass + share[:, present].log_softmax(dim=-1))
        return shared if rows is None else torch.where(rows[:, None], shared, log_probs)

    def _cover(self, before: Tensor, last: Tensor, grounding: Grounding) -> None:
        """Cover the object a (key, value) pair just written, ``before`` and ``last`` (R,), names:
        the patches within ``object_radius`` of where the value was read from (α_n p_n(value),
        relative to its largest), added to ``grounding.covered``; rows without such a pair are
        left as they are. The whole window, not just the patch read: an object spans several
        patches, and any of them would otherwise still be seen with the key word's colour."""
        key_index = self.index_of(self.key_ids, before)  # (R,)
        value_index = self.index_of(self.value_ids, last)  # (R,)
        named = (key_index >= 0) & (value_index >= 0)
        if not named.any():
            return
        log_alpha = self.attention(key_index.clamp(min=0), grounding.keys, grounding.covered)
        read = grounding.values.gather(2, value_index.clamp(min=0)[:, None, None].expand(
            -1, grounding.values.shape[1], 1)).squeeze(-1)  # (R, N) log p_n(value)
        source = (log_alpha + read).softmax(dim=-1)  # (R, N): where the value was read from
        source = source / source.amax(dim=-1, keepdim=True)  # the patch read most: 1
        R, g, r = len(source), self.grid, self.config.object_radius
        window = F.max_pool2d(source.view(R, 1, g, g), 2 * r + 1, stride=1, padding=r)
        covered = torch.maximum(grounding.covered, window.view(R, g * g))
        grounding.covered = torch.where(named[:, None], covered, grounding.covered)
