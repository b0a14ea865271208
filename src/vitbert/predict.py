"""Fill the [MASK]s of a sentence about a photo: what people do with a trained vitbert.

    fm = FillMask.from_checkpoint("runs/latest/checkpoints/last.ckpt")    # or an exported folder
    fm("a large [MASK] triangle above a small cross", image="photo.png")
    # [{"score": 0.41, "token": 17, "token_str": "blue"}, ...]          one list per [MASK]

The result has the shape of the transformers ``fill-mask`` pipeline (one list for one mask, a list
of lists for several, a list of those for a list of texts), so code written for that pipeline reads
ours. Unlike the pipeline it takes a photo, and :meth:`FillMask.compare` gives the guesses with and
without it side by side: the difference is what the photo told the model.

Shapes follow the project legend: B texts, T word pieces, N image tokens, L = N + T, V vocabulary,
H heads, M [MASK]s in the batch.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import torch
from PIL import Image
from torch import Tensor

from vitbert.data.cache import BadImageError, read_photo, resize_center_crop, to_rgb
from vitbert.decoding import fill, guesses
from vitbert.io import load_model

ImageLike = str | Path | Image.Image | np.ndarray | Tensor
MASK = "[MASK]"


class PredictError(ValueError):
    """A query the model cannot answer as given; the message says what to change."""


class UnknownWordsWarning(UserWarning):
    """Words of a query the model's vocabulary lacks: it reads each of them as [UNK]."""


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


Loaded = TypeVar("Loaded")


@contextmanager
def torch_threads(count: int) -> Iterator[None]:
    """Run with ``count`` CPU threads, then restore the previous number (a script's main() may
    be called in-process, from tests or notebooks)."""
    previous = torch.get_num_threads()
    torch.set_num_threads(max(1, count))
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def load_image(image: ImageLike, size: int) -> Tensor:
    """Any accepted image → uint8 (3, size, size), resized and centre-cropped like the data cache.

    Every form goes through the cache's own PIL path (``to_rgb`` then ``resize_center_crop``), so a
    photo meets the model exactly as its training photos did; a path is read by
    :func:`read_photo`. Accepted: a file path; a PIL image; a numpy array (H, W, 3) or (H, W)
    uint8, or float in [0, 1]; a tensor (3, H, W) uint8 or float in [0, 1].
    """
    if isinstance(image, (str, Path)):
        try:
            photo = read_photo(image, at_least=size)
        except BadImageError as error:
            raise BadImageError(f"{image}: {error}; pass a readable image file "
                                "(JPEG, PNG, ...)") from None
        return torch.from_numpy(resize_center_crop(photo, size))
    if isinstance(image, Image.Image):
        return torch.from_numpy(resize_center_crop(to_rgb(image), size))
    if isinstance(image, Tensor):
        if image.ndim != 3 or image.shape[0] != 3:
            raise PredictError(f"image tensor of shape {tuple(image.shape)}: expected (3, H, W) "
                               "(channels first, RGB)")
        image = image.detach().cpu().permute(1, 2, 0).numpy()  # (H, W, 3)
    if isinstance(image, np.ndarray):
        if not (image.ndim == 2 or (image.ndim == 3 and image.shape[2] in (3, 4))):
            raise PredictError(f"image array of shape {image.shape}: expected (H, W, 3) RGB, "
                               "(H, W, 4) RGBA or (H, W) grey, channels last")
        if image.dtype != np.uint8:
            if not np.issubdtype(image.dtype, np.floating):
                raise PredictError(f"image array of dtype {image.dtype}: expected uint8 "
                                   "[0, 255] or float [0, 1]")
            image = np.clip(np.rint(image * 255.0), 0, 255).astype(np.uint8)
        return torch.from_numpy(resize_center_crop(to_rgb(Image.fromarray(image)), size))
    raise PredictError(f"image of type {type(image).__name__}: pass a file path, a PIL image, "
                       "a numpy array (H, W, 3) or a tensor (3, H, W)")


