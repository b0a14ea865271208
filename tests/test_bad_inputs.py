"""One table of bad and odd inputs, and what the project does with each.

Read ``ROWS`` top to bottom: a row names the input, how the test makes it, and the promised
outcome, one of

* ``Kept(check)``: used, after conversion; ``check`` looks at the result (e.g. transparent pixels
  came out white);
* ``Skipped(reason)``: left out of the cache and *counted*: the build's summary says one skipped,
  and its warning names the file and the reason;
* ``Refused(error, message)``: stops with ``error`` whose message matches ``message`` (naming the
  file or value and the fix), and nothing is written half-way.

Every row runs through public functions (``captioned_photos.build_cache`` /
``layouts.read_annotations``, ``cache.decode_image``, ``FillMask``, ``read_checkpoint``,
``LastCheckpoint.save``), so the rows stay valid while the insides change.
"""

from __future__ import annotations

import errno
import io
import json
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fsspec.implementations.local as fsspec_local
import lightning as L
import numpy as np
import pytest
import torch
from lightning.pytorch.demos.boring_classes import BoringModel
from PIL import Image

from vitbert.data import captioned_photos, layouts
from vitbert.data.cache import DataError, decode_image
from vitbert.data.masking import MLMCollator
from vitbert.data.tokenizer import tokenizer_to_json, train_wordpiece
from vitbert.io import CheckpointError, read_checkpoint
from vitbert.lit.module import MaskedLMModule
from vitbert.models import VitBert, VitBertConfig
from vitbert.models.config import ImageTowerConfig, TextTowerConfig
from vitbert.predict import FillMask, PredictError
from vitbert.run.checkpoints import LastCheckpoint

SIZE = 32  # decoded picture size
CAPTIONS = ["a red square left of a blue circle .", "a small green circle above a square ."]


# -- outcomes ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Kept:
    check: Callable[[Any], bool] = lambda result: True


@dataclass(frozen=True)
class Skipped:
    reason: str


@dataclass(frozen=True)
class Refused:
    error: type[BaseException]
    message: str  # a regular expression the message must match


