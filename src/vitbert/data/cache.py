"""The image cache: every picture decoded once, resized, centre-cropped, stored as uint8 on disk.

Training reads only the cache; JPEG decoding cannot keep a GPU fed, a memory-mapped uint8 array can.
Both data sets (Flickr30k and the generated shapes) are written in this one format, so one
`CaptionDataset` reads both. A cache folder holds:

    images.npy        (R, 3, S, S) uint8, a plain .npy opened with np.load(mmap_mode="r")
    annotations.json  columnar: "files" (R, source name per row), "rows" / "texts" / "splits"
                      (one entry per caption: the image row, the caption, train|val|test)
    cache.json        the settings it was built with (format, image_size, source fingerprint,
                      split rule) and the counts; written last, so its presence means "complete"

Rows of images that failed to decode stay in images.npy (zeros) but no caption points at them:
skipping them would need a second pass or a copy of the whole array.

Why a numpy memmap rather than a `datasets` Arrow dataset saved to disk: measured here (2 busy
CPU cores, one process, random single-image reads of 2,000 images of 3x224x224;
`benchmarks.data.compare_storage`): numpy memmap 14,800 images/s, Arrow (a fixed-shape
Array3D uint8 column, `with_format("numpy")`) 910 images/s; written in 1.9 s vs 9.3 s. A memmap
read is one slice of the page cache copied into a tensor; Arrow's row access goes through its
table, formatting and nested-list layers. Arrow earns its place for variable-sized records; ours
are all (3, S, S), and the memmap lets every decoding worker write its own rows in place.
"""

from __future__ import annotations

import hashlib
import io
import json
import multiprocessing as mp
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image, ImageFile, ImageOps, UnidentifiedImageError
from torch.utils.data import Dataset
from tqdm.auto import tqdm

from .files import atomic_write

CACHE_VERSION = 2  # 2: resize_center_crop by PIL.ImageOps.fit
SPLITS = ("train", "val", "test")


class DataError(ValueError):
    """Input that cannot be used as it is; the message names the file, the field and the fix."""


class BadImageError(Exception):
    """One image that cannot be decoded; the message says why."""


# ----------------------------------------------------------------------------- decoding


def to_rgb(img: Image.Image) -> Image.Image:
    """Any PIL mode -> RGB: CMYK / palette / grey converted, alpha laid on white, 16-bit scaled.

    PIL's `convert("RGB")` clips 16-bit ('I;16', 'I') values at 255 instead of scaling them, and
    drops alpha onto black; both would give a wrong picture rather than an error, so we handle them.
    """
    if img.mode in ("I;16", "I;16B", "I;16L", "I", "F"):
        a = np.asarray(img, dtype=np.float32)
        hi = 65535.0 if img.mode.startswith("I;16") else max(float(a.max()), 1.0)
        a = np.clip(a / hi * 255.0 + 0.5, 0, 255).astype(np.uint8)
        return Image.fromarray(a).convert("RGB")  # 2-D uint8 -> mode L
    if img.mode == "P" and "transparency" in img.info:
        img = img.convert("RGBA")
    if img.mode in ("RGBA", "LA", "PA", "RGBa", "La"):
        rgba = img.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(background, rgba).convert("RGB")
    return img.convert("RGB") if img.mode != "RGB" else img


def resize_center_crop(img: Image.Image, size: int) -> np.ndarray:
    """Resize the shorter side to `size`, crop the centre square; returns uint8 (3, size, size).

    `ImageOps.fit` crops the centre square in the source's coordinates and resamples only it
    (bicubic). Up to cache version 1 this was resize-then-crop by hand, which rounded the crop
    offset down to whole pixels (up to half a pixel off centre) and pre-shrank large reductions:
    on skimage's photos the two agree exactly where the offset is whole and differ by < 4 grey
    levels on average where it is not (tests/data/test_resize.py), hence cache version 2.
    """
    img = ImageOps.fit(img, (size, size), Image.Resampling.BICUBIC)
    return np.array(img, dtype=np.uint8).transpose(2, 0, 1)  # (H, W, 3) -> (3, S, S), writable