def unknown_words(tokenizer, text: str) -> list[str]:
    """The words of ``text`` the model never learnt, as the user wrote them, in order and once
    each.

    WordPiece turns a word it cannot build from its pieces into one [UNK] token: the model then
    reads "unknown word", the same for all of them, and a guess about such a sentence is about
    another sentence than the one the user meant. A word it can only spell letter by letter
    (every piece one character: a small vocabulary spells "child" c ##h ##i ##l ##d) is no better:
    training built a piece for every word it saw often, so those letters are a word it never read.
    A word spelled from longer pieces ("playing" → "play ##ing") is known. The tokenizer's
    offsets map the pieces back to the text (so "Zebra," gives "Zebra" and ",", as typed). A
    literal "[UNK]" typed by the user is not reported as a word.
    """
    encoding = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    words: dict[int, list[tuple[int, int, int]]] = {}  # word index → its pieces (id, start, end)
    for token_id, (start, end), word in zip(encoding["input_ids"], encoding["offset_mapping"],
                                            encoding.word_ids(), strict=True):
        words.setdefault(word, []).append((token_id, start, end))
    found: list[str] = []
    for pieces in words.values():
        word = text[pieces[0][1]:pieces[-1][2]]
        unk = any(token_id == tokenizer.unk_token_id for token_id, _, _ in pieces)
        letters = len(pieces) > 1 and all(end - start == 1 for _, start, end in pieces)
        if (unk or letters) and word != tokenizer.unk_token and word not in found:
            found.append(word)
    return found


def unknown_words_warning(words: list[str]) -> str | None:
    """The one-line warning for :func:`unknown_words`' result, or None when there is none."""
    if not words:
        return None
    listed = ", ".join(repr(word) for word in words)
    return (f"{len(words)} word{'s' if len(words) > 1 else ''} not in this model's vocabulary "
            f"(read as [UNK] or letter by letter; it knows the words of its training captions): "
            f"{listed}")


