"""FillMask: the result shapes of the transformers pipeline, every image form, batching, errors."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch
from PIL import Image

from vitbert.data.cache import BadImageError, decode_image
from vitbert.io import CheckpointError
from vitbert.predict import FillMask, PredictError, load_image

KEYS = {"score", "token", "token_str", "sequence"}


def assert_guesses(guesses, k, tokenizer):
    assert isinstance(guesses, list) and len(guesses) == k
    for guess in guesses:
        assert set(guess) == KEYS
        assert 0.0 < guess["score"] <= 1.0
        assert guess["token_str"] == tokenizer.decode([guess["token"]])
        assert guess["token"] not in tokenizer.all_special_ids
    scores = [guess["score"] for guess in guesses]
    assert scores == sorted(scores, reverse=True)


def test_import_vitbert_stays_light_and_exports_fill_mask():
    code = ("import sys, vitbert; assert 'torch' not in sys.modules, 'vitbert pulled in torch'; "
            "assert 'FillMask' in dir(vitbert)")
    subprocess.run([sys.executable, "-c", code], check=True)
    import vitbert

    assert vitbert.FillMask is FillMask


def test_one_mask_gives_one_list(fill_mask, trained):
    guesses = fill_mask("a large [MASK] triangle above a small cross", image=trained.photo,
                        top_k=3)
    assert_guesses(guesses, 3, fill_mask.tokenizer)
    assert fill_mask.device == torch.device("cpu")


def test_several_masks_give_a_list_per_mask(fill_mask):
    result = fill_mask("a [MASK] circle [MASK] a [MASK] square", top_k=4)
    assert len(result) == 3
    for guesses in result:
        assert_guesses(guesses, 4, fill_mask.tokenizer)


def test_a_list_of_texts_is_one_padded_batch_equal_to_single_queries(fill_mask, trained):
    texts = ["a [MASK] x", "there is a large red [MASK] above a small [MASK] circle"]
    batched = fill_mask(texts, image=trained.photo, top_k=3)
    assert len(batched) == 2
    assert_guesses(batched[0], 3, fill_mask.tokenizer)  # one mask: a flat list
    assert len(batched[1]) == 2  # two masks: a list of lists
    for text, result in zip(texts, batched, strict=True):
        single = fill_mask(text, image=trained.photo, top_k=3)
        flat_a = single if isinstance(single[0], dict) else [g for mask in single for g in mask]
        flat_b = result if isinstance(result[0], dict) else [g for mask in result for g in mask]
        assert [g["token"] for g in flat_a] == [g["token"] for g in flat_b]
        assert [g["score"] for g in flat_a] == pytest.approx([g["score"] for g in flat_b],
                                                             abs=1e-5)


def test_one_image_per_text_and_none_mix_in_one_batch(fill_mask, trained):
    text = "a small [MASK] circle left of a square"
    mixed = fill_mask([text, text], image=[trained.photo, None], top_k=5)
    singles = [fill_mask(text, image=trained.photo), fill_mask(text)]
    for got, alone in zip(mixed, singles, strict=True):
        assert [g["token"] for g in got] == [g["token"] for g in alone]
        assert [g["score"] for g in got] == pytest.approx([g["score"] for g in alone], abs=1e-5)
    with pytest.raises(PredictError, match="2 images for 1 texts"):
        fill_mask([text], image=[trained.photo, None])


def test_compare_gives_both_readings(fill_mask, trained):
    text = "a [MASK] circle [MASK] a square"
    result = fill_mask.compare(text, trained.photo, top_k=3)
    assert list(result) == ["text", "unknown_words", "warning", "masks"] and result["text"] == text
    assert [mask["index"] for mask in result["masks"]] == [0, 1]
    for mask, with_image, text_only in zip(result["masks"], fill_mask(text, trained.photo, 3),
                                           fill_mask(text, None, 3), strict=True):
        assert list(mask) == ["index", "with_image", "text_only"]
        assert set(mask["with_image"][0]) == {"score", "token", "token_str"}  # train.py's shape
        assert [g["token"] for g in mask["with_image"]] == [g["token"] for g in with_image]
        assert [g["token"] for g in mask["text_only"]] == [g["token"] for g in text_only]
    # The photo changes the scores (2 training steps: slightly, but not zero).
    first = result["masks"][0]
    assert [g["score"] for g in first["with_image"]] != [g["score"] for g in first["text_only"]]


def test_sequence_is_the_text_with_that_mask_filled(fill_mask):
    text = "a [MASK] circle [MASK] a square"
    for i, guesses in enumerate(fill_mask(text, top_k=8)):
        for guess in guesses:
            parts = text.split("[MASK]")  # the other [MASK] stays, as in the pipeline
            filled = [guess["token_str"] if j == i else "[MASK]" for j in range(2)]
            expected = parts[0] + filled[0] + parts[1] + filled[1] + parts[2]
            # A "##" piece joins the word before it, as WordPiece decoding does.
            assert guess["sequence"] == expected.replace(" ##", "")


def test_scores_are_vocabulary_probabilities_without_special_tokens(fill_mask):
    tokenizer = fill_mask.tokenizer
    everything = fill_mask("a [MASK] circle", top_k=len(tokenizer))
    assert len(everything) == len(tokenizer) - len(set(tokenizer.all_special_ids))
    assert sum(g["score"] for g in everything) == pytest.approx(1.0, abs=0.05)


def test_every_image_form_meets_the_model_like_the_data_cache(trained):
    expected = torch.from_numpy(decode_image(trained.photo_wide, 32))  # (3, 32, 32)
    pil = Image.open(trained.photo_wide)
    hwc = np.asarray(pil)  # (40, 48, 3) uint8
    forms = {
        "path": str(trained.photo_wide),
        "Path": trained.photo_wide,
        "PIL": pil,
        "numpy uint8": hwc,
        "numpy float": hwc / 255.0,
        "tensor uint8": torch.from_numpy(hwc).permute(2, 0, 1),
        "tensor float": torch.from_numpy(hwc).permute(2, 0, 1).float() / 255,
        "grey numpy": np.asarray(pil.convert("L")),
    }
    for name, image in forms.items():
        pixels = load_image(image, 32)
        assert pixels.shape == (3, 32, 32) and pixels.dtype == torch.uint8, name
        if name != "grey numpy":
            assert torch.equal(pixels, expected), name


def test_image_forms_give_the_same_guesses(fill_mask, trained):
    hwc = np.asarray(Image.open(trained.photo))
    text = "a large [MASK] square"
    by_path = fill_mask(text, image=trained.photo)
    assert fill_mask(text, image=hwc) == by_path
    assert fill_mask(text, image=torch.from_numpy(hwc).permute(2, 0, 1)) == by_path


@pytest.mark.parametrize(
    ("text", "message"),
    [("a large red square", r"no \[MASK\]"), ("a large [mask] square", r"no \[MASK\]"),
     ("a [MASK] " + "square " * 40, "word pieces long")],
)
def test_text_errors(fill_mask, text, message):
    with pytest.raises(PredictError, match=message):
        fill_mask(text)


def test_image_errors(fill_mask, tmp_path, unreadable_image):
    with pytest.raises(BadImageError, match="missing file"):
        fill_mask("a [MASK] x", image=tmp_path / "nowhere.jpg")
    with pytest.raises(BadImageError, match=r"broken\.png: cannot decode"):
        fill_mask("a [MASK] x", image=unreadable_image)
    with pytest.raises(PredictError, match=r"expected \(3, H, W\)"):
        fill_mask("a [MASK] x", image=torch.zeros(32, 32, 3))
    with pytest.raises(PredictError, match="dtype int64"):
        fill_mask("a [MASK] x", image=np.zeros((8, 8, 3), dtype=np.int64))
    with pytest.raises(PredictError, match="type list"):
        load_image([1, 2, 3], 32)
    with pytest.raises(PredictError, match="at least one"):
        fill_mask("a [MASK] x", top_k=0)


def test_exported_folder_answers_like_the_checkpoint(fill_mask, trained):
    from_folder = FillMask.from_checkpoint(trained.exported)
    text = "a [MASK] circle above a square"
    assert from_folder(text, trained.photo) == fill_mask(text, trained.photo)


def test_checkpoint_errors(not_a_checkpoint, no_tokenizer_ckpt, no_tokenizer_folder, tmp_path):
    with pytest.raises(CheckpointError, match="not a readable PyTorch checkpoint"):
        FillMask.from_checkpoint(not_a_checkpoint)
    with pytest.raises(CheckpointError, match="holds no tokenizer"):
        FillMask.from_checkpoint(no_tokenizer_ckpt)
    with pytest.raises(CheckpointError, match=r"tokenizer\.json"):
        FillMask.from_checkpoint(no_tokenizer_folder)
    with pytest.raises(CheckpointError, match="no such file"):
        FillMask.from_checkpoint(tmp_path / "missing.ckpt")
    torch.save({"state_dict": {}, "epoch": 3}, tmp_path / "other.ckpt")
    with pytest.raises(CheckpointError, match="not a vitbert one"):
        FillMask.from_checkpoint(tmp_path / "other.ckpt")


def test_attention_over_patches(fill_mask, trained):
    result = fill_mask.attention("a [MASK] circle [MASK] a square", trained.photo, layer=-1)
    rows, cols = result["grid"]
    weights = result["weights"]
    assert weights.shape == (2, rows * cols) == (2, fill_mask.model.num_image_tokens)
    assert (weights >= 0).all() and (weights.sum(axis=1) <= 1 + 1e-5).all()
    assert result["image"].shape == (32, 32, 3) and result["image"].dtype == np.uint8
    assert (result["layer"], result["num_layers"], result["num_heads"]) == (1, 2, 2)
    assert fill_mask.attention("a [MASK] x", trained.photo, layer=0)["layer"] == 0
    with pytest.raises(PredictError, match=r"has 2 layers; pick one of -2\.\.1"):
        fill_mask.attention("a [MASK] x", trained.photo, layer=2)


def test_attention_with_one_pooled_token(trained):
    pooled = FillMask.from_checkpoint(trained.pooled)
    result = pooled.attention("a [MASK] x", trained.photo)
    assert result["grid"] is None and result["weights"].shape == (1, 1)
