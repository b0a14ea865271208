"""The real-photo development set (../shared/data/flickr_dev), when this checkout has it.

500 real Flickr30k photos with their five captions each, in Karpathy's layout, split 400 / 50 / 50
(Flickr's terms: research use, never copied into the repository). These tests read it in place and
build a 20-photo cache in a temporary folder; without the set they skip.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch

from vitbert.data import CaptionedPhotos
from vitbert.data.datamodule import CaptionDataModule
from vitbert.data.layouts import read_annotations

# Beside the repository (../shared), or where VITBERT_FLICKR_DEV points (a git worktree elsewhere).
FLICKR_DEV = Path(os.environ.get(
    "VITBERT_FLICKR_DEV", Path(__file__).resolve().parents[2] / "../shared/data/flickr_dev"))


@pytest.fixture(scope="module")
def flickr_dev() -> Path:
    if not (FLICKR_DEV / "dataset_flickr30k.json").is_file():
        pytest.skip("../shared/data/flickr_dev not present")
    return FLICKR_DEV


def test_the_dev_set_parses_as_karpathy_400_50_50(flickr_dev):
    fmt, _, parsed = read_annotations(flickr_dev)
    assert fmt == "karpathy"
    per_split = {s: [r for r in parsed.records if r.split == s] for s in ("train", "val", "test")}
    assert {s: len(r) for s, r in per_split.items()} == {"train": 400, "val": 50, "test": 50}
    assert all(len(r.captions) == 5 for r in parsed.records)
    names = [r.file for r in parsed.records]
    assert len(set(names)) == 500
    assert all((flickr_dev / "flickr30k-images" / n).is_file() for n in names[:20])


def test_twenty_photos_make_a_cache_and_batches_with_five_captions_a_photo(flickr_dev, tmp_path):
    # A 20-photo copy in the temporary folder (never in the repository): 12 train, 4 val, 4 test.
    notes = json.loads((flickr_dev / "dataset_flickr30k.json").read_text())
    by_split = {s: [im for im in notes["images"] if im["split"] == s] for s in ("train", "val",
                                                                               "test")}
    images = by_split["train"][:12] + by_split["val"][:4] + by_split["test"][:4]
    root = tmp_path / "flickr_dev20"
    (root / "flickr30k-images").mkdir(parents=True)
    for im in images:
        shutil.copy(flickr_dev / "flickr30k-images" / im["filename"], root / "flickr30k-images")
    (root / "dataset_flickr30k.json").write_text(json.dumps({"images": images}))

    source = CaptionedPhotos(root=str(root), cache_dir=str(tmp_path / "cache"), prepare_workers=0)
    dm = CaptionDataModule(source=source, image_size=32, batch_size=10, num_workers=0,
                           vocab_size=500, min_frequency=1)
    dm.setup("fit")
    assert [len(dm.dataset(s)) for s in ("train", "val", "test")] == [60, 20, 20]
    batch = next(iter(dm.val_dataloader()))
    # Validation keeps a photo's captions together: 10 captions are 2 photos, 5 captions each,
    # and the batch carries each photo once.
    rows = dm.dataset("val").rows[batch["index"].numpy()]
    assert sorted(rows.tolist().count(r) for r in set(rows.tolist())) == [5, 5]
    assert batch["images"].shape == (2, 3, 32, 32) and batch["images"].dtype == torch.uint8
    assert batch["image_index"].tolist() == [0] * 5 + [1] * 5
    assert not (batch["images"][0] == batch["images"][1]).all()
    assert (batch["images"].float().std() > 20), "real photos, not blank pictures"
    # Training with group_by_photo: 60 captions of 12 photos, 10 a batch, each photo in one or
    # two consecutive batches, so 2 or 3 photos a batch.
    dm.group_by_photo = True
    batches = list(dm.train_dataloader())
    assert sorted(i for b in batches for i in b["index"].tolist()) == list(range(60))
    assert {len(b["images"]) for b in batches} <= {2, 3}
