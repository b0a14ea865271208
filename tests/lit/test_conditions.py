"""The mismatched-photo control: a derangement by image id, never a caption's own photo."""

from __future__ import annotations

import itertools

import pytest
import torch

from vitbert.lit.conditions import (
    ANOTHER_PHOTO,
    CONDITIONS,
    TEXT_ONLY,
    WITH_PHOTO,
    another_photo,
    read,
    select_captions,
)


class Recorder:
    """A stand-in network: records the image features and index of each reading (None: text
    only) and returns logits of the right shape (one row per target)."""

    def __init__(self) -> None:
        self.seen = []

    def __call__(self, input_ids, attention_mask, image_features=None, image_index=None,
                 target_mask=None, **_):
        self.seen.append(None if image_features is None else (image_features, image_index))
        return torch.zeros(int(target_mask.sum()), 4)

    def shown(self, k: int) -> torch.Tensor:
        """The pixels (here: the image id) each caption of reading ``k`` sees."""
        features, index = self.seen[k]
        return features if index is None else features[index]


def test_conditions_are_declared_once_with_distinct_names():
    assert CONDITIONS == (WITH_PHOTO, ANOTHER_PHOTO, TEXT_ONLY)
    for field in ("key", "suffix", "description"):
        assert len({getattr(c, field) for c in CONDITIONS}) == 3


def five_captions_per_photo(num_images: int, start: int = 0) -> torch.Tensor:
    """Image ids as Flickr30k's loader gives them: each image's five captions side by side."""
    return torch.arange(start, start + num_images).repeat_interleave(5)


@pytest.mark.parametrize("image_ids", [
    five_captions_per_photo(13),                       # 65 captions, 5 per photo, kept together
    five_captions_per_photo(2, start=40),              # a last batch of two images
    torch.tensor([7, 3, 7, 9, 3, 3, 100, 9]),          # shuffled, uneven counts
    torch.arange(64),                                  # one caption per picture (shapes)
])
def test_never_pairs_a_caption_with_its_own_image(image_ids):
    source, has_other = another_photo(image_ids)
    assert has_other.all()
    assert (image_ids[source] != image_ids).all()
    # Every distinct image still appears as someone's other photo (a permutation of images).
    assert set(image_ids[source].tolist()) == set(image_ids.tolist())
    # All captions of one image meet the same other photo.
    for image in image_ids.unique():
        assert len(set(image_ids[source][image_ids == image].tolist())) == 1


def test_every_arrangement_of_a_small_batch_is_a_derangement():
    for ids in itertools.product(range(3), repeat=5):
        image_ids = torch.tensor(ids)
        source, has_other = another_photo(image_ids)
        if len(set(ids)) > 1:
            assert has_other.all() and (image_ids[source] != image_ids).all(), ids
        else:
            assert not has_other.any(), ids


def test_depends_on_the_ids_only_not_on_a_random_state():
    image_ids = torch.tensor([4, 4, 4, 2, 2, 9, 9, 9, 9, 5])
    torch.manual_seed(0)
    first = another_photo(image_ids)
    torch.manual_seed(123)
    torch.rand(10)
    second = another_photo(image_ids)
    assert torch.equal(first[0], second[0]) and torch.equal(first[1], second[1])
    # The next image id in sorted order, the largest wrapping round to the smallest.
    assert image_ids[first[0]].tolist() == [5, 5, 5, 4, 4, 2, 2, 2, 2, 9]


def test_a_batch_whose_captions_share_one_photo_is_left_out_and_counted():
    image_ids = torch.full((5,), 17)
    _, has_other = another_photo(image_ids)
    assert not has_other.any()
    batch = tiny_batch(image_ids)
    net = Recorder()
    readings = read(net, batch, batch["images"])
    logits, reads = readings[ANOTHER_PHOTO]
    assert len(net.seen) == 2  # with the photo and text only: the control read nothing
    assert logits is None and not reads.any()
    assert readings[WITH_PHOTO][1].all() and readings[TEXT_ONLY][1].all()


