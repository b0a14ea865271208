"""Twin photos (vitbert.shapes.twins): which captions are twins, what an item carries, what the
collator marks, and how ShapesSource(twin_photos=True) serves them."""

from __future__ import annotations

import pytest
import torch

from vitbert.data.datamodule import CaptionDataModule
from vitbert.data.features import FEATURES_KEY
from vitbert.data.masking import MLMCollator
from vitbert.data.tokenizer import train_wordpiece
from vitbert.lit.frozen import build_image_features
from vitbert.models import ImageTowerConfig, TextTowerConfig, VitBert, VitBertConfig
from vitbert.shapes import ShapesSource
from vitbert.shapes.twins import (
    TWIN_KEYS,
    TwinPhotos,
    collate_twins,
    content_words,
    find_twins,
    twin_contrast_loss,
)

CAPTIONS = [
    "a small red circle left of a large blue square.",  # 0
    "a small blue circle is left of a large red square",  # 1: 0 with the colours exchanged
    "the small red square left of a large blue circle",  # 2: 0 with the forms exchanged
    "a small red circle left of a large blue square",  # 3: 0's words, photo of 0's (below)
    "a large blue square left of a small red circle",  # 4: 0's words, more than two moved
    "a red circle left of a blue square",  # 5: another bag of words
    "a blue circle left of a red square",  # 6: 5 exchanged
]
PHOTOS = [0, 1, 2, 0, 4, 5, 6]


def test_twins_are_other_photos_with_two_content_words_exchanged():
    twins = find_twins(CAPTIONS, PHOTOS)
    assert twins[0] == [(1, (1, 5)), (2, (2, 6))]  # places in: small red circle left large ...
    assert [t for t, _ in twins[3]] == [1, 2]  # 0's twins too; 0 itself is the same photo
    assert twins[4] == []  # a bag of 0's words, but four or more places differ
    assert twins[5] == [(6, (0, 3))] and twins[6] == [(5, (0, 3))]


def test_content_words_carry_their_characters():
    words = content_words(CAPTIONS[0])
    assert [w for w, _, _ in words] == ["small", "red", "circle", "left", "large", "blue",
                                        "square"]
    assert all(CAPTIONS[0][start:end].lower() == w for w, start, end in words)


class Photos(torch.utils.data.Dataset):
    """A caption set in the shape of vitbert.data.cache.CaptionDataset: photo k is all k."""

    def __init__(self) -> None:
        self.captions, self.rows = CAPTIONS, torch.tensor(PHOTOS)

    def __len__(self) -> int:
        return len(CAPTIONS)

    def __getitem__(self, i: int) -> dict:
        image = torch.full((3, 4, 4), PHOTOS[i], dtype=torch.uint8)
        return {"image": image, "caption": CAPTIONS[i], "index": i, "row": PHOTOS[i]}


@pytest.fixture(scope="module")
def tokenizer():
    return train_wordpiece(CAPTIONS * 3, vocab_size=80, min_frequency=1)


def test_the_collator_shows_each_caption_one_twin_and_marks_the_exchanged_words(tokenizer):
    data = TwinPhotos(Photos())
    assert data.share() == pytest.approx(6 / 7)
    assert data[0]["twin_images"].shape == (2, 3, 4, 4)
    batch = MLMCollator(tokenizer, mlm_probability=0.3, deterministic=True,
                        extra=collate_twins)([data[i] for i in range(7)])
    assert batch["twin_index"][4] == -1  # no twin
    caption = torch.where(batch["labels"] == -100, batch["input_ids"], batch["labels"])
    twins = find_twins(CAPTIONS, PHOTOS)
    for row in (0, 1, 2, 3, 5, 6):
        photo = int(batch["twin_images"][batch["twin_index"][row], 0, 0, 0])  # photo k is all k
        places = {p for other, p in twins[row] if PHOTOS[other] == photo}
        assert len(places) == 1  # these captions' twins of one photo exchange the same places
        words = [content_words(CAPTIONS[row])[i][0] for i in places.pop()]
        marked = tokenizer.decode(caption[row][batch["twin_mask"][row]])
        assert marked.split() == words, (row, marked, words)


def test_twins_change_no_mask(tokenizer):
    plain = MLMCollator(tokenizer, mlm_probability=0.3, deterministic=True)(
        [Photos()[i] for i in range(7)])
    twins = MLMCollator(tokenizer, mlm_probability=0.3, deterministic=True,
                        extra=collate_twins)([TwinPhotos(Photos())[i] for i in range(7)])
    assert set(TWIN_KEYS) <= set(twins)
    for key in ("input_ids", "labels", "attention_mask", "images", "image_index"):
        torch.testing.assert_close(twins[key], plain[key])


def test_a_datamodule_serves_twins_in_training_only_and_only_from_a_twin_source(tmp_path):
    def module(twin_photos: bool) -> CaptionDataModule:
        source = ShapesSource(root=str(tmp_path / "shapes"), num_train=64, num_val=16,
                              num_test=16, twin_photos=twin_photos)
        dm = CaptionDataModule(source=source, batch_size=16, num_workers=0, max_length=32,
                               persistent_workers=False)
        dm.prepare_data()
        dm.setup("fit")
        return dm

    dm = module(twin_photos=True)
    batch = next(iter(dm.train_dataloader()))
    assert {"twin_images", "twin_index", "twin_mask"} <= set(batch)
    assert batch["twin_mask"].shape == batch["input_ids"].shape
    assert "twin_index" not in next(iter(dm.val_dataloader()))
    assert not set(TWIN_KEYS) & set(next(iter(module(twin_photos=False).train_dataloader())))


def test_a_frozen_towers_batches_carry_no_twins_and_the_contrast_says_why(tmp_path):
    """What model.freeze_image: {part: tower} hands the data module: the tower's cached output
    stands in for the photos, so the twins' photos (which the contrast runs through the tower)
    are not served, and the twin contrast refuses such a batch naming the frozen tower.
    (Replaces the data module's old DataError at loader creation: the source's extra fields are
    now the source's, and the loss that needs them says what is missing.)"""
    source = ShapesSource(root=str(tmp_path / "shapes"), num_train=64, num_val=16, num_test=16,
                          twin_photos=True)
    dm = CaptionDataModule(source=source, batch_size=16, num_workers=0, max_length=32,
                           persistent_workers=False)
    dm.prepare_data()
    dm.setup("fit")
    image = ImageTowerConfig(kind="vit", image_size=32, patch_size=8, dim=16, depth=1,
                             num_heads=2)
    net = VitBert(VitBertConfig(image=image, text=TextTowerConfig(dim=16, depth=1, num_heads=2),
                                vocab_size=dm.num_tokens))
    dm.use_image_features(build_image_features(net, dm.cache_dir, progress=False))
    batch = next(iter(dm.train_dataloader()))
    assert FEATURES_KEY in batch and "images" not in batch
    assert not set(TWIN_KEYS) & set(batch)
    with pytest.raises(ValueError, match=r"twin_photos true \(and no frozen image tower\)"):
        twin_contrast_loss(net, batch, batch[FEATURES_KEY])
