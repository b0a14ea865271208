"""Streamed shards: captioned photos written once as litdata chunks, for data past one disk.

The image cache (`vitbert.data.cache`) decodes every photo into one uint8 array on one disk; a
web-scale set (CC3M, CC12M, a LAION subset: millions of photos fetched by img2dataset) neither
fits there nor serves several nodes. litdata (Lightning's streaming engine) does: `litdata.optimize`
writes chunk files, `StreamingDataset` streams them from a folder or ``s3://`` and deals the
chunks to ranks and workers (`vitbert.streaming.source` reads them). This module only says *what*
goes into the chunks; litdata does the chunking, the index and the streaming.

A shard folder (``scripts/prepare_data.py shards --from SRC --out DIR``):

    train/ val/ test/   one litdata dataset per split (index.json + chunk-*.bin); a split
                        with no photo has no folder
    tokenizer.json      the WordPiece trained here on the training captions, so no rank reads
                        every caption at start-up
    skipped.json        every photo left out and why (an unreadable or truncated image, no caption)
    shards.json         what was written: counts per split, where the split came from, the source,
                        the photos its split left out ("unlisted") and the other layouts beside
                        it that were not read ("ignored"); written last, so its presence means
                        "complete"

One sample per photo: ``key`` (its file name, or img2dataset's key), ``image`` (the file's
original bytes: a JPEG stays a JPEG, about a tenth of its decoded pixels), ``captions`` (its
captions joined by newlines: litdata wants every sample to have one shape), ``photo`` (its place
in the split) and ``first_caption`` (the id of its first caption in the split: caption ids are
fixed at writing, so a mask drawn from (seed, epoch, caption id) is the same in every run).
Photos are shuffled with a fixed seed before writing, so chunks mix the source's order (an
img2dataset shard is one web domain's crawl order) and reading chunks in order is not sorted.

Inputs: any layout `vitbert.data.layouts` reads (Flickr30k's, Flickr8k's, Karpathy's json, COCO's,
an imagefolder: its split kept, or the hash split; photos its split files leave out are not
written and are counted as ``unlisted``), or an img2dataset webdataset folder (``00000.tar`` ...
with ``<key>.jpg``, ``<key>.txt``, ``<key>.json`` members), split by the same hash of the key
(`layouts.hash_split`).
"""

from __future__ import annotations

import json
import multiprocessing as mp
import random
import shutil
import tarfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from vitbert.data import captioned_photos, layouts
from vitbert.data.cache import SPLITS, BadImageError, DataError, read_photo_bytes
from vitbert.data.files import atomic_write
from vitbert.data.tokenizer import save_tokenizer, train_wordpiece

SHARDS_VERSION = 1
SUMMARY = "shards.json"
TOKENIZER = "tokenizer.json"
SKIPPED = "skipped.json"
IMG2DATASET = "img2dataset"
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp")
CHECK_SIZE = 64  # photos are checked by decoding at >= this side (JPEG draft mode: fast)


@dataclass(frozen=True)
class PhotoRef:
    """Where one photo's bytes are (a file, or a member of a tar) and what it is captioned."""

    key: str
    captions: tuple[str, ...]
    split: str
    path: str  # the photo file, or the tar holding it
    offset: int = -1  # a tar member's data offset in the tar; -1 for a plain file
    size: int = 0  # a tar member's size

    def read(self) -> bytes:
        if self.offset < 0:
            return Path(self.path).read_bytes()
        with open(self.path, "rb") as fh:  # a member of an uncompressed tar is a byte range
            fh.seek(self.offset)
            return fh.read(self.size)

    def where(self) -> str:
        return self.path if self.offset < 0 else f"{self.path} member {self.key}"


# ----------------------------------------------------------------------------- reading the source