def tiny_batch(image_ids: torch.Tensor) -> dict[str, torch.Tensor]:
    B = len(image_ids)
    images = image_ids.view(B, 1, 1, 1).expand(B, 3, 2, 2).to(torch.uint8)  # pixel = image id
    labels = torch.full((B, 3), -100)
    labels[:, 1] = 1
    return {"images": images, "image_id": image_ids, "labels": labels, "index": torch.arange(B),
            "input_ids": torch.ones(B, 3, dtype=torch.long),
            "attention_mask": torch.ones(B, 3, dtype=torch.bool)}


def test_the_model_sees_the_other_images_photo():
    image_ids = five_captions_per_photo(3)
    batch = tiny_batch(image_ids)
    net = Recorder()
    readings = read(net, batch, batch["images"])
    # Called in the order of CONDITIONS: with the photo, another photo, text only.
    assert net.shown(1).shape == batch["images"].shape
    another = net.shown(1)[:, 0, 0, 0]  # the pixel is the image id of the photo shown
    assert (another != image_ids.to(torch.uint8)).all()
    assert net.seen[0][0] is batch["images"] and net.seen[2] is None
    assert readings[ANOTHER_PHOTO][1].all()


def test_grouped_deduplicated_batches_never_show_a_caption_its_own_photo():
    """Five captions per photo, kept together by the grouped sampler (data.group_by_photo): the
    collator stacks each photo once (image_index says whose is whose) and every reading of the
    control sends every caption to another image's photo; a last batch holding a single photo is
    left out of the control."""
    from vitbert.data.masking import MLMCollator
    from vitbert.data.resume import resumable_loader
    from vitbert.data.tokenizer import train_wordpiece

    captions = [f"a dog number {i} runs on the grass ." for i in range(5)]
    tokenizer = train_wordpiece(captions * 4, vocab_size=60, min_frequency=1)
    items = [{"image": torch.full((3, 2, 2), row, dtype=torch.uint8), "caption": caption,
              "index": 5 * row + i, "row": row}
             for row in range(7) for i, caption in enumerate(captions)]  # 35 captions, 7 photos
    loader = resumable_loader(items, seed=3, groups=[it["row"] for it in items], batch_size=16,
                              collate_fn=MLMCollator(tokenizer, seed=0))
    batches = list(loader)  # 16 + 16 + 3: the last batch holds the last photo only
    for batch in batches:
        assert len(batch["images"]) == len(batch["image_id"].unique()) < len(batch["image_id"])
        net = Recorder()
        readings = read(net, batch, batch["images"])  # the pixel stands for the tower's output
        with_photo, *another, text_only = range(len(net.seen))
        assert net.seen[text_only] is None
        image_ids = batch["image_id"]
        assert torch.equal(net.shown(with_photo)[:, 0, 0, 0].long(), image_ids)  # its own
        for k in another:
            assert (net.shown(k)[:, 0, 0, 0].long() != image_ids).all()
        assert len(another) == int(readings[ANOTHER_PHOTO][1].any())
    assert [int(read(Recorder(), b, b["images"])[ANOTHER_PHOTO][1].sum()) for b in batches] == [
        16, 16, 0]


def test_selected_captions_keep_their_deduplicated_photos():
    photos = torch.arange(3).view(3, 1, 1, 1).expand(3, 3, 2, 2).to(torch.uint8)
    batch = {"images": photos, "image_index": torch.tensor([0, 0, 1, 2, 2]),
             "image_id": torch.tensor([10, 10, 11, 12, 12])}
    kept = select_captions(batch, torch.tensor([False, True, False, True, False]))
    assert kept["images"] is photos
    assert kept["image_id"].tolist() == [10, 12]
    assert kept["images"][kept["image_index"]][:, 0, 0, 0].tolist() == [0, 2]
    # Without image_index the photos are one per caption and are sliced with the captions.
    plain = select_captions({"images": photos, "image_id": torch.tensor([7, 8, 9])},
                            torch.tensor([True, False, True]))
    assert plain["images"][:, 0, 0, 0].tolist() == [0, 2]
