"""The MLM collator: masking statistics over many captions, determinism, padding, whole words."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vitbert.data.masking import STOP_WORDS, MLMCollator
from vitbert.data.tokenizer import train_wordpiece

CONTENT = ["dog", "skateboarder", "waterfall", "bicycle", "umbrella", "mountain", "children",
           "playing", "jumping", "sidewalk", "grass", "red", "jacket", "photographer"]
FUNCTION = ["a", "the", "of", "is", "on", "in", "with"]


def _captions(n: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        k = int(rng.integers(7, 20))
        words = [rng.choice(CONTENT) if rng.random() < 0.6 else rng.choice(FUNCTION)
                 for _ in range(k)]
        out.append(" ".join(words) + " .")
    return out


@pytest.fixture(scope="module")
def tok():
    # A small vocabulary, so long words split into several pieces (whole-word masking matters).
    return train_wordpiece(_captions(500, seed=1), vocab_size=120, min_frequency=2)


def _items(captions, start=0):
    img = torch.zeros(3, 4, 4, dtype=torch.uint8)
    return [{"image": img, "caption": c, "index": start + i} for i, c in enumerate(captions)]


def _run(collator, captions, bs=128):
    items = _items(captions)
    return [collator(items[i : i + bs]) for i in range(0, len(items), bs)]


def test_masking_statistics_over_many_captions(tok):
    batches = _run(MLMCollator(tok), _captions(3000))
    special = torch.tensor(tok.all_special_ids)
    n_pieces = n_targets = n_mask = n_same = 0
    for b in batches:
        targets = b["labels"] != -100  # (B, T)
        real = b["attention_mask"]
        inputs_at_targets = b["input_ids"][targets]
        labels_at_targets = b["labels"][targets]
        assert targets.any(dim=1).all(), "every caption has at least one target"
        assert not (targets & ~real).any(), "padding is never a target"
        assert not torch.isin(labels_at_targets, special).any(), "special tokens are never targets"
        ordinary = real & ~torch.isin(b["input_ids"], special) | targets
        n_pieces += int(ordinary.sum())
        n_targets += int(targets.sum())
        n_mask += int((inputs_at_targets == tok.mask_token_id).sum())
        n_same += int((inputs_at_targets == labels_at_targets).sum())
        # Non-targets are untouched: labels -100 and [CLS] first, [SEP] last real token.
        assert (b["input_ids"][:, 0] == tok.cls_token_id).all()
        last = real.sum(1) - 1
        assert (b["input_ids"][torch.arange(len(last)), last] == tok.sep_token_id).all()
    rate = n_targets / n_pieces
    assert abs(rate - 0.15) < 0.02, rate
    assert abs(n_mask / n_targets - 0.8) < 0.03
    # "unchanged" is 10%, plus the random draws that happen to hit the original piece (~1/V).
    assert abs(n_same / n_targets - 0.1 - 0.1 / len(tok)) < 0.03
    n_random = n_targets - n_mask - n_same
    assert abs(n_random / n_targets - 0.1) < 0.03


def test_random_replacements_are_never_special_tokens(tok):
    c = MLMCollator(tok, mask_replace_prob=0.0, random_replace_prob=1.0)
    b = c(_items(_captions(200)))
    targets = b["labels"] != -100
    assert not torch.isin(b["input_ids"][targets], torch.tensor(tok.all_special_ids)).any()


def test_padding_is_per_batch_to_the_longest_caption(tok):
    c = MLMCollator(tok)
    short = c(_items(["a dog .", "the red dog ."]))
    lengths = [len(tok(x)["input_ids"]) for x in ["a dog .", "the red dog ."]]
    assert short["input_ids"].shape == (2, max(lengths))
    assert short["attention_mask"].sum(1).tolist() == lengths
    assert (short["input_ids"][~short["attention_mask"]] == tok.pad_token_id).all()
    b = c(_items(_captions(16)))
    assert b["input_ids"].shape[1] == max(len(tok(x)["input_ids"]) for x in _captions(16))
    assert b["images"].dtype == torch.uint8 and b["images"].shape == (16, 3, 4, 4)
    assert b["attention_mask"].dtype == torch.bool and b["content_mask"].dtype == torch.bool
    assert b["index"].tolist() == list(range(16))


def test_truncation_keeps_sep(tok):
    b = MLMCollator(tok, max_length=8)(_items(_captions(4)))
    assert b["input_ids"].shape[1] == 8
    assert (b["input_ids"][:, -1] == tok.sep_token_id).all()


def test_deterministic_masks_depend_on_the_example_only(tok):
    caps = _captions(64)
    items = _items(caps)
    a = MLMCollator(tok, deterministic=True, seed=3)
    alone = {it["index"]: a([it]) for it in items[:8]}
    mixed = a(items[::-1])  # other batch mates, other order, other padding
    for row, it in enumerate(items[::-1]):
        if it["index"] in alone:
            one = alone[it["index"]]
            T = one["input_ids"].shape[1]
            assert torch.equal(mixed["input_ids"][row, :T], one["input_ids"][0])
            assert torch.equal(mixed["labels"][row, :T], one["labels"][0])
    again = MLMCollator(tok, deterministic=True, seed=3)(items)
    assert torch.equal(again["labels"], a(items)["labels"])
    other_seed = MLMCollator(tok, deterministic=True, seed=4)(items)
    assert not torch.equal(other_seed["labels"], again["labels"])
    rand = MLMCollator(tok)
    assert not torch.equal(rand(items)["labels"], rand(items)["labels"])


def _words(ids: list[int], tok) -> list[tuple[int, int, str]]:
    """(start, end, word) spans from the pieces: a word is a piece plus its ## continuations."""
    pieces = tok.convert_ids_to_tokens(ids)
    spans = []
    for i, p in enumerate(pieces):
        if p.startswith("##") and spans:
            s, _, w = spans[-1]
            spans[-1] = (s, i + 1, w + p[2:])
        else:
            spans.append((i, i + 1, p))
    return spans


