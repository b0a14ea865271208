"""One reader for every photo a user gives (``vitbert.predict.read_photo``): FillMask, Captioner,
scripts/predict.py and scripts/caption.py read a phone's sideways JPEG, a CMYK JPEG and an RGBA
PNG, and meet the model with exactly the pixels the training cache would have given it."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from helpers import load_script, red_over_blue, save_sideways
from PIL import Image

from vitbert.data.cache import BadImageError, decode_image
from vitbert.predict import load_image, read_photo  # read_photo: data.cache's, re-exported


@pytest.fixture
def photos(tmp_path):
    """Files of every kind, by name."""
    files = {
        "large jpeg": tmp_path / "large.jpg",
        "phone jpeg": tmp_path / "phone.jpg",
        "cmyk jpeg": tmp_path / "cmyk.jpg",
        "rgba png": tmp_path / "rgba.png",
        "palette png": tmp_path / "palette.png",
        "16-bit png": tmp_path / "deep.png",
    }
    red_over_blue(1024, 768).save(files["large jpeg"], quality=90)
    save_sideways(red_over_blue(400, 300), files["phone jpeg"], quality=90)
    red_over_blue(320, 240).convert("CMYK").save(files["cmyk jpeg"], quality=90)
    rgba = np.zeros((40, 60, 4), np.uint8)
    rgba[:, 30:] = (30, 180, 30, 255)  # left half transparent
    Image.fromarray(rgba, "RGBA").save(files["rgba png"])
    red_over_blue(60, 40).convert("P").save(files["palette png"])
    Image.fromarray(np.full((40, 60), 30000, np.uint16)).save(files["16-bit png"])
    return files


def test_every_kind_is_read_upright_in_rgb(photos):
    for kind, path in photos.items():
        photo = read_photo(path)
        assert photo.mode == "RGB", kind
    assert read_photo(photos["large jpeg"]).size == (1024, 768)
    phone = np.asarray(read_photo(photos["phone jpeg"]))
    assert phone.shape[:2] == (300, 400)  # stored 300 wide × 400 high: turned upright
    for kind in ("phone jpeg", "cmyk jpeg", "palette png"):
        image = np.asarray(read_photo(photos[kind])).astype(int)
        h = image.shape[0]
        top, bottom = image[: h // 4].mean(axis=(0, 1)), image[-h // 4 :].mean(axis=(0, 1))
        assert top[0] > 150 > top[2] and bottom[2] > 150 > bottom[0], (kind, top, bottom)
    rgba = np.asarray(read_photo(photos["rgba png"]))
    assert (rgba[20, 5] == 255).all() and tuple(rgba[20, 50]) == (30, 180, 30)  # alpha on white
    deep = np.asarray(read_photo(photos["16-bit png"]))
    assert abs(int(deep[0, 0, 0]) - round(30000 / 65535 * 255)) <= 1  # scaled, not clipped


def test_a_jpeg_is_decoded_smaller_but_never_below_at_least(photos):
    """libjpeg's 1/2, 1/4, 1/8 scales, the largest that keeps both sides ≥ ``at_least``."""
    assert read_photo(photos["large jpeg"], at_least=100).size == (256, 192)  # 1/4
    assert read_photo(photos["large jpeg"], at_least=32).size == (128, 96)  # 1/8
    assert read_photo(photos["large jpeg"], at_least=640).size == (1024, 768)  # whole
    assert read_photo(photos["phone jpeg"], at_least=100).size == (200, 150)  # 1/2, upright
    assert read_photo(photos["rgba png"], at_least=10).size == (60, 40)  # JPEG only


def test_a_path_meets_the_model_exactly_as_the_training_cache_reads_it(photos):
    for kind, path in photos.items():
        expected = torch.from_numpy(decode_image(path, 32))
        assert torch.equal(load_image(path, 32), expected), kind
        assert torch.equal(load_image(str(path), 32), expected), kind


def test_unreadable_files_say_why_and_name_the_file(tmp_path):
    cases = {
        "missing.jpg": (None, "missing file"),
        "empty.jpg": (b"", "zero-byte file"),
        "noise.jpg": (b"no photo here" * 20, "cannot identify image file"),
    }
    for name, (data, reason) in cases.items():
        if data is not None:
            (tmp_path / name).write_bytes(data)
        with pytest.raises(BadImageError, match=reason):
            read_photo(tmp_path / name)
        with pytest.raises(BadImageError, match=rf"{name}: {reason}.*pass a readable image"):
            load_image(tmp_path / name, 32)
    whole = tmp_path / "whole.jpg"
    red_over_blue(300, 200).save(whole)
    data = whole.read_bytes()
    (tmp_path / "cut.jpg").write_bytes(data[: len(data) // 2])
    with pytest.raises(BadImageError, match="cannot decode: image file is truncated"):
        read_photo(tmp_path / "cut.jpg")


@pytest.fixture
def sideways_pair(tmp_path):
    """The same picture as an upright PNG, stored sideways with the EXIF tag, and stored sideways
    without it (PNG: lossless, so the first two hold exactly the same picture)."""
    upright, sideways, unturned = tmp_path / "up.png", tmp_path / "side.png", tmp_path / "raw.png"
    image = red_over_blue(48, 40)
    image.save(upright)
    save_sideways(image, sideways)
    image.transpose(Image.Transpose.ROTATE_90).save(unturned)
    return upright, sideways, unturned


def test_fill_mask_and_captioner_read_a_sideways_photo_upright(fill_mask, trained, sideways_pair):
    from vitbert import Captioner

    upright, sideways, unturned = sideways_pair
    text = "a small [MASK] circle above a large square"
    scores = lambda path: [g["score"] for g in fill_mask(text, image=path)]  # noqa: E731
    assert scores(sideways) == pytest.approx(scores(upright), abs=1e-6)
    assert scores(unturned) != pytest.approx(scores(upright), abs=1e-6)  # the check can fail
    captioner = Captioner.from_checkpoint(trained.ckpt, device="cpu")
    score = lambda path: captioner(path, num_beams=2)[0]["score"]  # noqa: E731
    assert score(sideways) == pytest.approx(score(upright), abs=1e-6)
    assert score(unturned) != pytest.approx(score(upright), abs=1e-6)


def test_the_scripts_read_a_sideways_photo_upright(trained, sideways_pair, capsys):
    upright, sideways, unturned = sideways_pair
    predict, caption = load_script("predict"), load_script("caption")

    def outputs(path):
        argv = ["--ckpt", str(trained.ckpt), "--image", str(path), "--device", "cpu", "--json"]
        assert predict.main([*argv, "--text", "a [MASK] circle above a square"]) == 0
        filled = json.loads(capsys.readouterr().out)["masks"][0]["with_image"]
        assert caption.main([*argv, "--num-beams", "2"]) == 0
        written = json.loads(capsys.readouterr().out)[0]["captions"][0]
        return [g["score"] for g in filled], written["score"]

    (want_fill, want_caption), (got_fill, got_caption) = outputs(upright), outputs(sideways)
    assert got_fill == pytest.approx(want_fill, abs=1e-5)
    assert got_caption == pytest.approx(want_caption, abs=1e-5)
    other_fill, other_caption = outputs(unturned)
    assert other_fill != pytest.approx(want_fill, abs=1e-5) or \
        other_caption != pytest.approx(want_caption, abs=1e-5)