class FillMask:
    """Top-k guesses for every [MASK] in a text, reading a photo along with the words.

    Build it with :meth:`from_checkpoint`; the model stays in eval mode on ``device``. Scores are
    probabilities over the whole vocabulary (softmax of the logits), like the transformers
    pipeline; special tokens ([PAD], [CLS], ...) are never offered as guesses.

    Threads are left as torch sets them. For one query at a time of a small model on a busy CPU,
    ``torch.set_num_threads(1)`` is 10-40x faster (measured; see ``scripts/predict.py --help``).
    """

    def __init__(self, model, tokenizer, device: str | torch.device | None = None) -> None:
        self.device = torch.device(device) if device is not None else default_device()
        self.model = model.to(self.device).eval()
        self.tokenizer = tokenizer
        self.mask_token_id: int = tokenizer.mask_token_id
        self.image_size: int = model.config.image.image_size
        self.max_len: int = model.config.text.max_len

    @classmethod
    def from_checkpoint(cls, path: str | Path, device: str | torch.device | None = None
                        ) -> FillMask:
        """From a Lightning ``.ckpt`` or an exported folder; CUDA when there is one, else CPU.

        Raises :class:`vitbert.io.CheckpointError` for anything that is not a vitbert
        checkpoint or lacks its tokenizer.
        """
        device = torch.device(device) if device is not None else default_device()
        model, tokenizer = load_model(path, map_location=device)
        return cls(model, tokenizer, device)

    # ------------------------------------------------------------------------------------------
    # Public API

    def __call__(self, text: str | list[str], image: ImageLike | list | None = None,
                 top_k: int = 5) -> list:
        """Per [MASK], a list of ``{"score", "token", "token_str", "sequence"}``, best first.

        ``sequence`` is the text with that [MASK] filled by the guess (other [MASK]s kept), as
        the pipeline gives it. Guesses come from :func:`vitbert.decoding.guesses`.

        One text with one [MASK] → a list of ``top_k`` dicts; with several [MASK]s → one such list
        per mask. A list of texts → a list of those, computed in one forward pass (padded to the
        longest text of the batch). ``image`` is one image for every text, a list with one image
        (or None) per text, or None to read the text alone.

        A text with words outside the vocabulary is answered, with an :class:`UnknownWordsWarning`
        naming them (the pipeline's result shape has no room for it; :meth:`compare`'s has).
        """
        texts = [text] if isinstance(text, str) else list(text)
        if isinstance(image, (list, tuple)):
            if len(image) != len(texts):
                raise PredictError(f"{len(image)} images for {len(texts)} texts: pass one image "
                                   "per text, or a single image for all of them")
            images = list(image)
        else:
            images = [image] * len(texts)
        # The pipeline's shape: a list for one [MASK], a list of lists for several.
        results = [masks[0] if len(masks) == 1 else masks
                   for masks in self._top_k(texts, images, top_k)]
        for one in texts:
            warning = unknown_words_warning(unknown_words(self.tokenizer, one))
            if warning is not None:
                warnings.warn(f"{one!r}: {warning}", UnknownWordsWarning, stacklevel=2)
        return results[0] if isinstance(text, str) else results

    def compare(self, text: str, image: ImageLike, top_k: int = 5) -> dict[str, Any]:
        """The guesses with the photo and from the text alone, side by side.

        ``{"text", "unknown_words", "warning", "masks": [{"index", "with_image": [...],
        "text_only": [...]}]}``, where ``index`` counts the [MASK]s from 0 in reading order, and
        ``unknown_words`` lists the words read as [UNK] (:func:`unknown_words`), with ``warning``
        the one line that says so (None when every word is known). Both readings run in one
        forward pass: the second row sees the photo's tokens blocked, which the model defines as
        equal to reading the text alone.
        """
        with_image, text_only = self._top_k([text, text], [image, None], top_k, sequence=False)
        unknown = unknown_words(self.tokenizer, text)
        return {
            "text": text,
            "unknown_words": unknown,
            "warning": unknown_words_warning(unknown),
            "masks": [
                {"index": i, "with_image": a, "text_only": b}
                for i, (a, b) in enumerate(zip(with_image, text_only, strict=True))
            ],
        }

    @torch.inference_mode()
    def attention(self, text: str, image: ImageLike, layer: int = -1) -> dict[str, Any]:
        """How much each [MASK] attends to each image token, averaged over heads.

        Returns ``{"image": uint8 (S, S, 3) as the model saw it, "weights": (masks, N) array,
        "grid": (rows, cols) or None for one pooled token, "layer": the layer index used,
        "num_layers", "num_heads"}``. Weights are fractions of the [MASK] row's attention (the
        rest goes to words), so they show both *where* in the photo and *how much* of it.
        """
        batch = self._encode([text])
        pixels = load_image(image, self.image_size)  # (3, S, S)
        _, attention = self.model(batch["input_ids"], batch["attention_mask"],
                                  self.model.image_features(pixels[None].to(self.device)),
                                  return_attention=True)
        num_layers = len(attention)
        if not -num_layers <= layer < num_layers:
            raise PredictError(f"layer {layer}: the text encoder has {num_layers} layers; pick "
                               f"one of {-num_layers}..{num_layers - 1}")
        N = self.model.num_image_tokens
        weights = attention[layer][0]  # (H, L, L)
        positions = (batch["input_ids"][0] == self.mask_token_id).nonzero(as_tuple=True)[0]
        rows = weights[:, N + positions, :N].mean(dim=0)  # (masks, N): over heads
        pooled = self.model.config.image_tokens == "pooled"
        return {
            "image": pixels.permute(1, 2, 0).numpy(),
            "weights": rows.float().cpu().numpy(),
            "grid": None if pooled else tuple(self.model.image_tower.grid_size),
            "layer": layer % num_layers,
            "num_layers": num_layers,
            "num_heads": weights.shape[0],
        }

    # ------------------------------------------------------------------------------------------
    # Internals

    def _encode(self, texts: list[str]) -> dict[str, Tensor]:
        """Tokenise, padded to the longest; every text must hold a [MASK] and fit the model."""
        for text in texts:
            if MASK not in text:
                raise PredictError(f"no {MASK} in {text!r}: write {MASK} (upper case) where the "
                                   "hidden word goes, e.g. 'a dog runs on the [MASK] .'")
        batch = self.tokenizer(texts, padding="longest", return_tensors="pt")
        lengths = batch["attention_mask"].sum(dim=1)
        for text, length in zip(texts, lengths.tolist(), strict=True):
            if length > self.max_len:
                raise PredictError(self._too_long(text, length))
        return {key: batch[key].to(self.device) for key in ("input_ids", "attention_mask")}

    def _too_long(self, text: str, length: int) -> str:
        """Why a sentence is refused: the model has no positions past the length it trained on."""
        N = self.max_len
        return (f"{text!r} is {length} word pieces long with [CLS] and [SEP]; this model reads at "
                f"most {N}: it was trained with max_len {N} (its checkpoint's text.max_len), so it "
                f"has learned positions for {N} pieces only and its training captions were cut "
                f"to {N}. Shorten the sentence to at most {N - 2} pieces between [CLS] and [SEP]")

    @torch.inference_mode()
    def _top_k(self, texts: list[str], images: list, top_k: int, sequence: bool = True
               ) -> list[list[list[dict]]]:
        """Per text, per [MASK], ``top_k`` guesses, best first; one forward pass for all texts.

        ``sequence``: add the pipeline's filled-in text to each guess (not in the records of
        :meth:`compare`, which share :mod:`vitbert.decoding`'s shape with ``train.py predict``).
        """
        if top_k < 1:
            raise PredictError(f"top_k={top_k}: ask for at least one guess")
        batch = self._encode(texts)
        input_ids = batch["input_ids"]  # (B, T)
        target_mask = input_ids == self.mask_token_id  # (B, T)
        pixels, visible = self._images(images)
        features = None if pixels is None else self.model.image_features(pixels)
        logits = self.model(input_ids, batch["attention_mask"], features,
                            target_mask=target_mask, image_visible=visible)  # (M, V)
        guessed = guesses(logits, top_k, self.tokenizer)  # (M, k), reading order, text after text
        if sequence:  # the pipeline's "sequence": the text with this guess in its [MASK]
            lengths = batch["attention_mask"].sum(dim=1).tolist()
            for per_mask, (b, t) in zip(guessed, target_mask.nonzero().tolist(), strict=True):
                ids = input_ids[b, : lengths[b]].tolist()
                for guess in per_mask:
                    guess["sequence"] = fill(self.tokenizer, ids, t, guess["token"])
        rows = iter(guessed)
        return [[next(rows) for _ in range(n)] for n in target_mask.sum(dim=1).tolist()]

    def _images(self, images: list) -> tuple[Tensor | None, Tensor | None]:
        """(B, 3, S, S) uint8 and (B, N) visibility, or (None, None) when no text has a photo.

        A text without a photo gets black pixels whose tokens are all blocked: the model reads
        that as the text alone, so texts with and without photos share one forward pass.
        """
        if all(image is None for image in images):
            return None, None
        S = self.image_size
        blank = torch.zeros(3, S, S, dtype=torch.uint8)
        loaded: dict[int, Tensor] = {}  # the same object (one photo for every text) loads once
        pixels = []
        for image in images:
            if image is not None and id(image) not in loaded:
                loaded[id(image)] = load_image(image, S)
            pixels.append(blank if image is None else loaded[id(image)])
        has_image = torch.tensor([image is not None for image in images], device=self.device)
        N = self.model.num_image_tokens
        visible = has_image[:, None].expand(-1, N)  # (B, N)
        return torch.stack(pixels).to(self.device), visible


__all__ = ["FillMask", "ImageLike", "PredictError", "UnknownWordsWarning", "default_device",
           "load_image", "read_photo", "torch_threads", "unknown_words", "unknown_words_warning"]
