"""`prepare_data.py shards`: litdata shards from every layout the folder source reads and an
img2dataset tar folder; one sample per photo with its original bytes, the split kept, the
tokenizer beside the shards, a truncated JPEG skipped and reported (vitbert.streaming.shards)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import load_script
from litdata import StreamingDataset
from shard_photos import (
    TRUNCATED,
    captions,
    img2dataset_folder,
    karpathy_copy,
    photo_names,
    token_copy,
)

from vitbert.data.layouts import hash_split
from vitbert.data.tokenizer import load_tokenizer


def _shards(source: Path, out: Path, *extra: str) -> dict:
    return load_script("prepare_data").main(["shards", "--from", str(source), "--out", str(out),
                                             "--workers", "0", *extra])


def _read(out: Path, split: str) -> list[dict]:
    return list(StreamingDataset(str(out / split)))


def test_karpathy_copy_keeps_its_split_and_the_original_bytes(tmp_path, capsys):
    root = karpathy_copy(tmp_path / "flickr")
    summary = _shards(root, tmp_path / "shards")
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["skipped"] == 1

    names = photo_names(30)
    expected = {"train": [n for i, n in enumerate(names) if i % 5 in (2, 3, 4)],
                "val": [n for i, n in enumerate(names) if i % 5 == 0],
                "test": [n for i, n in enumerate(names) if i % 5 == 1]}
    for split, wanted in expected.items():
        wanted = [n for n in wanted if n != TRUNCATED]
        samples = _read(tmp_path / "shards", split)
        assert sorted(s["key"] for s in samples) == sorted(wanted), split
        assert summary["splits"][split] == len(wanted)
        for s in samples:  # the file's bytes, not decoded pixels; its five captions together
            assert s["image"] == (root / "flickr30k-images" / s["key"]).read_bytes()
            assert s["captions"].split("\n") == captions(names.index(s["key"]))
        # Places and caption ids are the written order's: 0, 1, ... and 0, 5, 10, ...
        assert [s["photo"] for s in samples] == list(range(len(samples)))
        assert [s["first_caption"] for s in samples] == [5 * p for p in range(len(samples))]
    train_keys = [s["key"] for s in _read(tmp_path / "shards", "train")]
    assert train_keys != sorted(train_keys)  # shuffled before writing

    skipped = json.loads((tmp_path / "shards" / "skipped.json").read_text())
    assert skipped["skipped"] == 1 and skipped["photos"][0]["key"] == TRUNCATED
    assert "cannot decode" in skipped["photos"][0]["why"]
    tokenizer = load_tokenizer(tmp_path / "shards" / "tokenizer.json")
    assert tokenizer.convert_ids_to_tokens(tokenizer("a dog")["input_ids"]) == [
        "[CLS]", "a", "dog", "[SEP]"]


def test_the_shuffle_is_fixed_by_the_seed(tmp_path):
    root = token_copy(tmp_path / "flickr")
    orders = []
    for name, seed in (("a", "0"), ("b", "0"), ("c", "1")):
        _shards(root, tmp_path / name, "--seed", seed)
        orders.append([s["key"] for s in _read(tmp_path / name, "train")])
    assert orders[0] == orders[1] and orders[0] != orders[2]


def test_token_copy_is_split_by_the_hash_of_the_file_name(tmp_path):
    root = token_copy(tmp_path / "flickr")
    summary = _shards(root, tmp_path / "shards")
    good = [n for n in photo_names(30) if n != TRUNCATED]
    for split in ("train", "val", "test"):
        keys = ([s["key"] for s in _read(tmp_path / "shards", split)]
                if summary["splits"][split] else [])
        assert sorted(keys) == sorted(n for n in good if hash_split(n) == split), split
    assert summary["settings"]["split"]["rule"] == "sha1"


def test_img2dataset_folder(tmp_path):
    good = img2dataset_folder(tmp_path / "cc3m")
    summary = _shards(tmp_path / "cc3m", tmp_path / "shards")
    assert summary["settings"]["format"] == "img2dataset" and summary["skipped"] == 1
    seen = {}
    for split, count in summary["splits"].items():
        for s in _read(tmp_path / "shards", split) if count else []:
            assert hash_split(s["key"]) == split
            seen[s["key"]] = s
    assert {k: s["image"] for k, s in seen.items()} == good
    i = int("000010003"[5:]) + 12  # key 000010003: shard 1, sample 3
    assert seen["000010003"]["captions"] == captions(i, 1)[0]
    skipped = json.loads((tmp_path / "shards" / "skipped.json").read_text())["photos"]
    assert [s["key"] for s in skipped] == ["000000005"]
    assert skipped[0]["where"].endswith("00000.tar member 000000005")


def test_a_written_folder_is_replaced_only_with_force(tmp_path, capsys):
    root = karpathy_copy(tmp_path / "flickr", n=10)  # 1 truncated of 11: above the default 5%
    with pytest.raises(SystemExit):
        _shards(root, tmp_path / "shards")
    assert "1 of 11 photos cannot be used" in capsys.readouterr().err
    _shards(root, tmp_path / "shards", "--max-bad-fraction", "0.1")
    with pytest.raises(SystemExit) as stop:
        _shards(root, tmp_path / "shards", "--max-bad-fraction", "0.1")
    assert stop.value.code == 2 and "pass --force" in capsys.readouterr().err
    again = _shards(root, tmp_path / "shards", "--max-bad-fraction", "0.1", "--force")
    assert again["images"] == 10


@pytest.mark.parametrize("fmt", ["token", "kaggle", "karpathy", "nlphuji"])
def test_every_layout_shards_the_photos_splits_and_captions_the_folder_source_reads(
        tmp_path, flickr_root, fmt):
    """The shards and the image cache read a layout through the same readers: the same photos
    (odd ones converted, broken ones skipped), in the same splits, with the same captions (the
    Kaggle file's broken row repaired, a blank caption dropped)."""
    from vitbert.data.cache import SPLITS, CaptionDataset
    from vitbert.data.captioned_photos import build_cache
    from vitbert.streaming.shards import write_shards

    root = flickr_root(fmt)
    # A quarter of this set is broken on purpose: more than a real copy may have by default.
    write_shards(root, tmp_path / "shards", workers=0, min_frequency=1, max_bad_fraction=0.5)
    build_cache(root, tmp_path / "cache", 32, workers=0, max_bad_fraction=0.5)
    for split in SPLITS:
        cached = CaptionDataset(tmp_path / "cache", split)
        expected: dict[str, list[str]] = {}
        for row, caption in zip(cached.rows, cached.captions, strict=True):
            expected.setdefault(cached.files[row], []).append(caption)
        streamed = ({s["key"]: s["captions"].split("\n") for s in _read(tmp_path / "shards", split)}
                    if (tmp_path / "shards" / split).exists() else {})
        assert {k: sorted(v) for k, v in streamed.items()} == {
            k: sorted(v) for k, v in expected.items()}, (fmt, split)
        assert expected or split != "train"