def _is_content(word: str, tok) -> bool:
    """The test's own reading of a content word: neither a function word nor [CLS]/[SEP]."""
    return word not in STOP_WORDS and word not in tok.all_special_tokens


def test_whole_word_masking_and_content_mask(tok):
    caps = _captions(400)
    b = MLMCollator(tok, whole_word=True, deterministic=True)(_items(caps))
    multi_piece_masked = 0
    for row, cap in enumerate(caps):
        ids = tok(cap)["input_ids"]
        targets = (b["labels"][row, : len(ids)] != -100).tolist()
        content = b["content_mask"][row, : len(ids)].tolist()
        for s, e, word in _words(ids, tok):
            assert len(set(targets[s:e])) == 1, f"{word!r} partly masked in {cap!r}"
            is_content = _is_content(word, tok)
            assert all(c == is_content for c in content[s:e]), word
            if targets[s]:
                multi_piece_masked += e - s > 1
    assert multi_piece_masked > 20


def test_content_mask_marks_content_pieces_only(tok):
    caps = _captions(300)
    b = MLMCollator(tok)(_items(caps))
    seen = {True: 0, False: 0}
    for row, cap in enumerate(caps):
        ids = tok(cap)["input_ids"]
        for s, e, word in _words(ids, tok):
            is_content = _is_content(word, tok)
            for p in range(s, e):  # every piece, a target or not
                assert bool(b["content_mask"][row, p]) == is_content, word
                seen[is_content] += 1
        assert not b["content_mask"][row, len(ids) :].any(), "padding is no word"
    assert seen[True] > 50 and seen[False] > 50


def _rates(batches) -> tuple[float, float]:
    """(targets per ordinary piece, fraction of targets that are content pieces)."""
    targets = pieces = content = 0
    for b in batches:
        at = b["labels"] != -100
        targets += int(at.sum())
        pieces += int(b["attention_mask"].sum()) - 2 * len(at)  # less [CLS] and [SEP]
        content += int(b["content_mask"][at].sum())
    return targets / pieces, content / targets


def test_content_weight_shifts_targets_to_content_words_at_the_same_rate(tok):
    caps = _captions(2000)
    uniform = _run(MLMCollator(tok, mlm_probability=0.3, deterministic=True), caps)
    weighted = _run(MLMCollator(tok, mlm_probability=0.3, deterministic=True,
                                content_weight=4.0), caps)
    rate_u, content_u = _rates(uniform)
    rate_w, content_w = _rates(weighted)
    assert abs(rate_u - 0.3) < 0.01 and abs(rate_w - rate_u) < 0.005, (rate_u, rate_w)
    # ~60% of the words are content words (see _captions); 4× weight pushes their share up.
    assert content_w > content_u + 0.1, (content_u, content_w)
    # The uniform draw is the default one, unchanged (validation masks keep their figures).
    default = _run(MLMCollator(tok, mlm_probability=0.3, deterministic=True), caps)
    assert all(torch.equal(a["labels"], b["labels"]) for a, b in zip(uniform, default,
                                                                       strict=True))
    with pytest.raises(ValueError, match="content_weight"):
        MLMCollator(tok, content_weight=0.0)


def test_image_transform_is_applied_to_every_picture(tok):
    flip = MLMCollator(tok, image_transform=lambda image: image.flip(-1))
    items = [{"image": torch.arange(48, dtype=torch.uint8).reshape(3, 4, 4), "caption": c,
              "index": i} for i, c in enumerate(_captions(3))]
    images = flip(items)["images"]
    assert torch.equal(images, torch.stack([it["image"].flip(-1) for it in items]))


def test_each_photo_is_stacked_once_and_image_index_hands_it_out(tok):
    rows = [4, 9, 4, 4, 2, 9, 7]  # seven captions of four photos, shuffled
    crops = []

    def crop(image):  # the augmentation: counts its draws
        crops.append(int(image[0, 0, 0]))
        return image

    items = [{"image": torch.full((3, 4, 4), row, dtype=torch.uint8), "caption": caption,
              "index": i, "row": row}
             for i, (row, caption) in enumerate(zip(rows, _captions(7), strict=True))]
    b = MLMCollator(tok, image_transform=crop)(items)
    assert b["images"].shape == (4, 3, 4, 4)  # (P, 3, S, S)
    assert b["images"][:, 0, 0, 0].tolist() == [4, 9, 2, 7]  # in order of first appearance
    assert b["image_index"].tolist() == [0, 1, 0, 0, 2, 1, 3]  # (B,)
    assert b["images"][b["image_index"]][:, 0, 0, 0].tolist() == rows == b["image_id"].tolist()
    assert crops == [4, 9, 2, 7]  # one crop per photo, not per caption
    # Cached tower features are deduplicated the same way.
    features = [{"image_features": torch.full((2, 3), float(it["row"]), dtype=torch.float16),
                 **{k: it[k] for k in ("caption", "index", "row")}} for it in items]
    f = MLMCollator(tok)(features)
    assert "images" not in f and f["image_features"].shape == (4, 2, 3)  # (P, N, D_img)
    assert f["image_features"][f["image_index"]][:, 0, 0].tolist() == rows
    # Without a row each item is a photo of its own: P = B, in caption order.
    plain = MLMCollator(tok)(_items(_captions(5)))
    assert len(plain["images"]) == 5 and plain["image_index"].tolist() == list(range(5))
