"""The layouts beyond Flickr30k's own files (issue 54): Flickr8k as released (its split files, its
quirks) and from Kaggle, Karpathy's json for Flickr8k and COCO, COCO's own annotations, a folder of
one's own photos (Hugging Face imagefolder). Each is written as the real files are
(`layout_copies`), found from the files, read into the image cache; a bad row and a missing photo
in each are skipped, counted and named. Then: which layout a folder holding several is read as,
and the split summary that says so."""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import pytest
from layout_copies import QUIRK, WRITERS, flickr8k_kaggle, flickr8k_release, karpathy_json, write

from vitbert.data import CaptionedPhotos, layouts
from vitbert.data.cache import SPLITS, CaptionDataset, DataError, read_meta
from vitbert.data.captioned_photos import build_cache, split_origin
from vitbert.data.datamodule import CaptionDataModule

REPO = Path(__file__).resolve().parents[2]


def _build(root: Path, out: Path, **kw) -> tuple[dict, list[str]]:
    kw.setdefault("max_bad_fraction", 0.5)  # a few photos each, one of them missing
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        summary = build_cache(root, out, 16, **kw)
    return summary, [str(w.message) for w in caught]


def _summary(root: Path, cache: Path, **kw) -> str:
    source = CaptionedPhotos(root=str(root), cache_dir=str(cache), prepare_workers=0,
                             max_bad_fraction=0.5, **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return CaptionDataModule(source=source, image_size=16, num_workers=0).data_summary()


@pytest.mark.parametrize("kind", list(WRITERS))
def test_each_layout_is_found_and_cached_with_its_split_and_captions(tmp_path, kind):
    copy = write(kind, tmp_path / kind)
    summary, said = _build(copy.root, tmp_path / "cache")
    assert summary["format"] == copy.fmt
    counts = copy.split_counts()
    assert summary["splits"] == {s: photos for s, (photos, _) in counts.items()}
    assert read_meta(tmp_path / "cache")["split_captions"] == {
        s: captions for s, (_, captions) in counts.items()}
    for split in SPLITS:  # every photo in its split, with its own captions, in order
        cached = CaptionDataset(tmp_path / "cache", split)
        got: dict[str, list[str]] = {}
        for row, caption in zip(cached.rows, cached.captions, strict=True):
            got.setdefault(cached.files[row], []).append(caption)
        assert got == {f: caps for f, (s, caps) in copy.photos.items() if s == split}, split
        assert not set(copy.unlisted) & set(cached.files)  # left out before decoding
    # The bad row and the missing photo(s): skipped, counted, named in one warning.
    assert summary["skipped"] == len(copy.missing) + 1
    [warning] = [m for m in said if "skipped" in m]
    assert all(f"{name} (missing file)" in warning for name in copy.missing), warning
    assert copy.bad_row in warning
    assert summary["unlisted"] == len(copy.unlisted)


# ----------------------------------------------------------------------------- Flickr8k


def test_flickr8k_release_reads_the_token_file_and_its_three_split_files(tmp_path):
    copy = flickr8k_release(tmp_path / "f8k")
    fmt, path, parsed = layouts.read_annotations(copy.root)
    assert (fmt, path) == ("flickr8k", copy.root / "Flickr8k_text" / "Flickr8k.token.txt")
    assert [p.name for p in parsed.files] == [  # the lemma file is not read
        "Flickr8k.token.txt", "Flickr_8k.trainImages.txt", "Flickr_8k.devImages.txt",
        "Flickr_8k.testImages.txt"]
    split_of = {r.file: r.split for r in parsed.records}
    # devImages is val; the quirk's second name and the photo in no split file are unlisted.
    assert [split_of[n] for n in sorted(copy.photos)] == [copy.photos[n][0]
                                                         for n in sorted(copy.photos)]
    assert split_of[f"{QUIRK}.1"] == split_of[copy.unlisted[0]] == layouts.UNLISTED
    assert parsed.bad_captions == ["Flickr8k.token.txt line 7: expected 'name.jpg#k<TAB>caption'"]


def test_flickr8k_split_summary_counts_the_photos_in_no_split_file(tmp_path):
    copy = flickr8k_release(tmp_path / "f8k", flat=True)
    text = _summary(copy.root, tmp_path / "cache")
    assert text.splitlines() == [
        f"data: {tmp_path / 'cache'}; split: Flickr8k's split files beside "
        f"{(copy.root / 'Flickr8k.token.txt').resolve()} (Flickr_8k.devImages.txt is val); "
        "1 photo in no split file left out",
        "  train: 7 photos, 35 captions", "  val: 2 photos, 10 captions",
        "  test: 2 photos, 10 captions"]


def test_flickr8k_needs_all_three_split_files_or_none(tmp_path):
    copy = flickr8k_release(tmp_path / "f8k")
    text = copy.root / "Flickr8k_text"
    (text / "Flickr_8k.devImages.txt").unlink()
    with pytest.raises(DataError, match=r"Flickr8k_text: Flickr_8k.devImages.txt missing beside "
                                        r"Flickr8k.token.txt; put all three"):
        layouts.read_annotations(copy.root)
    for name in ("trainImages", "testImages"):
        (text / f"Flickr_8k.{name}.txt").unlink()
    _, _, parsed = layouts.read_annotations(copy.root)  # none: the hash split
    assert parsed.split is None
    assert {r.file: r.split for r in parsed.records}[copy.unlisted[0]] == layouts.hash_split(
        copy.unlisted[0])


def test_flickr8k_split_file_rows_without_captions_are_bad_rows(tmp_path):
    copy = flickr8k_release(tmp_path / "f8k")
    dev = copy.root / "Flickr8k_text" / "Flickr_8k.devImages.txt"
    dev.write_text(dev.read_text() + "0000000000_no_such.jpg\n" + dev.read_text().splitlines()[0]
                   + "\n")
    _, _, parsed = layouts.read_annotations(copy.root)
    first = dev.read_text().splitlines()[0]
    assert parsed.bad_captions[1:] == [
        f"Flickr_8k.devImages.txt line 4: {first} is already listed in "
        "Flickr_8k.devImages.txt line 1",
        "Flickr_8k.devImages.txt line 3: 0000000000_no_such.jpg has no caption in "
        "Flickr8k.token.txt"]


def test_kaggle_captions_txt_is_real_csv(tmp_path):
    copy = flickr8k_kaggle(tmp_path / "kaggle")
    _, _, parsed = layouts.read_annotations(copy.root)
    captions = [c for r in parsed.records for c in r.captions]
    assert 'A man in a "Go Team" shirt , laughing , waves at the camera .' in captions
    assert "A girl, a dog, and a ball on the grass ." in captions
    # A caption whose comma nobody quoted is read whole, and the row said to be repaired.
    with open(copy.root / "captions.txt", "a") as fh:
        fh.write(f"{next(iter(copy.photos))},A dog, wet , shakes off water .\n")
    _, _, parsed = layouts.read_annotations(copy.root)
    assert parsed.records[0].captions[-1] == "A dog, wet , shakes off water ."
    assert parsed.repaired == ["captions.txt line 53: unquoted comma, read as part of the caption"]
    (copy.root / "captions.txt").write_text("filename|caption\nx.jpg|a dog .\n")
    with pytest.raises(DataError, match=r"captions.txt: first line should be the header "
                                        r"'image,caption'"):
        layouts.read_annotations(copy.root)


# ----------------------------------------------------------------------------- COCO


def test_karpathy_coco_keeps_the_filepath_folders_and_restval_is_train(tmp_path):
    copy = karpathy_json(tmp_path / "coco", "coco")
    _, _, parsed = layouts.read_annotations(copy.root)
    entries = json.loads((copy.root / "dataset_coco.json").read_text())["images"]
    assert {e["split"] for e in entries} == {"train", "restval", "val", "test"}
    assert [r.file for r in parsed.records] == [f"{e['filepath']}/{e['filename']}"
                                                for e in entries]
    assert [r.split for r in parsed.records] == [
        "train" if e["split"] == "restval" else e["split"] for e in entries]


def test_coco_annotations_halve_val_into_val_and_test_and_say_so(tmp_path):
    copy = write("coco-2017", tmp_path / "coco")
    _build(copy.root, tmp_path / "cache")
    origin = split_origin(read_meta(tmp_path / "cache"))
    assert origin == (f"COCO's own files in {(copy.root / 'annotations').resolve()}: "
                      "captions_train2017.json is train, captions_val2017.json is halved into "
                      "val and test by a hash of the file name")
    val_photos = [f for f in copy.photos if f.startswith("val2017/")]
    assert {copy.photos[f][0] for f in val_photos} == {"val", "test"}  # both halves hold some


def test_coco_with_both_years_reads_2017_and_names_2014_as_ignored(tmp_path):
    copy = write("coco-2017", tmp_path / "coco")
    old = write("coco-2014", tmp_path / "coco2014")
    shutil.copytree(old.root, copy.root, dirs_exist_ok=True)
    summary, _ = _build(copy.root, tmp_path / "cache")
    assert summary["splits"] == {s: n for s, (n, _) in copy.split_counts().items()}
    meta = read_meta(tmp_path / "cache")
    assert meta["ignored"] == ["coco (annotations/captions_train2014.json)"]
    assert split_origin(meta).endswith(
        "; read coco (captions_train2017.json), ignored: coco (annotations/captions_train2014"
        ".json) (the first layout found is read: docs/training.md)")


def test_coco_file_without_its_lists_is_a_clear_error(tmp_path):
    (tmp_path / "annotations").mkdir()
    (tmp_path / "annotations" / "captions_val2017.json").write_text('{"images": []}')
    with pytest.raises(DataError, match=r"captions_val2017.json: expected COCO's captions file.*"
                                        r"'annotations' is missing or not a list"):
        layouts.read_annotations(tmp_path)


# ----------------------------------------------------------------------------- imagefolder


def test_imagefolder_split_folders_and_several_rows_a_photo(tmp_path):
    copy = write("imagefolder-splits", tmp_path / "mine")
    fmt, _, parsed = layouts.read_annotations(copy.root)
    assert fmt == "imagefolder"
    by_file = {r.file: r for r in parsed.records}
    assert len(by_file["train/IMG_20240601.jpg"].captions) == 2  # two rows, one photo
    assert by_file["validation/holiday/IMG_20240602.jpg"].split == "val"
    assert by_file["extra/IMG_9.jpg"].split == layouts.UNLISTED  # outside the split folders
    assert [p.relative_to(copy.root).as_posix() for p in parsed.files] == [
        "metadata.jsonl", "train/metadata.jsonl", "validation/metadata.jsonl",
        "test/metadata.jsonl"]
    text = _summary(copy.root, tmp_path / "cache")
    assert (f"split: the folders train/, validation/, test/ of {copy.root.resolve()}; 1 photo "
            "outside the split folders left out\n") in text


def test_imagefolder_without_the_conventions_columns_says_which(tmp_path):
    (tmp_path / "metadata.csv").write_text("image,description\na.jpg,a dog .\n")
    with pytest.raises(DataError, match=r"metadata.csv: columns \['image', 'description'\] lack "
                                        r"a 'file_name' column .* rename them"):
        layouts.read_annotations(tmp_path)
    (tmp_path / "metadata.csv").unlink()
    (tmp_path / "metadata.jsonl").write_text('{"file_name": "a.jpg", "label": 3}\n')
    with pytest.raises(DataError, match=r"metadata.jsonl: no row has a 'file_name' column .*"
                                        r"first problem: metadata.jsonl line 1: no 'text'"):
        layouts.read_annotations(tmp_path)


def test_an_empty_split_names_the_file_or_folder_that_would_fill_it(tmp_path):
    f8k = flickr8k_release(tmp_path / "f8k")
    dev = f8k.root / "Flickr8k_text" / "Flickr_8k.devImages.txt"
    dev.write_text("")
    assert "  val: 0 photos (Flickr_8k.devImages.txt lists none of the photos here); validation " \
           f"is off: list val photos in {dev.resolve()}\n" in _summary(f8k.root, tmp_path / "a")

    mine = write("imagefolder-splits", tmp_path / "mine")
    shutil.rmtree(mine.root / "validation")
    where = mine.root.resolve() / "validation"
    assert (f"  val: 0 photos (no photo in {where}/); validation is off: put val photos and their "
            f"metadata rows in {where}/\n") in _summary(mine.root, tmp_path / "b")

    coco = write("coco-2017", tmp_path / "coco")
    (coco.root / "annotations" / "captions_val2017.json").unlink()
    text = _summary(coco.root, tmp_path / "c")
    assert text.splitlines()[0].endswith(": captions_train2017.json is train, no val file (so no "
                                         "val or test)")
    assert (f"  test: 0 photos (no captions_val2017.json); there is nothing to test: add "
            f"annotations/captions_val2017.json and its val2017/ to {coco.root.resolve()}") in text


# ----------------------------------------------------------------------------- several layouts


def test_several_layouts_in_one_folder_the_first_in_the_documented_order_is_read(tmp_path):
    root = tmp_path / "f8k"
    flickr8k_release(root)
    flickr8k_kaggle(root)
    karpathy_json(root, "flickr8k")
    found = layouts.detect(root)
    assert (found.layout.name, found.path.name) == ("karpathy", "dataset_flickr8k.json")
    text = _summary(root, tmp_path / "cache")
    assert text.splitlines()[0].endswith(
        "; read karpathy (dataset_flickr8k.json), ignored: flickr8k (Flickr8k_text/"
        "Flickr8k.token.txt), kaggle8k (captions.txt) (the first layout found is read: "
        "docs/training.md)")
    # An explicit format wins, and the others are named.
    text = _summary(root, tmp_path / "cache", format="flickr8k")
    assert ": Flickr8k's split files beside" in text.splitlines()[0]
    assert text.splitlines()[0].endswith(
        "ignored: karpathy (dataset_flickr8k.json), kaggle8k (captions.txt) (the first layout "
        "found is read: docs/training.md)")


def test_the_order_is_the_one_docs_training_md_gives():
    docs = (REPO / "docs" / "training.md").read_text()
    places = [docs.find(f"`{layout.file.split(' or ')[0]}`") for layout in layouts.LAYOUTS]
    assert -1 not in places, [layout.file for layout in layouts.LAYOUTS]
    assert places == sorted(places)


def test_an_empty_folder_names_every_layout_it_looked_for(tmp_path):
    with pytest.raises(DataError) as error:
        layouts.detect(tmp_path)
    for layout in layouts.LAYOUTS:
        assert f"{layout.file} ({layout.name})" in str(error.value)


# ----------------------------------------------------------------------------- the source


def test_the_source_trains_its_tokenizer_on_train_captions_only(tmp_path):
    copy = flickr8k_release(tmp_path / "f8k")
    texts = CaptionedPhotos(root=str(copy.root), cache_dir=str(tmp_path / "c")).train_captions(16)
    train = [c for split, caps in copy.photos.values() if split == "train" for c in caps]
    assert set(train) <= set(texts)
    others = {c for split, caps in copy.photos.values() if split != "train" for c in caps}
    assert not others & set(texts)

