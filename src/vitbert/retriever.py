"""Find the photo for a sentence, and the sentence for a photo: image-text retrieval.

    r = Retriever.from_checkpoint("runs/latest/checkpoints/last.ckpt")   # or an exported folder
    r.images_for("a dog in the snow", "my_photos/", top_k=5)
    # {"results": [{"rank": 1, "image": "dog.jpg", "score": 0.41, ...}], ...}
    r.captions_for("photo.jpg", ["a dog in the snow", "two men play chess"], top_k=1)

How it ranks (CLIP, ALBEF's ITC): every photo and every caption is embedded apart by the
network's contrastive heads (``VitBert.embed_images`` / ``embed_texts``), so scoring all pairs is
one matrix product, and a result's ``score`` is its cosine. A folder's photo embeddings are kept
in an index file (:mod:`vitbert.photo_index`), so a second search of the same folder runs no
image tower.

The result shapes are documented in docs/retrieval.md. Shapes follow the project legend: P photos,
C captions, E the contrastive width, T word pieces.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from vitbert.io import CheckpointError, load_model
from vitbert.photo_index import FolderError, PhotoIndex, build_index, model_identity
from vitbert.predict import (
    ImageLike,
    PredictError,
    default_device,
    load_image,
    unknown_words,
    unknown_words_warning,
)

ITC_FIX = ("train it with the contrastive heads on: --model.net.itc_dim 128 and the objective "
           "vitbert.lit.contrastive.Contrastive in model.objectives")


class NoContrastiveHeadsError(PredictError):
    """A model that cannot search: it has no contrastive heads (``net.itc_dim`` 0)."""


class Retriever:
    """Photos for a sentence and sentences for a photo, from a model on ``device`` in eval
    mode."""

    def __init__(self, model, tokenizer, device: str | torch.device | None = None,
                 batch_size: int = 32) -> None:
        if not model.has_itc:
            raise NoContrastiveHeadsError(
                f"this model has no contrastive heads (its net.itc_dim is 0), so it cannot embed "
                f"photos and sentences apart to search them; {ITC_FIX}")
        self.device = torch.device(device) if device is not None else default_device()
        self.model = model.to(self.device).eval()
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.image_size: int = model.config.image.image_size
        self.max_len: int = model.config.text.max_len
        self._identity: str | None = None

    @classmethod
    def from_checkpoint(cls, path: str | Path, device: str | torch.device | None = None
                        ) -> Retriever:
        """From a Lightning ``.ckpt`` or an exported folder. Raises ``CheckpointError`` for
        anything that is not a vitbert checkpoint and :class:`NoContrastiveHeadsError` for a
        model trained without the contrastive heads."""
        device = torch.device(device) if device is not None else default_device()
        model, tokenizer = load_model(path, map_location=device)
        if not model.has_itc:
            raise NoContrastiveHeadsError(
                f"{path}: this model has no contrastive heads (net.itc_dim 0), so it cannot "
                f"search photos by sentence or sentences by photo; {ITC_FIX}")
        return cls(model, tokenizer, device)

    @property
    def identity(self) -> str:
        """The model's identity in an index file (:func:`vitbert.photo_index.model_identity`)."""
        if self._identity is None:
            self._identity = model_identity(self.model)
        return self._identity

    # ------------------------------------------------------------------------------------------
    # Indexes

    def index(self, folder: str | Path, index_path: str | Path | None = None,
              progress: bool | None = None) -> PhotoIndex:
        """The embeddings of ``folder``'s photos, read from its index file when it is current
        (:mod:`vitbert.photo_index`); new or changed photos are embedded and the file updated."""
        return build_index(folder, self.embed_images, self.identity, self.image_size,
                           index_path, self.batch_size, progress)

    def index_images(self, images: Sequence[ImageLike], names: Sequence[str]) -> PhotoIndex:
        """An index of photos held in memory (the demo's example pictures), never saved."""
        pixels = torch.stack([load_image(image, self.image_size) for image in images])
        return PhotoIndex(list(names), self.embed_images(pixels), embedded=len(names),
                          images=pixels)

    # ------------------------------------------------------------------------------------------
    # Searches

    def images_for(self, text: str, folder_or_index: str | Path | PhotoIndex, top_k: int = 5
                   ) -> dict[str, Any]:
        """The ``top_k`` photos of a folder (or an index) for ``text``, best first."""
        text = _one_line(text, "text")
        top_k = _check_top_k(top_k)
        index = (folder_or_index if isinstance(folder_or_index, PhotoIndex)
                 else self.index(folder_or_index))
        query = self.embed_texts([text])  # (1, E)
        scores = (index.embeddings.to(self.device) @ query[0]).cpu()  # (P,)
        unknown = unknown_words(self.tokenizer, text)
        return {
            "query": {"text": text},
            "candidates": len(index),
            "results": [{"rank": rank, "image": index.names[row],
                         "path": str(index.folder / index.names[row]) if index.folder else None,
                         "score": score} for rank, row, score in _best(scores, top_k)],
            "unknown_words": unknown,
            "warning": unknown_words_warning(unknown),
            "skipped": [{"image": name, "reason": reason} for name, reason in index.skipped],
            "index": index.describe(),
        }

    def captions_for(self, image: ImageLike, captions: Sequence[str], top_k: int = 5
                     ) -> dict[str, Any]:
        """The ``top_k`` of ``captions`` for the photo ``image``, best first (``index``: the
        caption's place in the list, from 0)."""
        top_k = _check_top_k(top_k)
        captions = [_one_line(caption, "caption") for caption in captions]
        if not captions:
            raise PredictError("no captions to rank: pass at least one sentence")
        pixels = load_image(image, self.image_size)[None]  # (1, 3, S, S)
        photo = self.embed_images(pixels)[0]  # (E,)
        scores = (self.embed_texts(captions) @ photo).cpu()  # (C,)
        return {
            "query": {"image": str(image) if isinstance(image, (str, Path)) else None},
            "candidates": len(captions),
            "results": [{"rank": rank, "caption": captions[row], "index": row, "score": score}
                        for rank, row, score in _best(scores, top_k)],
        }

    # ------------------------------------------------------------------------------------------
    # Scores

    @torch.inference_mode()
    def embed_images(self, pixels: Tensor) -> Tensor:
        """uint8 (B, 3, S, S) → unit vectors (B, E) on the CPU, in batches."""
        return torch.cat([self.model.embed_images(chunk.to(self.device)).float().cpu()
                          for chunk in pixels.split(self.batch_size)])

    @torch.inference_mode()
    def embed_texts(self, texts: Sequence[str]) -> Tensor:
        """Sentences → unit vectors (C, E) on ``device``, each read alone, in batches."""
        vectors = []
        for start in range(0, len(texts), self.batch_size):
            ids, keep = self._tokens(texts[start:start + self.batch_size])  # (b, T) each
            vectors.append(self.model.embed_texts(ids, keep).float())
        return torch.cat(vectors)

    def _tokens(self, texts: Sequence[str]) -> tuple[Tensor, Tensor]:
        """input_ids and attention_mask (B, T), padded to the longest, cut at the model's
        max_len as its training captions were."""
        batch = self.tokenizer(list(texts), padding="longest", truncation=True,
                               max_length=self.max_len, return_tensors="pt")
        return batch["input_ids"].to(self.device), batch["attention_mask"].to(self.device)


def _best(scores: Tensor, top_k: int) -> list[tuple[int, int, float]]:
    """(rank from 1, row, cosine rounded to 4 places) of the ``top_k`` best of ``scores``."""
    values, rows = scores.topk(min(top_k, len(scores)))
    return [(rank, int(row), round(float(value), 4))
            for rank, (value, row) in enumerate(zip(values, rows, strict=True), start=1)]


def _check_top_k(top_k: int) -> int:
    if not isinstance(top_k, int) or top_k < 1:
        raise PredictError(f"top_k={top_k!r}: ask for at least one result")
    return top_k


def _one_line(text: str, what: str) -> str:
    text = (text or "").strip()
    if not text:
        raise PredictError(f"an empty {what}: write a sentence, e.g. 'a dog in the snow'")
    return text


__all__ = ["CheckpointError", "FolderError", "NoContrastiveHeadsError", "PhotoIndex", "Retriever"]