def read_photo(path: str | Path, at_least: int | None = None) -> Image.Image:
    """A user's photo file as an upright RGB PIL image: the one reader of every photo a user gives.

    The training cache (:func:`decode_image`), the demo's uploads and ``--examples``,
    ``scripts/predict.py --image``, ``scripts/caption.py --image`` and ``FillMask`` /
    ``Captioner`` given a path all come here, so a photo that one of them reads, all of them read,
    the same way. It reads what people have: JPEG (CMYK too), PNG
    (RGBA laid on white, palette, grey, 16-bit), WebP, ...; a phone photo stored sideways with an
    EXIF Orientation tag is turned upright; the pixels are decoded before the file is closed.

    ``at_least``: a JPEG may be decoded at 1/2, 1/4 or 1/8 scale while both sides stay at least
    this long (libjpeg's draft mode: 3-5x faster). With the model's image size this is what the
    training cache does, so a photo meets the model as its training photos did. Raises
    :class:`BadImageError` whose message says why (the caller names the file: it knows how the
    user called it).
    """
    path = Path(path)
    if not path.is_file():
        raise BadImageError("missing file")
    if path.stat().st_size == 0:
        raise BadImageError("zero-byte file")
    return _open_photo(path, at_least)


def read_photo_bytes(data: bytes, at_least: int | None = None) -> Image.Image:
    """:func:`read_photo` of a photo file's bytes (a streamed shard holds them as they were on
    disk, `vitbert.streaming.shards`): the same checks, conversions and draft decoding."""
    if not data:
        raise BadImageError("zero-byte file")
    return _open_photo(io.BytesIO(data), at_least)


def _open_photo(file: Path | io.BytesIO, at_least: int | None) -> Image.Image:
    try:
        ImageFile.LOAD_TRUNCATED_IMAGES = False  # a truncated JPEG is an error, not a grey stripe
        with Image.open(file) as img:
            if at_least is not None and img.format == "JPEG":
                img.draft("RGB", (at_least, at_least))
            img.load()
            return to_rgb(ImageOps.exif_transpose(img))  # a new image: the file may close
    except UnidentifiedImageError:
        raise BadImageError("cannot identify image file (not an image, or a format Pillow "
                            "cannot read)") from None
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as error:
        raise BadImageError(f"cannot decode: {error}") from None


def decode_image(path: str | Path, size: int) -> np.ndarray:
    """Read one image file as uint8 (3, size, size); raises BadImageError saying what is wrong."""
    return resize_center_crop(read_photo(path, at_least=size), size)


def decode_image_bytes(data: bytes, size: int) -> np.ndarray:
    """:func:`decode_image` of a photo file's bytes: uint8 (3, size, size), the cache's resize."""
    return resize_center_crop(read_photo_bytes(data, at_least=size), size)


# ----------------------------------------------------------------------------- writing

_worker_state: dict[str, Any] = {}


def _init_worker(npy_path: str, size: int) -> None:
    _worker_state["images"] = np.load(npy_path, mmap_mode="r+")
    _worker_state["size"] = size


def _decode_into(job: tuple[int, str]) -> tuple[int, str | None]:
    row, path = job
    try:
        _worker_state["images"][row] = decode_image(path, _worker_state["size"])
        return row, None
    except BadImageError as e:
        return row, str(e)


def decode_all_into(
    npy_path: Path, paths: Sequence[str], size: int, workers: int = 0, desc: str = "decoding"
) -> dict[int, str]:
    """Decode `paths[r]` into row r of the .npy at `npy_path`; returns {row: reason} for failures.

    Each worker process opens the memmap itself and writes its rows, so pixels never travel
    through a pipe. `workers=0` decodes in this process (tests, debugging).
    """
    jobs = list(enumerate(paths))
    bad: dict[int, str] = {}
    if workers <= 0:
        _init_worker(str(npy_path), size)
        results = map(_decode_into, jobs)
        for row, err in tqdm(results, total=len(jobs), desc=desc, unit="img", leave=False):
            if err:
                bad[row] = err
        _worker_state["images"].flush()
        _worker_state.clear()
        return bad
    # fork: workers inherit the imported modules, no re-import of torch per worker.
    ctx = mp.get_context("fork") if "fork" in mp.get_all_start_methods() else mp.get_context()
    with ctx.Pool(workers, initializer=_init_worker, initargs=(str(npy_path), size)) as pool:
        results = pool.imap_unordered(_decode_into, jobs, chunksize=64)
        for row, err in tqdm(results, total=len(jobs), desc=desc, unit="img", leave=False):
            if err:
                bad[row] = err
    return bad


def new_image_array(out: Path, n: int, size: int) -> np.memmap:
    """Create images.npy for n pictures (3, size, size), zero-filled, memory-mapped for writing."""
    out.mkdir(parents=True, exist_ok=True)
    return np.lib.format.open_memmap(out / "images.npy", mode="w+", dtype=np.uint8,
                                     shape=(n, 3, size, size))