def img2dataset_photos(folder: Path) -> list[PhotoRef]:
    """An img2dataset webdataset folder: every ``*.tar``'s samples, grouped by member stem.

    img2dataset writes, per sample, ``<key>.jpg`` (or the ``--encode_format``), ``<key>.txt``
    (the caption) and ``<key>.json`` (url, caption, size, ...); a sample without an image or
    without a caption is kept here and reported as skipped by the check.
    """
    photos = []
    for tar_path in sorted(folder.glob("*.tar")):
        samples: dict[str, dict[str, Any]] = {}
        try:
            with tarfile.open(tar_path) as tar:
                for member in tar:
                    if not member.isfile():
                        continue
                    stem, _, ext = member.name.rpartition(".")
                    sample = samples.setdefault(stem, {})
                    if f".{ext.lower()}" in IMAGE_SUFFIXES:
                        sample["image"] = (member.offset_data, member.size)
                    elif ext in ("txt", "json"):
                        sample[ext] = tar.extractfile(member).read().decode("utf-8", "replace")
        except tarfile.TarError as error:
            raise DataError(f"{tar_path}: not a readable tar ({error}); re-run img2dataset for "
                            f"this shard or remove it") from error
        for stem, sample in samples.items():
            key = Path(stem).name
            caption = (sample.get("txt") or "").strip()
            if not caption and "json" in sample:
                caption = str(json.loads(sample["json"]).get("caption") or "").strip()
            offset, size = sample.get("image", (-2, 0))  # -2: no image member (reported)
            photos.append(PhotoRef(key, (caption,) if caption else (), layouts.hash_split(key),
                                   str(tar_path), offset, size))
    return photos


def source_photos(source: str | Path, fmt: str = "auto", images_dir: str | None = None
                  ) -> tuple[list[PhotoRef], dict[str, Any]]:
    """(photos, what the source is) of a folder in any layout vitbert reads."""
    source = Path(source)
    if not source.is_dir():
        raise DataError(f"--from {source} is not a folder; give a folder of captioned photos "
                        f"(docs/training.md) or an img2dataset output folder (00000.tar, ...)")
    if fmt in ("auto", IMG2DATASET) and any(source.glob("*.tar")):
        return img2dataset_photos(source), {
            "format": IMG2DATASET, "source": str(source.resolve()),
            "split": {"rule": "sha1", "val": layouts.VAL_FRACTION,
                      "test": layouts.TEST_FRACTION}}
    if fmt == IMG2DATASET:
        raise DataError(f"{source}: no .tar files; img2dataset --output_format webdataset "
                        f"writes 00000.tar, 00001.tar, ... there")
    copy = captioned_photos.locate(source, fmt, images_dir)
    photos = [PhotoRef(r.file, tuple(r.captions), r.split, str(copy.img_dir / r.file))
              for r in copy.records]
    settings = captioned_photos.cache_settings(copy, 0)
    return photos, {"format": copy.fmt, "source": settings["source"],
                    "split": settings["split"], "unlisted": len(copy.parsed.unlisted),
                    "ignored": copy.parsed.ignored}


# ----------------------------------------------------------------------------- checking


def check_photo(photo: PhotoRef) -> str | None:
    """Why ``photo`` cannot be trained on (None: it can): no caption, or an image that the
    training decoder (`cache.read_photo_bytes`) cannot read, truncated included."""
    if not photo.captions:
        return "no caption"
    if photo.offset == -2:
        return "no image member in the tar"
    try:
        read_photo_bytes(photo.read(), at_least=CHECK_SIZE)
    except FileNotFoundError:
        return "missing file"
    except BadImageError as error:
        return str(error)
    return None


def check_photos(photos: Sequence[PhotoRef], workers: int) -> list[str | None]:
    """:func:`check_photo` of every photo, in ``workers`` processes (0: this one)."""
    bar = {"total": len(photos), "desc": "checking photos", "unit": "img"}
    if workers <= 0:
        return [check_photo(p) for p in tqdm(photos, **bar)]
    ctx = mp.get_context("fork") if "fork" in mp.get_all_start_methods() else mp.get_context()
    with ctx.Pool(workers) as pool:
        return list(tqdm(pool.imap(check_photo, photos, chunksize=64), **bar))


# ----------------------------------------------------------------------------- writing


