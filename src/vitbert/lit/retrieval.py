"""Image-text retrieval, the standard protocol: every image of a split against every caption of
it, recall at k both ways (the figure ViLT, ALBEF and BLIP print first).

- text → image R@k: the share of captions whose own photo is among the k photos they score
  highest;
- image → text R@k: the share of photos with *any* of their captions among the k captions they
  score highest (Flickr30k has five per photo: any one is a hit);
- rsum: the six recalls (R@1, R@5, R@10 both ways) summed, in percent, as papers print it.

Every pair is scored by the contrastive score (:mod:`vitbert.models.contrastive`): each photo and
each caption embedded once, in batches, and one matrix product.

Chance: a random ranking finds a caption's photo in its top k with probability k / photos.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch
from torch import Tensor

from vitbert.lit.evaluation import SplitEvaluation, images_and_references

KS = (1, 5, 10)
DIRECTIONS = ("text_to_image", "image_to_text")


def text_to_image_recall(scores: Tensor, caption_image: Tensor, ks: Sequence[int] = KS
                         ) -> dict[int, float]:
    """``scores`` (C, I): caption c against photo i; ``caption_image`` (C,): each caption's
    photo. {k: the share of captions whose photo is in their top k}."""
    top = scores.topk(min(max(ks), scores.shape[1]), dim=1).indices  # (C, k_max)
    hit = top == caption_image[:, None]  # (C, k_max)
    return {k: hit[:, :k].any(dim=1).float().mean().item() for k in ks}


def image_to_text_recall(scores: Tensor, caption_image: Tensor, ks: Sequence[int] = KS
                         ) -> dict[int, float]:
    """``scores`` (I, C): photo i against caption c. {k: the share of photos with any of their
    captions in their top k}."""
    top = scores.topk(min(max(ks), scores.shape[1]), dim=1).indices  # (I, k_max) captions
    photos = torch.arange(len(scores), device=scores.device)[:, None]
    hit = caption_image[top] == photos  # (I, k_max): a caption of this photo
    return {k: hit[:, :k].any(dim=1).float().mean().item() for k in ks}


def recall_at_k(similarity: Tensor, caption_image_index: Tensor, ks: Sequence[int] = KS
                ) -> dict[str, float]:
    """Both directions from one score matrix ``similarity`` (C captions, I photos) and each
    caption's photo ``caption_image_index`` (C,): {``text_to_image_r1``…, ``image_to_text_r10``,
    ``rsum``}, recalls as shares in [0, 1], rsum in percent points (the six summed, papers'
    scale)."""
    recalls = (text_to_image_recall(similarity, caption_image_index, ks),
               image_to_text_recall(similarity.T, caption_image_index, ks))
    out = {f"{name}_r{k}": value for name, recall in zip(DIRECTIONS, recalls, strict=True)
           for k, value in recall.items()}
    out["rsum"] = 100 * sum(recalls[0].values()) + 100 * sum(recalls[1].values())
    return out


@torch.no_grad()
def embed(net, images: Tensor, input_ids: Tensor, attention_mask: Tensor, batch_size: int = 256
          ) -> tuple[Tensor, Tensor]:
    """Each photo (I, 3, S, S) and each caption (C, T) embedded once, in batches: (photos
    (I, E), captions (C, E)), on the network's device."""
    device = next(net.parameters()).device
    photos, texts = [], []
    for start in range(0, len(images), batch_size):
        photos.append(net.embed_images(images[start:start + batch_size].to(device)))
    for start in range(0, len(input_ids), batch_size):
        rows = slice(start, start + batch_size)
        texts.append(net.embed_texts(input_ids[rows].to(device), attention_mask[rows].to(device)))
    return torch.cat(photos), torch.cat(texts)


class RetrievalSplit(NamedTuple):
    """Photos and every caption of each, tokenised: what retrieval is measured over."""

    images: Tensor  # (I, 3, S, S) uint8
    input_ids: Tensor  # (C, T)
    attention_mask: Tensor  # (C, T) bool
    caption_image: Tensor  # (C,) the photo of each caption


@torch.no_grad()
def retrieval_scores(net, split: RetrievalSplit, ks: Sequence[int] = KS, batch_size: int = 256
                     ) -> dict[str, float]:
    """R@k both ways and rsum (:func:`recall_at_k`) of the ``split``'s photos against its captions,
    every pair by the contrastive score; also ``images`` and ``captions``, the counts (chance is
    k / images)."""
    images, input_ids, attention_mask, caption_image = split
    was_training = net.training
    net.eval()
    photos, texts = embed(net, images, input_ids, attention_mask, batch_size)
    net.train(was_training)
    similarity = (texts @ photos.T).float()  # (C, I) cosines
    return {"images": float(len(images)), "captions": float(len(input_ids))} | recall_at_k(
        similarity, caption_image.to(texts.device), ks)


def split_for_retrieval(dataset, tokenizer, max_length: int, limit: int | None = None
                        ) -> RetrievalSplit:
    """A caption dataset's photos (a fixed sample of ``limit``; None: all) and every caption of
    each."""
    _, firsts, captions = images_and_references(dataset, limit)
    images = torch.stack([dataset[i]["image"] for i in firsts])  # (I, 3, S, S)
    flat = [caption for photo in captions for caption in photo]
    caption_image = torch.tensor([i for i, photo in enumerate(captions) for _ in photo])
    enc = tokenizer(flat, padding="longest", truncation=True, max_length=max_length,
                    return_tensors="pt", return_token_type_ids=False)
    return RetrievalSplit(images, enc["input_ids"], enc["attention_mask"].bool(), caption_image)


class RetrievalEvaluation(SplitEvaluation):
    """Retrieval at the end of each validation (a fixed sample of ``num_images`` photos and all
    their captions) and test (every photo of the split), logged as ``{stage}/retrieval_*``
    (:func:`retrieval_scores`); only for a model with contrastive heads (``net.has_itc``).

    Args:
        num_images: photos sampled per validation (the test uses every photo); 0 turns it off.
        batch_size: photos or captions per forward pass.
        every_n_epochs: in ``fit``, measured at every n-th epoch's validation and the last one
            (:class:`vitbert.lit.evaluation.SplitEvaluation`).
    """

    prefix = "retrieval_"

    def __init__(self, num_images: int = 0, batch_size: int = 256, every_n_epochs: int = 1
                 ) -> None:
        super().__init__(num_images, every_n_epochs)
        self.batch_size = batch_size

    def figures(self, trainer, pl_module, dataset, limit: int | None) -> dict[str, float] | None:
        if not pl_module.net.has_itc:
            return None
        split = split_for_retrieval(dataset, pl_module.tokenizer, trainer.datamodule.max_length,
                                    limit)
        return retrieval_scores(pl_module.net, split, batch_size=self.batch_size)
