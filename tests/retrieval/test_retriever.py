"""Retriever: a planted match ranks first, scores are the model's own cosines, a folder's index is
reused and rebuilt exactly when it must be, broken photos are named."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image
from retrieval_photos import COLOURS, plain_colour

from vitbert.photo_index import FolderError, PhotoIndex, default_index_path
from vitbert.retriever import NoContrastiveHeadsError, Retriever


@pytest.fixture(scope="module")
def loaded(searcher):
    from vitbert.io import load_model

    return load_model(searcher.ckpt)


def retriever(loaded) -> Retriever:
    model, tokenizer = loaded
    return Retriever(model, tokenizer, device="cpu")


# Embeddings we control: a photo's is its mean colour, a sentence's the colour it names.
def colour_vector(rgb) -> torch.Tensor:
    return F.normalize(torch.tensor(rgb, dtype=torch.float32) - 127.5, dim=-1)


def planted_images(pixels: torch.Tensor) -> torch.Tensor:
    return torch.stack([colour_vector(p.float().mean(dim=(1, 2)).tolist()) for p in pixels])


def planted_texts(tokenizer):
    def embed(input_ids, attention_mask):
        texts = tokenizer.batch_decode(input_ids, skip_special_tokens=True)
        return torch.stack([colour_vector(next(COLOURS[w] for w in t.split() if w in COLOURS))
                            for t in texts])
    return embed


@pytest.fixture
def planted(loaded, monkeypatch):
    """A Retriever whose model embeds by colour, and a count of the photos its tower saw."""
    model, tokenizer = loaded
    seen = []
    monkeypatch.setattr(model, "embed_images", lambda p: seen.append(len(p)) or planted_images(p))
    monkeypatch.setattr(model, "embed_texts", planted_texts(tokenizer))
    found = retriever(loaded)
    found.photos_seen = seen
    return found


def test_vitbert_exports_the_retriever():
    code = "import sys, vitbert; assert 'torch' not in sys.modules; print(dir(vitbert))"
    assert "Retriever" in subprocess.run([sys.executable, "-c", code], check=True,
                                         capture_output=True, text=True).stdout
    import vitbert

    assert vitbert.Retriever is Retriever


def test_a_photo_embedded_as_the_sentence_ranks_first_by_the_real_text_tower(loaded):
    """The model's own text embedding, planted as one photo's row among random ones."""
    found = retriever(loaded)
    text = "a small red circle left of a large blue square"
    rows = F.normalize(torch.randn(6, found.model.config.itc_dim), dim=-1)
    rows[4] = found.embed_texts([text])[0]
    index = PhotoIndex([f"p{i}.png" for i in range(6)], rows)
    result = found.images_for(text, index, top_k=3)
    assert result["results"][0]["image"] == "p4.png"
    assert result["results"][0]["score"] == pytest.approx(1.0, abs=1e-4)
    assert [r["rank"] for r in result["results"]] == [1, 2, 3]
    scores = [r["score"] for r in result["results"]]
    assert scores == sorted(scores, reverse=True)
    assert result["candidates"] == 6


def test_planted_colours_both_ways(planted, colour_folder):
    for colour in COLOURS:
        found = planted.images_for(f"a {colour} picture", colour_folder, top_k=2)
        assert found["results"][0]["image"] == f"{colour}.png"
        assert found["results"][0]["path"] == str(colour_folder / f"{colour}.png")
    captions = [f"a {colour} picture" for colour in COLOURS]
    found = planted.captions_for(colour_folder / "green.png", captions, top_k=4)
    assert found["results"][0]["caption"] == "a green picture"
    assert found["results"][0]["index"] == 1
    assert len(found["results"]) == 4


def test_a_second_search_runs_no_image_tower(planted, colour_folder):
    first = planted.images_for("a blue picture", colour_folder)
    assert sum(planted.photos_seen) == 4 and first["index"]["embedded"] == 4
    path = default_index_path(colour_folder, planted.identity)
    assert first["index"]["path"] == str(path) and path.is_file()
    planted.photos_seen.clear()
    second = planted.images_for("a blue picture", colour_folder)
    assert planted.photos_seen == []
    assert (second["index"]["embedded"], second["index"]["reused"]) == (0, 4)
    assert second["results"] == first["results"]


def test_a_changed_photo_is_embedded_again_and_only_it(planted, colour_folder):
    planted.images_for("a red picture", colour_folder)
    planted.photos_seen.clear()
    red = colour_folder / "red.png"
    Image.fromarray(plain_colour("green")).save(red)  # red.png now shows green
    os.utime(red, ns=(red.stat().st_atime_ns, red.stat().st_mtime_ns + 10**9))
    found = planted.images_for("a red picture", colour_folder, top_k=4)
    assert planted.photos_seen == [1]
    assert (found["index"]["embedded"], found["index"]["reused"]) == (1, 3)
    assert found["results"][0]["image"] != "red.png"  # it no longer looks red


def test_a_new_and_a_removed_photo_update_the_index(planted, colour_folder):
    planted.images_for("a red picture", colour_folder)
    planted.photos_seen.clear()
    (colour_folder / "yellow.png").unlink()
    Image.fromarray(plain_colour("yellow")).save(colour_folder / "sun.png")
    found = planted.images_for("a yellow picture", colour_folder)
    assert planted.photos_seen == [1]
    assert found["results"][0]["image"] == "sun.png"
    assert "yellow.png" not in {r["image"] for r in found["results"]}
    assert found["index"]["photos"] == 4


def test_another_model_never_reads_this_ones_index(planted, loaded, colour_folder):
    planted.images_for("a red picture", colour_folder)
    other_model, tokenizer = loaded
    other = Retriever(other_model, tokenizer, device="cpu")
    before = planted.identity
    with torch.no_grad():
        other_model.itc.image_proj.bias.add_(0.01)  # another model: same shapes, other weights
    try:
        other._identity = None
        assert other.identity != before
        found = other.images_for("a red picture", colour_folder)
        assert found["index"]["embedded"] == 4 and found["index"]["path"] != str(
            default_index_path(colour_folder, before))
    finally:
        with torch.no_grad():
            other_model.itc.image_proj.bias.sub_(0.01)


def test_broken_photos_are_skipped_named_and_not_read_again(planted, colour_folder):
    (colour_folder / "broken.png").write_bytes(b"this is no image")
    (colour_folder / "empty.jpg").write_bytes(b"")
    (colour_folder / "notes.txt").write_text("not a photo")
    first = planted.images_for("a red picture", colour_folder)
    skipped = {s["image"]: s["reason"] for s in first["skipped"]}
    assert set(skipped) == {"broken.png", "empty.jpg"}
    assert "zero-byte" in skipped["empty.jpg"]
    assert "cannot identify image file" in skipped["broken.png"]
    assert first["index"]["photos"] == 4
    planted.photos_seen.clear()
    second = planted.images_for("a red picture", colour_folder)
    assert planted.photos_seen == [] and second["skipped"] == first["skipped"]


def test_folders_that_cannot_be_searched(planted, tmp_path):
    with pytest.raises(FolderError, match="no such folder"):
        planted.images_for("a red picture", tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("hello")
    with pytest.raises(FolderError, match="no photos in it"):
        planted.images_for("a red picture", tmp_path / "empty")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "a.png").write_bytes(b"junk")
    with pytest.raises(FolderError, match="none of its 1 photos could be read"):
        planted.images_for("a red picture", tmp_path / "bad")


def test_an_unwritable_index_place_still_answers(planted, colour_folder, capsys):
    found = planted.index(colour_folder, index_path=colour_folder / "red.png" / "index.safetensors")
    assert len(found) == 4
    assert "cannot save the photo index" in capsys.readouterr().err


def test_a_model_without_contrastive_heads_names_the_fix(searcher):
    with pytest.raises(NoContrastiveHeadsError,
                       match=r"--model\.net\.itc_dim 128 and the objective "
                             r"vitbert\.lit\.contrastive\.Contrastive"):
        Retriever.from_checkpoint(searcher.no_itc, device="cpu")


def test_checkpoint_and_export_search_alike(searcher, colour_folder):
    from_ckpt = Retriever.from_checkpoint(searcher.ckpt, device="cpu")
    from_export = Retriever.from_checkpoint(searcher.exported, device="cpu")
    assert from_ckpt.identity == from_export.identity  # same weights, one index
    a = from_ckpt.images_for("a red picture", colour_folder, top_k=4)
    b = from_export.images_for("a red picture", colour_folder, top_k=4)
    assert b["index"]["embedded"] == 0  # the export reads the index the checkpoint wrote
    assert a["results"] == b["results"]
    assert a["candidates"] == 4


def test_real_scores_are_the_real_embeddings(searcher, colour_folder):
    """The order and the scores are the cosines of the model's own embeddings, computed here
    apart."""
    found = Retriever.from_checkpoint(searcher.ckpt, device="cpu")
    result = found.images_for("a blue picture", colour_folder, top_k=4)
    names = sorted(p.name for p in colour_folder.iterdir() if p.suffix == ".png")
    from vitbert.predict import load_image

    with torch.no_grad():
        photos = found.model.embed_images(torch.stack(
            [load_image(colour_folder / n, found.image_size) for n in names]))
        query = found.embed_texts(["a blue picture"])[0]
    cosines = (photos @ query).tolist()
    expected = [names[i] for i in np.argsort(cosines)[::-1]]
    assert [r["image"] for r in result["results"]] == expected
    assert [r["score"] for r in result["results"]] == pytest.approx(sorted(cosines)[::-1],
                                                                     abs=1e-4)
