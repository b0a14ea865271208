"""Write a caption for a photo: what people do with a vitbert trained to generate.

    cap = Captioner.from_checkpoint("runs/latest/checkpoints/last.ckpt")     # or an exported folder
    cap("photo.png", num_beams=3)
    # [{"caption": "a small red circle left of a large blue square", "score": -0.07,
    #   "generated_text": "a small red circle ..."}]

The result has the shape of the transformers ``image-to-text`` pipeline (a list of dicts per image,
with ``generated_text``), plus ``caption`` and ``score`` (see :mod:`vitbert.decoding.generate`).
Greedy and beam search need a model trained with the generation objective (a ``CaptionWriting``
objective); ``method="mask-predict"`` also writes with an MLM-only model, and is the default for a
``.ckpt`` whose run had no such objective (left to right, such a model repeats a word to the
longest caption). ``method="rerank"`` writes the greedy caption and ``num_samples`` sampled ones
and returns them best first (:mod:`vitbert.decoding.rerank`; a model with contrastive heads):
``score`` stays the caption's log-probability per piece; ``similarity`` (the contrastive cosine)
and ``likelihood`` (the pseudo-log-likelihood of its content pieces with the photo) are what order
them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import torch

from vitbert.decoding import (
    CaptionTokens,
    Generated,
    beam_search,
    greedy,
    mask_predict,
    sample_and_rerank,
)
from vitbert.io import load_model
from vitbert.io.files import WEIGHTS_FILE, load_tensors_file
from vitbert.predict import ImageLike, PredictError, default_device, load_image

Method = Literal["greedy", "beam", "mask-predict", "rerank"]
METHODS: tuple[str, ...] = ("greedy", "beam", "mask-predict", "rerank")
# An exported model's weights file says whether its run taught it to write ("true" / "false").
WRITES_KEY = "writes_captions"


class Captioner:
    """Captions for photos, from a model on ``device`` in eval mode.

    ``writes``: whether the model was trained to write left to right (None: not known, taken as
    yes); a model that was not writes by Mask-Predict unless a ``method`` is asked for.
    """

    def __init__(self, model, tokenizer, device: str | torch.device | None = None,
                 writes: bool | None = None) -> None:
        self.writes = writes
        self.device = torch.device(device) if device is not None else default_device()
        self.model = model.to(self.device).eval()
        self.tokenizer = tokenizer
        self.tokens = CaptionTokens.from_tokenizer(tokenizer)
        self.image_size: int = model.config.image.image_size

    @classmethod
    def from_checkpoint(cls, path: str | Path, device: str | torch.device | None = None
                        ) -> Captioner:
        """From a Lightning ``.ckpt`` or an exported folder (raises ``CheckpointError``)."""
        device = torch.device(device) if device is not None else default_device()
        model, tokenizer = load_model(path, map_location=device)
        return cls(model, tokenizer, device, trained_to_write(path))

    def __call__(self, image: ImageLike | list[ImageLike] | None, num_beams: int = 1,
                 method: Method | None = None, max_new_tokens: int | None = None,
                 length_penalty: float = 1.0, num_return_sequences: int = 1,
                 num_samples: int = 15) -> list:
        """Per image, ``num_return_sequences`` dicts ``{"caption", "score", "generated_text"}``
        (and ``"similarity"`` and ``"likelihood"`` for ``method="rerank"``).

        One image → that list; a list of images → a list of such lists, decoded as one batch.
        ``image=None`` writes from no image at all (the text-only control). ``method`` defaults to
        greedy for one beam and beam search for more (Mask-Predict for a model not trained to
        write, :attr:`writes`); ``num_samples`` is rerank's.
        """
        method = method or self.default_method(num_beams)
        if method not in METHODS:
            raise PredictError(f"method={method!r}: use one of {', '.join(METHODS)}")
        if num_beams < 1 or num_samples < 1:
            raise PredictError(f"num_beams={num_beams}, num_samples={num_samples}: use at least 1")
        most = {"beam": num_beams, "rerank": num_samples + 1}.get(method, 1)
        if not 1 <= num_return_sequences <= most:
            raise PredictError(f"num_return_sequences={num_return_sequences}: between 1 and the "
                               "number of beams (of samples + 1 for rerank; 1 for greedy and "
                               "mask-predict)")
        if method == "rerank" and (image is None or not self.model.has_itc):
            raise PredictError("method='rerank' ranks captions against a photo by the "
                               "contrastive score: pass a photo, and a model trained with the "
                               "contrastive objective (as the embedded default is)")
        single = not isinstance(image, (list, tuple))
        images = [image] if single else list(image)
        found = self._generate(images, method, num_beams, max_new_tokens, length_penalty,
                               num_return_sequences, num_samples)
        results = [[self._describe(g) for g in per_image] for per_image in found]
        return results[0] if single else results

    def default_method(self, num_beams: int = 1) -> str:
        """The method a call without one uses."""
        if self.writes is False:
            return "mask-predict"
        return "beam" if num_beams > 1 else "greedy"

    @torch.inference_mode()
    def _generate(self, images: list, method: str, num_beams: int, max_new_tokens: int | None,
                  length_penalty: float, num_return_sequences: int, num_samples: int
                  ) -> list[list[Generated]]:
        if any(i is None for i in images) and not all(i is None for i in images):
            raise PredictError("pass photos for all images or None for all (text-only control)")
        pixels = None
        if images[0] is not None:
            pixels = torch.stack([load_image(i, self.image_size) for i in images]).to(self.device)
        # From no image every caption is the same: written once, given to each.
        copies = len(images) if pixels is None else 1
        if method == "mask-predict":
            return [[g] for g in mask_predict(self.model, self.tokens, pixels)] * copies
        if method == "rerank":
            found = sample_and_rerank(self.model, self.tokens, pixels, num_samples,
                                      max_new_tokens=max_new_tokens)
            return [per_image[:num_return_sequences] for per_image in found]
        if method == "greedy":
            return [[g] for g in greedy(self.model, self.tokens, pixels, max_new_tokens,
                                        length_penalty)] * copies
        return beam_search(self.model, self.tokens, pixels, num_beams, max_new_tokens,
                           length_penalty, num_return_sequences) * copies

    def _describe(self, generated: Generated) -> dict:
        text = self.tokenizer.decode(generated.token_ids, skip_special_tokens=True)
        described = {"caption": text, "score": generated.score, "generated_text": text}
        if generated.similarity is not None:
            described["similarity"] = generated.similarity
        if generated.likelihood is not None:
            described["likelihood"] = generated.likelihood
        return described


def trained_to_write(path: str | Path) -> bool | None:
    """Whether the run that wrote ``path`` taught its model to write captions left to right: a
    ``.ckpt``'s ``model.objectives`` (or an older run's ``generation_probability``) say, and an
    exported folder's weights file when ``scripts/export.py`` wrote it (:data:`WRITES_KEY` in its
    header); None when the file does not say."""
    if Path(path).is_dir():
        from safetensors import safe_open

        with safe_open(Path(path) / WEIGHTS_FILE, "pt") as weights:
            said = (weights.metadata() or {}).get(WRITES_KEY)
        return None if said is None else said == "true"
    from vitbert.lit.objectives import build_objective, writes_captions

    hparams = load_tensors_file(Path(path), mmap=True).get("hyper_parameters", {})
    if "objectives" in hparams:
        return writes_captions([build_objective(spec) for spec in hparams["objectives"]])
    if "generation_probability" in hparams:
        return hparams["generation_probability"] > 0
    return None


def export_metadata(checkpoint: str | Path) -> dict[str, str]:
    """What ``scripts/export.py`` writes into the exported weights' header: :data:`WRITES_KEY`,
    when the checkpoint says."""
    try:
        writes = trained_to_write(checkpoint)
    except Exception:  # not a readable checkpoint: the export that follows says why, in one line
        return {}
    return {} if writes is None else {WRITES_KEY: "true" if writes else "false"}


__all__ = ["METHODS", "WRITES_KEY", "Captioner", "Method", "export_metadata", "trained_to_write"]
