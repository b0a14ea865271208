"""The MLM collator: tokenise captions, pad per batch, hide 15% of the word pieces.

Why not `transformers.DataCollatorForLanguageModeling` for the masking itself: it draws one
Bernoulli(0.15) per token from one generator for the whole batch, so (a) a short caption often gets
no target at all (a 10-piece caption has 0.85**10 = 20% odds), (b) a validation mask depends on
which other examples share the batch and on worker order, not on the example. We keep its recipe
(80% [MASK] / 10% random / 10% unchanged, special tokens never targets) but draw the *number* of
targets per caption (stochastic rounding of 15% of its pieces, at least one) from a generator
seeded per example when `deterministic=True`. Tokenising and padding are the tokenizer's job.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
import torch
from transformers import PreTrainedTokenizerFast

from .features import IMAGE_INDEX, PARTS
from .resume import MASK_KEY

# Function words and punctuation: most masked pieces are these, and they say little about the
# picture. `content_mask` in a batch marks the pieces of every *other* word, so the model's
# accuracy can be reported on the targets that need looking (`content_mask` at the targets), and
# the word-detection objective knows which words a photo's captions use (vitbert.lit.objectives).
_FUNCTION_WORDS = """
    a an the of in on at to is are was were be been and or but with without while there here it
    its his her their them they he she we you i this that these those some for from by as into
    onto over under up down out off near next another other one two three four five many each
    who which what where has have had do does not no very just s