def write_annotations(
    out: Path, files: Sequence[str], rows: Sequence[int], texts: Sequence[str],
    splits: Sequence[str], settings: dict[str, Any], extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Write annotations.json and then cache.json (last: it marks the cache complete)."""
    ann = {"files": list(files), "rows": [int(r) for r in rows], "texts": list(texts),
           "splits": list(splits)}
    atomic_write(out / "annotations.json", json.dumps(ann))
    split_images = {s: len({r for r, sp in zip(rows, splits, strict=True) if sp == s})
                    for s in SPLITS}
    split_captions = {s: sum(sp == s for sp in splits) for s in SPLITS}
    meta = {"settings": settings, "images": len(set(rows)), "captions": len(texts),
            "splits": split_images, "split_captions": split_captions, **(extra or {})}
    atomic_write(out / "cache.json", json.dumps(meta, indent=2))
    return meta


def start_build(out: Path) -> None:
    """Invalidate an old cache before overwriting it: cache.json goes first."""
    (out / "cache.json").unlink(missing_ok=True)
    out.mkdir(parents=True, exist_ok=True)


def read_meta(out: str | Path) -> dict[str, Any] | None:
    """The cache.json of a complete cache, or None."""
    p = Path(out) / "cache.json"
    if not p.is_file():
        return None
    try:
        return json.loads(p.read_text())
    except json.JSONDecodeError:
        return None


def is_current(out: str | Path, settings: dict[str, Any]) -> bool:
    """True when a complete cache at `out` was built with exactly these settings."""
    meta = read_meta(out)
    return (meta is not None and meta.get("settings") == settings
            and (Path(out) / "images.npy").is_file() and (Path(out) / "annotations.json").is_file())


def fingerprint(files: Sequence[Path], image_paths: Sequence[Path] = ()) -> str:
    """Hash of the annotation files' bytes and the images' (name, size, mtime): cheap, and it
    changes when a file is added, removed, replaced or edited."""
    h = hashlib.sha256()
    for f in files:
        h.update(Path(f).name.encode())
        h.update(Path(f).read_bytes())
    for p in image_paths:
        try:
            st = os.stat(p)
            h.update(f"{Path(p).name}:{st.st_size}:{st.st_mtime_ns}\n".encode())
        except FileNotFoundError:
            h.update(f"{Path(p).name}:missing\n".encode())
    return h.hexdigest()[:16]


def remove_cache(out: str | Path) -> None:
    shutil.rmtree(out, ignore_errors=True)


def image_array(out: str | Path) -> np.ndarray:
    """The cache's pictures, (R, 3, S, S) uint8, memory-mapped read-only (row r = photo r)."""
    return np.load(Path(out) / "images.npy", mmap_mode="r")


# ----------------------------------------------------------------------------- reading


class CaptionDataset(Dataset):
    """One example per caption of one split, read from a cache folder.

    Item: {"image": uint8 tensor (3, S, S), "caption": str, "index": int (position in this split),
    "row": int (image row in the cache)}. The memmap is opened lazily in each worker process.
    """

    def __init__(self, cache_dir: str | Path, split: str):
        self.cache_dir = Path(cache_dir)
        meta = read_meta(self.cache_dir)
        if meta is None:
            raise DataError(f"{self.cache_dir}: no complete image cache here (cache.json missing);"
                            f" build it with scripts/prepare_data.py or the DataModule's"
                            f" prepare_data")
        if split not in SPLITS:
            raise DataError(f"split {split!r} is not one of {SPLITS}")
        ann = json.loads((self.cache_dir / "annotations.json").read_text())
        keep = [i for i, s in enumerate(ann["splits"]) if s == split]
        self.split = split
        self.files: list[str] = ann["files"]
        self.rows = np.array([ann["rows"][i] for i in keep], dtype=np.int64)
        self.captions: list[str] = [ann["texts"][i] for i in keep]
        self.image_size = int(meta["settings"]["image_size"])
        self._images: np.ndarray | None = None

    @property
    def images(self) -> np.ndarray:
        if self._images is None:
            self._images = image_array(self.cache_dir)
        return self._images

    def __len__(self) -> int:
        return len(self.captions)

    def __getitem__(self, i: int) -> dict[str, Any]:
        row = int(self.rows[i])
        image = torch.from_numpy(np.array(self.images[row]))  # (3, S, S) uint8, copied off the map
        return {"image": image, "caption": self.captions[i], "index": i, "row": row}

    def __getstate__(self) -> dict[str, Any]:  # never pickle the memmap into workers
        state = self.__dict__.copy()
        state["_images"] = None
        return state
