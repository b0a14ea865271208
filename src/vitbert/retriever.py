"""Find the photo for a sentence, and the sentence for a photo: image-text retrieval.

    r = Retriever.from_checkpoint("runs/latest/checkpoints/last.ckpt")   # or an exported folder
    r.images_for("a dog in the snow", "my_photos/", top_k=5)
    # {"ranked_by": "itm", "results": [{"rank": 1, "image": "dog.jpg", "score": 3.2, ...}], ...}
    r.captions_for("photo.jpg", ["a dog in the snow", "two men play chess"], top_k=1)

How it ranks (ALBEF, BLIP): every photo and every caption is embedded apart by the network's
contrastive heads (``VitBert.embed_images`` / ``embed_texts``; ITC), so scoring all pairs is one
matrix product. When the model was trained with the image-text matching head too (ITM; stored
beside the network as ``itm_head``), the ``rerank`` best pairs by ITC (16 by default, at least
``top_k``) are scored again by it: the joint encoder reads the caption *with* the photo, far
better at telling near misses apart, and far too slow to run on every pair. Each result says
which scorer ranked it (``ranked_by``). A folder's photo embeddings are kept in an index file
(:mod:`vitbert.photo_index`), so a second search of the same folder runs no image tower.

The result shapes are documented in docs/retrieval.md. Shapes follow the project legend: P photos,
C captions, E the contrastive width, K the shortlist, T word pieces, D the text width.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from vitbert.io import CheckpointError, StoredModel, model_of, read_checkpoint
from vitbert.models import ITMHead
from vitbert.photo_index import FolderError, PhotoIndex, build_index, model_identity
from vitbert.predict import (
    ImageLike,
    PredictError,
    default_device,
    load_image,
    unknown_words,
    unknown_words_warning,
)

DEFAULT_RERANK = 16  # the shortlist the matching head re-scores (ALBEF's k for Flickr30k: 128)
ITC_FIX = ("train it with the contrastive heads on: --model.net.itc_dim 128 and the objective "
           "vitbert.lit.contrastive.Contrastive in model.objectives")


class NoContrastiveHeadsError(PredictError):
    """A model that cannot search: it has no contrastive heads (``net.itc_dim`` 0)."""


class Retriever:
    """Photos for a sentence and sentences for a photo, from a model on ``device`` in eval mode.

    ``itm_head``: the matching head trained beside the network, or None (rank by ITC alone).
    ``rerank``: how many of the best pairs by ITC the matching head re-scores (0: never).
    """

    def __init__(self, model, tokenizer, itm_head: ITMHead | None = None,
                 device: str | torch.device | None = None, rerank: int = DEFAULT_RERANK,
                 batch_size: int = 32) -> None:
        if not model.has_itc:
            raise NoContrastiveHeadsError(
                f"this model has no contrastive heads (its net.itc_dim is 0), so it cannot embed "
                f"photos and sentences apart to search them; {ITC_FIX}")
        self.device = torch.device(device) if device is not None else default_device()
        self.model = model.to(self.device).eval()
        self.tokenizer = tokenizer
        self.itm_head = itm_head.to(self.device).eval() if itm_head is not None else None
        self.rerank = rerank
        self.batch_size = batch_size
        self.image_size: int = model.config.image.image_size
        self.max_len: int = model.config.text.max_len
        self._identity: str | None = None

    @classmethod
    def from_checkpoint(cls, path: str | Path, device: str | torch.device | None = None,
                        rerank: int = DEFAULT_RERANK) -> Retriever:
        """From a Lightning ``.ckpt`` or an exported folder, with its matching head when it has
        one. Raises ``CheckpointError`` for anything that is not a vitbert checkpoint and
        :class:`NoContrastiveHeadsError` for a model trained without the contrastive heads."""
        device = torch.device(device) if device is not None else default_device()
        stored = read_checkpoint(path)  # once: the network and the matching head
        model, tokenizer = model_of(stored, path, map_location=device)
        if not model.has_itc:
            raise NoContrastiveHeadsError(
                f"{path}: this model has no contrastive heads (net.itc_dim 0), so it cannot "
                f"search photos by sentence or sentences by photo; {ITC_FIX}")
        return cls(model, tokenizer, itm_head_of(stored, model.config.text.dim), device, rerank)

    @property
    def ranked_by(self) -> str:
        """``"itm"`` when the matching head re-ranks the ITC shortlist, else ``"itc"``."""
        return "itm" if self.itm_head is not None and self.rerank > 0 else "itc"

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
        itc = (index.embeddings.to(self.device) @ query[0]).cpu()  # (P,)
        order, itm = self._rank(itc, top_k, lambda rows: self._itm_logits(
            [text] * len(rows), index.pixels(rows, self.image_size)))
        unknown = unknown_words(self.tokenizer, text)
        return {
            "query": {"text": text},
            **self._how(len(index)),
            "results": [{"rank": rank, "image": index.names[row],
                         "path": str(index.folder / index.names[row]) if index.folder else None,
                         **_scores(itc[row], itm.get(row))}
                        for rank, row in enumerate(order, start=1)],
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
        itc = (self.embed_texts(captions) @ photo).cpu()  # (C,)
        order, itm = self._rank(itc, top_k, lambda rows: self._itm_logits(
            [captions[r] for r in rows], pixels.expand(len(rows), -1, -1, -1)))
        return {
            "query": {"image": str(image) if isinstance(image, (str, Path)) else None},
            **self._how(len(captions)),
            "results": [{"rank": rank, "caption": captions[row], "index": row,
                         **_scores(itc[row], itm.get(row))}
                        for rank, row in enumerate(order, start=1)],
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

    @torch.inference_mode()
    def _itm_logits(self, texts: Sequence[str], pixels: Tensor) -> Tensor:
        """The matching head's logit for each (text, photo) pair (K,), as training scores a pair
        (:func:`vitbert.lit.contrastive.itm_loss`): the caption read with the photo's tokens, the
        head on its [CLS] row."""
        logits = []
        for start in range(0, len(texts), self.batch_size):
            ids, keep = self._tokens(texts[start:start + self.batch_size])  # (b, T)
            images = pixels[start:start + self.batch_size].to(self.device)  # (b, 3, S, S)
            hidden, _ = self.model.encode(ids, keep, self.model.photos(images))  # (b, T, D)
            logits.append(self.itm_head(hidden[:, 0]).float().cpu())  # (b,)
        return torch.cat(logits)

    def _rank(self, itc: Tensor, top_k: int, itm_of) -> tuple[list[int], dict[int, float]]:
        """The rows to return, best first, and the matching head's logit of each re-scored row.

        By ITC alone when there is no matching head; else the best max(rerank, top_k) by ITC
        are re-scored by ``itm_of(rows)`` (K,) and ordered by it: every row returned was ranked
        by the same scorer.
        """
        if self.ranked_by == "itc":
            return itc.topk(min(top_k, len(itc))).indices.tolist(), {}
        shortlist = itc.topk(min(max(self.rerank, top_k), len(itc))).indices.tolist()  # (K,)
        logits = itm_of(shortlist)  # (K,)
        best = logits.argsort(descending=True, stable=True)[:top_k].tolist()
        return [shortlist[i] for i in best], dict(zip(shortlist, logits.tolist(), strict=True))

    def _how(self, candidates: int) -> dict[str, Any]:
        """The ``ranked_by`` / ``shortlist`` / ``candidates`` keys of every result."""
        shortlist = min(self.rerank, candidates) if self.ranked_by == "itm" else None
        return {"ranked_by": self.ranked_by, "shortlist": shortlist, "candidates": candidates}

    def _tokens(self, texts: Sequence[str]) -> tuple[Tensor, Tensor]:
        """input_ids and attention_mask (B, T), padded to the longest, cut at the model's
        max_len as its training captions were."""
        batch = self.tokenizer(list(texts), padding="longest", truncation=True,
                               max_length=self.max_len, return_tensors="pt")
        return batch["input_ids"].to(self.device), batch["attention_mask"].to(self.device)


def itm_head_of(source: str | Path | StoredModel, dim: int) -> ITMHead | None:
    """The matching head stored beside the network in ``source`` (a ``.ckpt``, an exported
    folder, or one already read: :attr:`vitbert.io.StoredModel.heads`), or None when it was
    trained without one."""
    stored = source if isinstance(source, StoredModel) else read_checkpoint(source)
    prefix = "itm_head."
    state = {name[len(prefix):]: tensor for name, tensor in stored.heads.items()
             if name.startswith(prefix)}
    if not state:
        return None
    head = ITMHead(dim)
    head.load_state_dict(state)
    return head.eval()


def _scores(itc: Tensor, itm: float | None) -> dict[str, float | None]:
    """A result's ``score`` (what ranked it: the ITM logit when re-scored, else the cosine),
    ``itc`` and ``itm``."""
    cosine = round(float(itc), 4)
    logit = None if itm is None else round(itm, 4)
    return {"score": cosine if logit is None else logit, "itc": cosine, "itm": logit}


def _check_top_k(top_k: int) -> int:
    if not isinstance(top_k, int) or top_k < 1:
        raise PredictError(f"top_k={top_k!r}: ask for at least one result")
    return top_k


def _one_line(text: str, what: str) -> str:
    text = (text or "").strip()
    if not text:
        raise PredictError(f"an empty {what}: write a sentence, e.g. 'a dog in the snow'")
    return text


__all__ = ["DEFAULT_RERANK", "CheckpointError", "FolderError", "NoContrastiveHeadsError",
           "PhotoIndex", "Retriever", "itm_head_of"]