"""
STOP_WORDS = frozenset(_FUNCTION_WORDS.split()) | frozenset(".,;:!?'\"-()")

IGNORE_INDEX = -100


class BatchExtra(Protocol):
    """Batch fields a data source adds from fields of its own items (``DataSource.batch_extra``:
    the shapes data's twin photos). Called after every mask is drawn, with each caption's
    generator (``rngs``) where it left off, so the masks are those of a batch without the extra;
    ``image`` is the collator's treatment of a photo (the training augmentation)."""

    def __call__(self, items: list[dict[str, Any]], encoding: Any,
                 rngs: list[np.random.Generator],
                 image: Callable[[Any], torch.Tensor]) -> dict[str, torch.Tensor]: ...


class MLMCollator:
    """Turn a list of dataset items into a masked-language-modelling batch.

    Items are dicts `{"image": uint8 (3, S, S), "caption": str, "index": int, "row": int}`
    (`row`, the photo's cache row, may be absent: the item is then a photo of its own). The batch:
    `images` uint8 (P, 3, S, S), the P distinct photos of the batch in order of first appearance,
    `image_index` long (B,) the photo of each caption among them, `input_ids` long (B, T),
    `attention_mask` bool (B, T), `labels` long (B, T) (-100 where not a target), `content_mask`
    bool (B, T) (the pieces of content words, targets or not), `index` long (B,), `image_id`
    long (B,) (the item's cache `row`: which photo); `extra` (a data source's, :class:`BatchExtra`)
    adds its own fields. Items with a frozen part's cached features (`data.features.PARTS`)
    instead of `image` give those, stacked (P, …), under the same key, and no `extra` fields
    (a source's own fields are made from its pixels).
    T is the longest caption in the batch (at most `max_length`), never a fixed length.

    Why each photo once: Flickr30k has five captions per photo, and a loader that keeps them
    together (`CaptionDataModule(group_by_photo=True)`) puts ~B/5 photos in a batch; the model
    then runs its image tower on P photos, not B (`VitBert.forward`'s `image_index`), the same
    loss for about a fifth of the tower's work. The augmentation draws one crop per photo per batch.
    """

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerFast,
        mlm_probability: float = 0.15,
        whole_word: bool = False,
        deterministic: bool = False,
        seed: int = 0,
        max_length: int = 64,
        mask_replace_prob: float = 0.8,
        random_replace_prob: float = 0.1,
        content_weight: float = 1.0,
        image_transform: Callable[[torch.Tensor], torch.Tensor] | None = None,
        extra: BatchExtra | None = None,
    ):
        if not 0.0 < mlm_probability < 1.0:
            raise ValueError(f"mlm_probability must be in (0, 1), got {mlm_probability}")
        if content_weight <= 0.0:
            raise ValueError(f"content_weight must be > 0, got {content_weight}")
        if tokenizer.mask_token_id is None or tokenizer.pad_token_id is None:
            raise ValueError("the tokenizer needs [MASK] and [PAD] (see vitbert.data.tokenizer)")
        self.tokenizer = tokenizer
        self.mlm_probability = mlm_probability
        self.whole_word = whole_word
        self.deterministic = deterministic
        self.seed = seed
        self.max_length = max_length
        self.mask_replace_prob = mask_replace_prob
        self.random_replace_prob = random_replace_prob
        self.content_weight = content_weight
        self.image_transform = image_transform  # per picture, uint8 (3, S, S) → same (training)
        self.extra = extra
        special = set(tokenizer.all_special_ids)
        # Random replacements are drawn from ordinary pieces only, never from special tokens.
        self._random_ids = np.array([i for i in range(len(tokenizer)) if i not in special])

    def _rngs(self, items: list[dict[str, Any]]) -> list[np.random.Generator]:
        indices = [int(it["index"]) for it in items]
        if self.deterministic:  # the mask of an example depends on (seed, its index) only
            return [np.random.default_rng([self.seed, i]) for i in indices]
        if all(MASK_KEY in it for it in items):  # training (vitbert.data.resume): a fresh mask
            # every epoch that depends on (seed, shuffle seed, epoch, index) only, so a resumed
            # run draws the masks the uninterrupted one would have, whatever the workers.
            return [np.random.default_rng([self.seed, *it[MASK_KEY], i])
                    for it, i in zip(items, indices, strict=True)]
        # One generator per batch, seeded from torch's RNG, which Lightning seeds per worker.
        rng = np.random.default_rng(int(torch.randint(0, 2**62, ()).item()))
        return [rng] * len(indices)

    def _choose_targets(self, word_ids: list[int | None], is_content: np.ndarray,
                        rng: np.random.Generator) -> np.ndarray:
        """Positions to predict: ~mlm_probability of the pieces (or of the words), at least one.

        The number of targets does not depend on `content_weight`; only which units are picked
        does: a content-word unit is `content_weight` times as likely to be drawn as a function
        word's (weighted draws without replacement), so the expected masking rate is unchanged.
        """
        units: dict[int, list[int]] = {}
        for pos, w in enumerate(word_ids):
            if w is None:  # [CLS], [SEP], padding
                continue
            units.setdefault(w if self.whole_word else pos, []).append(pos)
        groups = list(units.values())
        if not groups:
            return np.zeros(0, dtype=np.int64)
        # Stochastic rounding keeps the expected rate exact; max(1, .) guarantees one target.
        n = int(np.floor(self.mlm_probability * len(groups) + rng.random()))
        n = min(max(1, n), len(groups))
        if self.content_weight == 1.0:  # the uniform draw, kept bit-for-bit (fixed val masks)
            picked = rng.choice(len(groups), size=n, replace=False)
        else:
            weights = np.where(is_content[[g[0] for g in groups]], self.content_weight, 1.0)
            picked = rng.choice(len(groups), size=n, replace=False, p=weights / weights.sum())
        return np.array(sorted(p for g in picked for p in groups[g]), dtype=np.int64)

    def _content_positions(self, caption: str, word_ids: list[int | None], b: int,
                           enc: Any) -> np.ndarray:
        """(T,) bool: pieces of a word outside STOP_WORDS (the words that need looking)."""
        is_content = np.zeros(len(word_ids), dtype=bool)
        for pos, w in enumerate(word_ids):
            if w is not None:
                span = enc.word_to_chars(b, w)
                is_content[pos] = caption[span.start : span.end].lower() not in STOP_WORDS
        return is_content

    def __call__(self, items: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        captions = [it["caption"] for it in items]
        indices = [int(it["index"]) for it in items]
        enc = self.tokenizer(
            captions,
            padding="longest",
            truncation=True,
            max_length=self.max_length,
            return_tensors="np",
            return_token_type_ids=False,
        )
        # numpy while editing per example: a small torch index op costs ~10x a numpy one.
        input_ids = enc["input_ids"].astype(np.int64)  # (B, T)
        labels = np.full_like(input_ids, IGNORE_INDEX)  # (B, T)
        content_mask = np.zeros(input_ids.shape, dtype=bool)  # (B, T)

        rngs = self._rngs(items)
        for b, rng in enumerate(rngs):
            word_ids = enc.word_ids(b)
            is_content = self._content_positions(captions[b], word_ids, b, enc)  # (T,)
            content_mask[b] = is_content
            pos = self._choose_targets(word_ids, is_content, rng)
            if len(pos) == 0:
                continue
            labels[b, pos] = input_ids[b, pos]
            # 80% [MASK], 10% a random piece, 10% unchanged (the model cannot trust any input).
            u = rng.random(len(pos))
            p_mask, p_rand = self.mask_replace_prob, self.random_replace_prob
            input_ids[b, pos[u < p_mask]] = self.tokenizer.mask_token_id
            to_rand = pos[(u >= p_mask) & (u < p_mask + p_rand)]
            if len(to_rand):
                input_ids[b, to_rand] = rng.choice(self._random_ids, size=len(to_rand))

        # Each photo once: the first item of each image id carries it, the others point at it.
        image_ids = [int(it.get("row", it["index"])) for it in items]
        first: dict[int, dict[str, Any]] = {}  # image id → its first item, in order of appearance
        for image_id, item in zip(image_ids, items, strict=True):
            first.setdefault(image_id, item)
        slot = {image_id: p for p, image_id in enumerate(first)}  # image id → its photo's place
        image_index = [slot[image_id] for image_id in image_ids]  # (B,) into the P photos
        cached = next((key for key in PARTS.values() if key in items[0]), None)
        if cached is not None:  # a frozen part's cached output (data.features)
            photos = {cached: torch.stack([it[cached] for it in first.values()])}
        else:  # (P, 3, S, S) uint8 pixels, one crop per photo when augmenting
            photos = {"images": torch.stack([self._image(it["image"]) for it in first.values()])}
        if self.extra is not None and cached is None:  # a source's fields are made from pixels
            photos.update(self.extra(items, enc, rngs, self._image))  # after every mask: the
            # masks are the same with or without them
        return {
            **photos,
            IMAGE_INDEX: torch.tensor(image_index, dtype=torch.long),  # (B,)
            "input_ids": torch.from_numpy(input_ids),
            "attention_mask": torch.from_numpy(enc["attention_mask"].astype(bool)),
            "labels": torch.from_numpy(labels),
            "content_mask": torch.from_numpy(content_mask),
            "index": torch.tensor(indices, dtype=torch.long),  # (B,)
            # (B,) which photo: the cache row (an item without one is its own image)
            "image_id": torch.tensor(image_ids),
        }

    def _image(self, image: Any) -> torch.Tensor:
        image = torch.as_tensor(image)
        return image if self.image_transform is None else self.image_transform(image)