class Context:
    """What a row's run may need beyond its folder; module fixtures are made on first use."""

    def __init__(self, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
        self.request, self.monkeypatch = request, monkeypatch

    @property
    def tiny(self) -> tuple[FillMask, VitBertConfig]:
        return self.request.getfixturevalue("tiny")

    @property
    def trainer(self) -> L.Trainer:
        return self.request.getfixturevalue("trainer")


# -- photos: each row writes one file; the cache is built from it and three good photos ---------


def _rgb(path: Path, pixels: np.ndarray, mode: str | None = None, **save: Any) -> None:
    img = Image.fromarray(pixels)
    (img.convert(mode) if mode else img).save(path, **save)


def _halves() -> np.ndarray:
    """64 wide x 48 tall: red on the left, blue on the right."""
    a = np.zeros((48, 64, 3), np.uint8)
    a[:, :32, 0], a[:, 32:, 2] = 220, 220
    return a


def _jpeg_bytes(pixels: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, "JPEG")
    return buf.getvalue()


def truncated(p: Path) -> None:
    p.write_bytes(_jpeg_bytes(_halves())[:300])


def bomb(p: Path) -> None:
    """A tiny file whose header claims 65535 x 65535 pixels (4.3 G, over PIL's bomb limit)."""
    data = bytearray(_jpeg_bytes(_halves()))
    sof = data.index(b"\xff\xc0")  # baseline frame header: length, precision, height, width
    data[sof + 5 : sof + 9] = b"\xff\xff\xff\xff"
    p.write_bytes(bytes(data))


def rgba(p: Path) -> None:
    a = np.zeros((48, 64, 4), np.uint8)
    a[..., 0] = 255
    a[:, 32:, 3] = 255  # the left half fully transparent: laid on white
    _rgb(p, a)


def sixteen_bit(p: Path) -> None:
    Image.fromarray(np.full((48, 64), 32768, np.uint16)).save(p)  # half scale: grey ~128


def exif_rotated(p: Path) -> None:
    """Shown upright, red is on top and blue below; stored turned a quarter, Orientation = 6."""
    upright = np.zeros((64, 48, 3), np.uint8)
    upright[:32, :, 0], upright[32:, :, 2] = 220, 220
    stored = Image.fromarray(upright).transpose(Image.Transpose.ROTATE_90)
    exif = Image.Exif()
    exif[0x0112] = 6
    stored.save(p, exif=exif, quality=95)


def left_red_right_blue(x: np.ndarray) -> bool:
    r, b = x[0].astype(int), x[2].astype(int)
    return (r[:, :12] - b[:, :12]).min() > 100 and (b[:, -12:] - r[:, -12:]).min() > 100


def red_on_top(x: np.ndarray) -> bool:
    r, b = x[0].astype(int), x[2].astype(int)
    return (r[:12] - b[:12]).min() > 100 and (b[-12:] - r[-12:]).min() > 100


def grey(x: np.ndarray) -> bool:
    return bool((x[0] == x[1]).all() and (x[1] == x[2]).all())


def transparent_is_white(x: np.ndarray) -> bool:
    return bool((x[:, :, :12] > 245).all() and (x[0, :, -12:] > 245).all()
                and (x[1:, :, -12:] < 10).all())


def mid_grey(x: np.ndarray) -> bool:
    return bool(grey(x) and (np.abs(x.astype(int) - 128) <= 1).all())


def photo(write: Callable[[Path], None] | None, suffix: str = ".jpg"):
    """Run: build a Karpathy-format cache of three good photos plus this one."""

    def run(tmp: Path, ctx: Context) -> Any:
        images = tmp / "flickr30k-images"
        images.mkdir(parents=True)
        names = [f"good{i}.jpg" for i in range(3)] + [f"odd{suffix}"]
        for name in names[:3]:
            _rgb(images / name, _halves())
        if write is not None:
            write(images / names[3])
        entries = [{"filename": n, "split": "train", "sentences": [{"raw": CAPTIONS[0]}]}
                   for n in names]
        (tmp / "dataset_flickr30k.json").write_text(json.dumps({"images": entries}))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            summary = captioned_photos.build_cache(tmp, tmp / "cache", SIZE, max_bad_fraction=0.5)
        said = " ".join(str(w.message) for w in caught)
        if summary["skipped"]:
            return summary["skipped"], said
        return decode_image(images / names[3], SIZE)

    return run


# -- annotation files: each row writes a token-format file (or a Karpathy JSON) ------------------


def token_file(text: str | bytes, name: str = "results_20130124.token"):
    """Run: parse the file (with one good photo on disk), returning the parsed records."""

    def run(tmp: Path, ctx: Context) -> Any:
        (tmp / "flickr30k-images").mkdir(parents=True)
        _rgb(tmp / "flickr30k-images" / "a.jpg", _halves())
        data = text.encode() if isinstance(text, str) else text
        (tmp / name).write_bytes(data)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            summary = captioned_photos.build_cache(tmp, tmp / "cache", SIZE, max_bad_fraction=0.5)
        _, _, parsed = layouts.read_annotations(tmp)
        said = " ".join(str(w.message) for w in caught)
        return (summary["skipped"], said) if summary["skipped"] else parsed.records

    return run


def lines(*captions: str, newline: str = "\n", bom: bool = False) -> str:
    body = newline.join(f"a.jpg#{k}\t{c}" for k, c in enumerate(captions)) + newline
    return ("\ufeff" if bom else "") + body


def karpathy(image: dict[str, Any], bom: bool = False):
    return token_file(("\ufeff" if bom else "") + json.dumps({"images": [image]}),
                      name="dataset_flickr30k.json")


def captions_are(*expected: str) -> Callable[[Any], bool]:
    return lambda records: [(r.file, r.captions) for r in records] == [("a.jpg", list(expected))]


LONG = " ".join(["a red square left of a blue circle"] * 40)


def collated_at_most(n: int) -> Callable[[Any], bool]:
    def check(records: Any) -> bool:
        tok = train_wordpiece(CAPTIONS, 100, 1)
        batch = MLMCollator(tok, max_length=n)([{"image": np.zeros((3, 2, 2), np.uint8),
                                                 "caption": records[0].captions[0], "index": 0}])
        return records[0].captions == [LONG] and batch["input_ids"].shape[1] == n

    return check


# -- the model's inputs and files ----------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """An untrained tiny model and its tokenizer (the outcomes do not depend on training)."""
    tok = train_wordpiece(CAPTIONS, 100, 1)
    config = VitBertConfig(ImageTowerConfig(dim=16, depth=1, num_heads=2, stem_hidden_dim=8),
                           TextTowerConfig(dim=16, depth=1, num_heads=2, max_len=16),
                           vocab_size=len(tok))
    model = VitBert(config)
    return FillMask(model, tok, device="cpu"), config


def fill(text: str):
    return lambda tmp, ctx: ctx.tiny[0](text, image=None)


def foreign_ckpt(tmp: Path, ctx: Context) -> Any:
    torch.save({"model": {"weight": torch.zeros(2)}, "epoch": 3}, tmp / "other.ckpt")
    return read_checkpoint(tmp / "other.ckpt")


def other_vocabulary(tmp: Path, ctx: Context) -> Any:
    """`train.py predict --ckpt_path`: the checkpoint's tokenizer against the data's."""
    fill_mask, config = ctx.tiny
    module = MaskedLMModule(net=config)
    module.tokenizer = train_wordpiece(["a dog runs on the grass .", "two men talk ."], 100, 1)
    module.on_load_checkpoint({"vitbert_tokenizer": tokenizer_to_json(fill_mask.tokenizer)})


@pytest.fixture(scope="module")
def trainer(tmp_path_factory):
    """A finished one-step fit, so ``LastCheckpoint.save`` has something to write."""
    trainer = L.Trainer(max_steps=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False,
                        default_root_dir=tmp_path_factory.mktemp("fit"), accelerator="cpu")
    trainer.fit(BoringModel())
    return trainer


def checkpoint_folder(failure: str):
    """Run: write last.ckpt once, then again with the folder failing; return nothing."""

    def run(tmp: Path, ctx: Context) -> Any:
        trainer, monkeypatch = ctx.trainer, ctx.monkeypatch
        callback = LastCheckpoint(dirpath=str(tmp))
        previous = callback.save(trainer).read_bytes()
        real_write = fsspec_local.LocalFileOpener.write

        def full(self, data):  # half the bytes reach the disk, then it is full
            real_write(self, data[: len(data) // 2])
            raise OSError(errno.ENOSPC, "No space left on device")

        def read_only(*args, **kwargs):
            raise OSError(errno.EROFS, "Read-only file system")

        if failure == "full":
            monkeypatch.setattr(fsspec_local.LocalFileOpener, "write", full)
        else:
            monkeypatch.setattr(fsspec_local.LocalFileOpener, "_open", read_only)
        try:
            callback.save(trainer)
        finally:
            monkeypatch.undo()
            # Nothing half-written: the old file whole, no temporary file left beside it.
            assert (tmp / "last.ckpt").read_bytes() == previous
            assert [p.name for p in tmp.iterdir()] == ["last.ckpt"]

    return run


# -- the table ------------------------------------------------------------------------------------

NOT_UTF8 = lines(CAPTIONS[0]).encode() + "a.jpg#1\tcafé\n".encode("latin-1")
NO_SPLIT = {"filename": "a.jpg", "sentences": [{"raw": "x"}]}
WITH_SPLIT = {"filename": "a.jpg", "split": "train", "sentences": [{"raw": CAPTIONS[0]}]}
CANNOT_WRITE = r"cannot write .*last.ckpt \({}.*writable --checkpoint.dirpath.*untouched"

ROWS: list[tuple[str, Callable[[Path, Context], Any], Kept | Skipped | Refused]] = [
    # name                        how the input is made                   expected outcome
    ("truncated JPEG",            photo(truncated),                       Skipped("cannot decode")),
    ("zero-byte JPEG",            photo(lambda p: p.write_bytes(b"")),   Skipped("zero-byte file")),
    ("missing JPEG",              photo(None),                            Skipped("missing file")),
    ("non-image named .jpg",      photo(lambda p: p.write_text("hi")),    Skipped("not an image")),
    ("decompression-bomb JPEG",   photo(bomb),                            Skipped("decompression")),
    ("CMYK JPEG",                 photo(lambda p: _rgb(p, _halves(), "CMYK")),
                                                                Kept(left_red_right_blue)),
    ("greyscale JPEG",            photo(lambda p: _rgb(p, _halves(), "L")), Kept(grey)),
    ("RGBA PNG, half transparent", photo(rgba, ".png"),                 Kept(transparent_is_white)),
    ("palette PNG",               photo(lambda p: _rgb(p, _halves(), "P"), ".png"),
                                                                Kept(left_red_right_blue)),
    ("16-bit greyscale PNG",      photo(sixteen_bit, ".png"),             Kept(mid_grey)),
    ("EXIF-rotated phone photo",  photo(exif_rotated),                    Kept(red_on_top)),
    ("empty caption",             token_file(lines(CAPTIONS[0], "")),     Skipped("empty caption")),
    ("whitespace-only caption",   token_file(lines(CAPTIONS[0], " \t ")), Skipped("empty caption")),
    ("over-long caption",         token_file(lines(LONG)),              Kept(collated_at_most(16))),
    ("non-UTF-8 caption",         token_file(NOT_UTF8),
                                  Refused(DataError, r"\.token: not UTF-8 at line 2 .*iconv")),
    ("duplicate image keys",      token_file(lines(CAPTIONS[0]) + lines(CAPTIONS[1])),
                                                                Kept(captions_are(*CAPTIONS))),
    ("CRLF annotation file",      token_file(lines(*CAPTIONS, newline="\r\n")),
                                                                Kept(captions_are(*CAPTIONS))),
    ("BOM annotation file",       token_file(lines(*CAPTIONS, bom=True)),
                                                                Kept(captions_are(*CAPTIONS))),
    ("BOM Karpathy JSON",         karpathy(WITH_SPLIT, bom=True),  Kept(captions_are(CAPTIONS[0]))),
    ("Karpathy JSON, no split",   karpathy(NO_SPLIT),
                                  Refused(DataError, r"\.json: images\[0\] lacks field 'split'")),
    ("text without [MASK]",       fill("a red square ."),
                                  Refused(PredictError, r"no \[MASK\] in 'a red square .': write")),
    ("text over the positions",   fill(f"{LONG} [MASK] ."),
                                  Refused(PredictError, "word pieces long")),
    ("foreign .ckpt",             foreign_ckpt,
                                  Refused(CheckpointError, r"other.ckpt: .*not a vitbert one")),
    ("other vocabulary, predict", other_vocabulary,
                                  Refused(CheckpointError, "vocabulary.*--data.tokenizer")),
    ("checkpoint folder full",    checkpoint_folder("full"),
                                  Refused(OSError, CANNOT_WRITE.format("No space left"))),
    ("checkpoint folder read-only", checkpoint_folder("read-only"),
                                  Refused(OSError, CANNOT_WRITE.format("Read-only"))),
]


@pytest.mark.parametrize(("name", "run", "outcome"), ROWS, ids=[r[0] for r in ROWS])
def test_bad_input(name, run, outcome, tmp_path, request, monkeypatch):
    ctx = Context(request, monkeypatch)
    if isinstance(outcome, Refused):
        with pytest.raises(outcome.error, match=outcome.message):
            run(tmp_path, ctx)
    elif isinstance(outcome, Skipped):
        skipped, warning = run(tmp_path, ctx)
        assert skipped == 1, warning
        assert "odd" in warning or "a.jpg" in warning  # the file is named
        assert outcome.reason in warning
    else:
        result = run(tmp_path, ctx)
        assert not (isinstance(result, tuple) and isinstance(result[0], int)), f"skipped: {result}"
        assert outcome.check(result), name