def _sample(item: tuple[PhotoRef, int, int]) -> dict[str, Any]:
    """One litdata sample (see the module's docstring); run by `litdata.optimize`'s workers."""
    photo, place, first_caption = item
    return {"key": photo.key, "image": photo.read(), "captions": "\n".join(photo.captions),
            "photo": place, "first_caption": first_caption}


def write_split(photos: Sequence[PhotoRef], out: Path, workers: int, chunk_bytes: str) -> None:
    """One split's litdata dataset at ``out``, in the order given (already shuffled)."""
    import litdata

    items, first = [], 0
    for place, photo in enumerate(photos):
        items.append((photo, place, first))
        first += len(photo.captions)
    # keep_data_ordered and no reordering: the chunks hold the photos in the shuffled order, so
    # the photo places and caption ids above are where each sample lands.
    litdata.optimize(fn=_sample, inputs=items, output_dir=str(out), chunk_bytes=chunk_bytes,
                     num_workers=max(1, workers), reorder_files=False, keep_data_ordered=True,
                     start_method="fork", mode="overwrite", verbose=False)


def write_shards(
    source: str | Path,
    out: str | Path,
    fmt: str = "auto",
    images_dir: str | None = None,
    workers: int = 0,
    seed: int = 0,
    vocab_size: int = 8000,
    min_frequency: int = 2,
    chunk_bytes: str = "64MB",
    max_bad_fraction: float = 0.05,
    force: bool = False,
) -> dict[str, Any]:
    """Write the shard folder ``out`` from ``source`` (see the module's docstring); returns the
    summary written to shards.json."""
    t0 = time.perf_counter()
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        if not force:
            raise DataError(f"{out} is not empty; pass --force to replace it, or another --out")
        shutil.rmtree(out)
    photos, origin = source_photos(source, fmt, images_dir)
    if not photos:
        raise DataError(f"{source}: no photos found ({origin['format']} layout)")
    reasons = check_photos(photos, workers)
    skipped = [{"key": p.key, "where": p.where(), "why": why}
               for p, why in zip(photos, reasons, strict=True) if why]
    if len(skipped) > max_bad_fraction * len(photos):
        first = "; ".join(f"{s['where']} ({s['why']})" for s in skipped[:5])
        raise DataError(f"{source}: {len(skipped)} of {len(photos)} photos cannot be used, more "
                        f"than max_bad_fraction={max_bad_fraction}; first few: {first}. Fix the "
                        f"files or raise --max-bad-fraction")
    good = [p for p, why in zip(photos, reasons, strict=True) if not why]
    random.Random(seed).shuffle(good)
    out.mkdir(parents=True, exist_ok=True)
    by_split = {s: [p for p in good if p.split == s] for s in SPLITS}
    for split, members in by_split.items():
        if members:
            write_split(members, out / split, workers, chunk_bytes)
    train_captions = [c for p in by_split["train"] for c in p.captions]
    if not train_captions:
        raise DataError(f"{source}: no usable photo landed in train; nothing to train on")
    save_tokenizer(train_wordpiece(train_captions, vocab_size, min_frequency), out / TOKENIZER)
    atomic_write(out / SKIPPED, json.dumps({"skipped": len(skipped), "photos": skipped},
                                           indent=1))
    found = {"unlisted": origin.pop("unlisted", 0), "ignored": origin.pop("ignored", [])}
    summary = {
        "version": SHARDS_VERSION,
        "settings": {**origin, "seed": seed, "vocab_size": vocab_size,
                     "min_frequency": min_frequency},
        **found,  # photos the layout's split left out; other layouts beside it, not read
        "images": len(good), "captions": sum(len(p.captions) for p in good),
        "splits": {s: len(m) for s, m in by_split.items()},
        "split_captions": {s: sum(len(p.captions) for p in m) for s, m in by_split.items()},
        "skipped": len(skipped), "build_seconds": round(time.perf_counter() - t0, 2),
    }
    atomic_write(out / SUMMARY, json.dumps(summary, indent=2))  # last: marks the folder complete
    return summary
