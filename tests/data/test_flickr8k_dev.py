"""The Flickr8k development set (../shared/data/flickr8k), when this checkout has it: its
annotations read as they lie, in the official Flickr8k layout, without decoding a photo.

7,091 real photos with five captions each; the split files list 5,246 / 884 / 876 of them and 85
are in none (Flickr's terms: research use, never copied into the repository). Without the set the
test skips.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from vitbert.data import captioned_photos

# Beside the repository (../shared), or where VITBERT_FLICKR8K points (a git worktree elsewhere).
FLICKR8K = Path(os.environ.get(
    "VITBERT_FLICKR8K", Path(__file__).resolve().parents[2] / "../shared/data/flickr8k"))


def test_the_flickr8k_dev_set_reads_as_its_split_files_say():
    if not (FLICKR8K / "Flickr8k.token.txt").is_file():
        pytest.skip("../shared/data/flickr8k not present")
    copy = captioned_photos.locate(FLICKR8K)  # reads the annotations, decodes no photo
    assert (copy.fmt, copy.ann_path.name, copy.img_dir.name) == (
        "flickr8k", "Flickr8k.token.txt", "Flicker8k_Dataset")
    splits = ("train", "val", "test")
    photos = {s: [r for r in copy.records if r.split == s] for s in splits}
    assert {s: len(p) for s, p in photos.items()} == {"train": 5246, "val": 884, "test": 876}
    assert {s: sum(len(r.captions) for r in p) for s, p in photos.items()} == {
        "train": 26230, "val": 4420, "test": 4380}
    assert len(copy.records) == 5246 + 884 + 876  # nothing else is decoded
    assert len(copy.parsed.unlisted) == 85 and len(copy.records) + 85 == 7091
    assert copy.parsed.bad_captions == [] and copy.parsed.ignored == []
