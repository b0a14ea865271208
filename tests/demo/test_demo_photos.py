"""The demo reads the photos people have: --examples folders and uploads of every common kind.

The photos are made here with PIL at real sizes (a Flickr30k photo is about 500×375), each with a
picture whose reading can be checked: red on top, blue below. A photo read sideways, with its
colours inverted (CMYK) or its transparent half on black would fail the checks.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import BLUE, RED, red_over_blue, save_sideways
from PIL import Image

from vitbert import demo

GREEN, WHITE = (30, 180, 30), (255, 255, 255)


def half_transparent_png(path) -> None:
    """300×200: left half fully transparent, right half opaque green."""
    rgba = np.zeros((200, 300, 4), np.uint8)
    rgba[:, 150:] = (*GREEN, 255)
    Image.fromarray(rgba, "RGBA").save(path)


def near(pixel, colour, tolerance: int = 40) -> bool:
    return bool(np.all(np.abs(np.asarray(pixel, int) - colour) <= tolerance))


def top_and_bottom(image: np.ndarray):
    """The mean colour of a band in the top quarter and one in the bottom quarter."""
    h = image.shape[0]
    return image[h // 8 : h // 4].mean(axis=(0, 1)), image[-h // 4 : -h // 8].mean(axis=(0, 1))


@pytest.fixture
def photo_folder(tmp_path):
    """One of each kind of photo, one broken file, one truncated JPEG, and a note."""
    folder = tmp_path / "photos"
    folder.mkdir()
    red_over_blue(500, 375).save(folder / "a_small.jpg", quality=90)  # ≤ 640: not shrunk
    red_over_blue(1024, 768).save(folder / "b_large.jpg", quality=90)
    half_transparent_png(folder / "c_alpha.png")
    save_sideways(red_over_blue(400, 300), folder / "d_phone.jpg", quality=90)
    red_over_blue(320, 240).convert("CMYK").save(folder / "e_cmyk.jpg", quality=90)
    red_over_blue(64, 48).convert("P").save(folder / "f_palette.png")
    red_over_blue(64, 48).convert("L").save(folder / "g_grey.png")
    (folder / "h_broken.jpg").write_bytes(b"these bytes are no photo" * 10)
    whole = (folder / "a_small.jpg").read_bytes()
    (folder / "i_truncated.jpg").write_bytes(whole[: len(whole) // 2])
    (folder / "notes.txt").write_text("not a photo")
    return folder


def test_every_kind_of_photo_is_served_and_broken_files_are_named(photo_folder, capsys):
    examples = demo.folder_examples(photo_folder, count=20)
    by_name = {example.label: example.image for example in examples}
    assert list(by_name) == ["a_small.jpg", "b_large.jpg", "c_alpha.png", "d_phone.jpg",
                             "e_cmyk.jpg", "f_palette.png", "g_grey.png"]
    for name, image in by_name.items():
        assert image.dtype == np.uint8 and image.ndim == 3 and image.shape[2] == 3, name

    assert by_name["a_small.jpg"].shape[:2] == (375, 500)  # small: kept whole
    assert by_name["b_large.jpg"].shape[:2] == (480, 640)  # large: shrunk to 640, same aspect
    assert by_name["d_phone.jpg"].shape[:2] == (300, 400)  # stored 300 wide × 400 high: upright
    for name in ("a_small.jpg", "b_large.jpg", "d_phone.jpg", "e_cmyk.jpg", "f_palette.png"):
        top, bottom = top_and_bottom(by_name[name])
        assert near(top, RED) and near(bottom, BLUE), (name, top, bottom)  # upright, true colours
    grey_top, grey_bottom = top_and_bottom(by_name["g_grey.png"])
    assert np.ptp(grey_top) < 2 and grey_top[0] > grey_bottom[0]  # grey: red is lighter than blue
    alpha = by_name["c_alpha.png"]
    assert near(alpha[100, 20], WHITE, 0) and near(alpha[100, 280], GREEN, 0)  # alpha on white

    err = capsys.readouterr().err.splitlines()
    skipped = [line for line in err if "skipped" in line]
    assert len(skipped) == 2
    assert skipped[0] == ("--examples: skipped h_broken.jpg: cannot identify image file (not an "
                          "image, or a format Pillow cannot read)")
    assert skipped[1].startswith("--examples: skipped i_truncated.jpg: cannot decode: image file "
                                 "is truncated")
    assert any(line.endswith("left out: notes.txt") for line in err)


def test_a_full_gallery_says_how_many_photos_it_left_out(photo_folder, capsys):
    examples = demo.folder_examples(photo_folder, count=2)
    assert [example.label for example in examples] == ["a_small.jpg", "b_large.jpg"]
    err = capsys.readouterr().err
    assert "the gallery shows 2 photos; 7 more left out, from c_alpha.png on" in err
    assert "skipped" not in err  # the broken files come after the last photo read


def test_the_script_prints_the_skipped_file_and_serves_the_rest(photo_folder, trained, capsys,
                                                                monkeypatch, tmp_path):
    """scripts/demo.py --examples DIR: the broken file is named before the page starts."""
    from helpers import load_script

    script = load_script("demo")
    served = {}
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(tmp_path))  # main() sets it; restored after
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    monkeypatch.setattr(demo, "serve", lambda fill_mask, examples, **_: served.update(
        examples=[example.label for example in examples]))
    (photo_folder / "a_small.jpg").unlink()  # the broken file among the first four read
    argv = ["--ckpt", str(trained.ckpt), "--examples", str(photo_folder), "--device", "cpu"]
    assert script.main(argv) == 0
    assert served["examples"][:4] == ["b_large.jpg", "c_alpha.png", "d_phone.jpg", "e_cmyk.jpg"]
    assert len(served["examples"]) == 4 + demo.GALLERY_SIZE  # then the default's pictures
    err = capsys.readouterr().err
    assert "skipped" not in err  # four good photos come before the broken one
    (photo_folder / "c_alpha.png").write_bytes(b"broken")
    assert script.main(argv) == 0
    assert served["examples"][:4] == ["b_large.jpg", "d_phone.jpg", "e_cmyk.jpg", "f_palette.png"]
    assert "--examples: skipped c_alpha.png: cannot identify image file" in capsys.readouterr().err


def test_a_model_trained_on_photos_shows_no_shapes(photo_folder, trained, capsys, monkeypatch,
                                                    tmp_path):
    """The shapes test pictures join the gallery of a model trained on them (or an export, which
    does not say); one trained on photos shows its --examples alone, or says to pass them."""
    import torch
    from helpers import load_script

    checkpoint = torch.load(trained.ckpt, map_location="cpu", weights_only=True)
    checkpoint["datamodule_hyper_parameters"]["source"] = {
        "class_path": "vitbert.data.CaptionedPhotos", "init_args": {"root": "photos"}}
    on_photos = tmp_path / "photos.ckpt"
    torch.save(checkpoint, on_photos)
    assert demo.shows_shapes(trained.ckpt) and demo.shows_shapes(trained.exported)
    assert not demo.shows_shapes(on_photos)

    script = load_script("demo")
    served = {}
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    monkeypatch.setattr(demo, "serve", lambda fill_mask, examples, **_: served.update(
        examples=[example.label for example in examples]))
    argv = ["--ckpt", str(on_photos), "--device", "cpu"]
    assert script.main([*argv, "--examples", str(photo_folder)]) == 0
    assert served["examples"] == ["a_small.jpg", "b_large.jpg", "c_alpha.png", "d_phone.jpg"]
    capsys.readouterr()
    assert script.main(argv) == 0
    assert served["examples"] == []
    assert "pass --examples DIR" in capsys.readouterr().err


def test_an_upload_stored_sideways_is_answered_as_the_upright_photo(demo_fill_mask, tmp_path):
    """The page passes the uploaded file as it came; the answer must be the upright photo's.

    PNG keeps the pixels exact, so the sideways file and the upright one hold the same picture.
    """
    upright, sideways, unturned = (tmp_path / name for name in ("up.png", "side.png", "raw.png"))
    picture = red_over_blue(48, 40)
    picture.save(upright)
    save_sideways(picture, sideways)
    picture.transpose(Image.Transpose.ROTATE_90).save(unturned)  # the same pixels, no EXIF tag
    text = "a small [MASK] circle above a large square"
    want = demo.answer(demo_fill_mask, str(upright), text, top_k=5).result
    got = demo.answer(demo_fill_mask, str(sideways), text, top_k=5).result
    other = demo.answer(demo_fill_mask, str(unturned), text, top_k=5).result
    scores = lambda result: [g["score"] for g in result["masks"][0]["with_image"]]  # noqa: E731
    assert scores(got) == pytest.approx(scores(want), abs=1e-6)
    assert scores(other) != pytest.approx(scores(want), abs=1e-6)  # the check can fail


@pytest.mark.parametrize("kind", ["large jpeg", "cmyk jpeg", "rgba png", "palette png"])
def test_uploads_of_every_kind_meet_the_model_as_the_training_cache_reads_them(
        demo_fill_mask, tmp_path, monkeypatch, kind):
    import torch

    from vitbert.data.cache import decode_image
    from vitbert.predict import load_image

    path = tmp_path / ("photo.jpg" if "jpeg" in kind else "photo.png")
    picture = red_over_blue(1024, 768)
    if kind == "large jpeg":
        picture.save(path, quality=90)  # the cache decodes it at 1/8 scale first
    elif kind == "cmyk jpeg":
        picture.convert("CMYK").save(path, quality=90)
    elif kind == "rgba png":
        half_transparent_png(path)
    else:
        picture.convert("P").save(path)
    seen = []
    compare = demo_fill_mask.compare
    monkeypatch.setattr(demo_fill_mask, "compare",
                        lambda text, image, **kw: seen.append(image) or compare(text, image, **kw))
    status, _, _, as_json = demo.respond(demo_fill_mask, str(path), "a [MASK] circle", 3)
    assert status.startswith("Answered in "), status
    assert len(as_json["masks"][0]["with_image"]) == 3
    S = demo_fill_mask.image_size
    assert torch.equal(load_image(seen[0], S), torch.from_numpy(decode_image(path, S)))
