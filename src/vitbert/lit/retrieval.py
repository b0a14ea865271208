"""Image-text retrieval, the standard protocol: every image of a split against every caption of
it, recall at k both ways (the figure ViLT, ALBEF and BLIP print first).

- text → image R@k: the share of captions whose own photo is among the k photos they score
  highest;
- image → text R@k: the share of photos with *any* of their captions among the k captions they
  score highest (Flickr30k has five per photo: any one is a hit);
- rsum: the six recalls (R@1, R@5, R@10 both ways) summed, in percent, as papers print it.

Every pair is scored by the contrastive score (:mod:`vitbert.models.contrastive`): each photo and
each caption embedded once, in batches, and one matrix product. When the model also has a
matching head (``itm_head``), the top ``rerank_k`` of each query are re-scored by it (ALBEF,
BLIP): it reads the caption and the photo together, so it scores a pair better but costs an
encoder pass per pair; the shortlist stays above the rest, ordered by the head. All-pairs
matching alone (no contrastive heads) is not done here: 1,000 photos × 5,000 captions is 5
million encoder passes (scripts/bench.py times it on a small set).

Chance: a random ranking finds a caption's photo in its top k with probability k / photos.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import torch
from torch import Tensor

from vitbert.lit.evaluation import SplitEvaluation, images_and_references
from vitbert.models import Photos

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


def figures(text_to_image: dict[int, float], image_to_text: dict[int, float], suffix: str = ""
            ) -> dict[str, float]:
    """{``text_to_image_r1``…, ``image_to_text_r10``, ``rsum``} (``suffix`` appended to each):
    recalls as shares in [0, 1], rsum in percent points (the six summed, papers' scale)."""
    out = {f"{name}_r{k}{suffix}": value
           for name, recall in zip(DIRECTIONS, (text_to_image, image_to_text), strict=True)
           for k, value in recall.items()}
    out[f"rsum{suffix}"] = 100 * sum(text_to_image.values()) + 100 * sum(image_to_text.values())
    return out


def recall_at_k(similarity: Tensor, caption_image_index: Tensor, ks: Sequence[int] = KS
                ) -> dict[str, float]:
    """Both directions from one score matrix ``similarity`` (C captions, I photos) and each
    caption's photo ``caption_image_index`` (C,): :func:`figures`."""
    return figures(text_to_image_recall(similarity, caption_image_index, ks),
                   image_to_text_recall(similarity.T, caption_image_index, ks))


PairScores = Callable[[Tensor, Tensor], Tensor]  # (query rows, candidate rows) → scores


def rerank(scores: Tensor, k: int, pair_scores: PairScores) -> Tensor:
    """``scores`` (Q, X) with each query's top ``k`` re-scored by ``pair_scores(queries,
    candidates)`` (both (Q·k,) rows → (Q·k,) scores) and lifted above every other candidate of
    its query, so the shortlist ranks first, in the new order, and the rest keep theirs."""
    k = min(k, scores.shape[1])
    top = scores.topk(k, dim=1).indices  # (Q, k)
    queries = torch.arange(len(scores), device=scores.device).repeat_interleave(k)  # (Q·k,)
    new = pair_scores(queries, top.reshape(-1)).view(len(scores), k).to(scores.dtype)  # (Q, k)
    lift = scores.amax(dim=1, keepdim=True) - new.amin(dim=1, keepdim=True) + 1  # (Q, 1)
    return scores.scatter(1, top, new + lift)


@torch.no_grad()
def embed(net, images: Tensor, input_ids: Tensor, attention_mask: Tensor, batch_size: int = 256,
          keep_tower_tokens: bool = False) -> tuple[Tensor, Tensor, Tensor | None]:
    """Each photo (I, 3, S, S) and each caption (C, T) embedded once, in batches: (photos
    (I, E), captions (C, E), and with ``keep_tower_tokens`` the tower's output (I, N, D_img) for
    re-ranking, else None). Everything on the network's device."""
    device = next(net.parameters()).device
    photos, tokens, texts = [], [], []
    for start in range(0, len(images), batch_size):
        out = net.tower_tokens(images[start:start + batch_size].to(device))  # (b, N, D_img)
        photos.append(net.embed_image_tokens(out))
        if keep_tower_tokens:
            tokens.append(out)
    for start in range(0, len(input_ids), batch_size):
        rows = slice(start, start + batch_size)
        texts.append(net.embed_texts(input_ids[rows].to(device), attention_mask[rows].to(device)))
    return torch.cat(photos), torch.cat(texts), torch.cat(tokens) if keep_tower_tokens else None


@torch.no_grad()
def matching_scores(net, itm_head, input_ids: Tensor, attention_mask: Tensor, tower_tokens: Tensor,
                    captions: Tensor, photos: Tensor, batch_size: int = 256) -> Tensor:
    """The matching head's logit (P,) for each pair (``captions[p]``, ``photos[p]``): rows of
    ``input_ids`` (C, T) and of the tower's output ``tower_tokens`` (I, N, D_img), in batches of
    ``batch_size`` pairs, each batch's distinct photos projected once."""
    device = tower_tokens.device
    input_ids, attention_mask = input_ids.to(device), attention_mask.to(device)
    out = []
    for start in range(0, len(captions), batch_size):
        c = captions[start:start + batch_size].to(device)
        shown, index = torch.unique(photos[start:start + batch_size].to(device),
                                    return_inverse=True)
        hidden, _ = net.encode(input_ids[c], attention_mask[c], Photos(tower_tokens[shown], index))
        out.append(itm_head(hidden[:, 0]).float())  # (b,) from each pair's [CLS]
    return torch.cat(out)


class RetrievalSplit(NamedTuple):
    """Photos and every caption of each, tokenised: what retrieval is measured over."""

    images: Tensor  # (I, 3, S, S) uint8
    input_ids: Tensor  # (C, T)
    attention_mask: Tensor  # (C, T) bool
    caption_image: Tensor  # (C,) the photo of each caption


@torch.no_grad()
def retrieval_scores(net, split: RetrievalSplit, itm_head=None, rerank_k: int = 16,
                     ks: Sequence[int] = KS, batch_size: int = 256) -> dict[str, float]:
    """R@k both ways and rsum (:func:`figures`) of the ``split``'s photos against its captions.

    All pairs by the contrastive score; with ``itm_head`` and ``rerank_k`` > 0 the top
    ``rerank_k`` re-ranked by the head, and the contrastive figures kept beside them with the
    suffix ``_itc``. Also ``images`` and ``captions``, the counts (chance is k / images).
    """
    images, input_ids, attention_mask, caption_image = split
    was_training = net.training
    net.eval()
    reranking = itm_head is not None and rerank_k > 0
    photos, texts, tokens = embed(net, images, input_ids, attention_mask, batch_size, reranking)
    caption_image = caption_image.to(texts.device)
    similarity = (texts @ photos.T).float()  # (C, I) cosines
    itc = recall_at_k(similarity, caption_image, ks)
    out = {"images": float(len(images)), "captions": float(len(input_ids))}
    if not reranking:
        net.train(was_training)
        return out | itc
    head_was_training = itm_head.training
    itm_head.eval()

    def by_head(captions: Tensor, photos: Tensor) -> Tensor:
        return matching_scores(net, itm_head, input_ids, attention_mask, tokens, captions,
                               photos, batch_size)

    text_to_image = rerank(similarity, rerank_k, by_head)  # queries: captions
    image_to_text = rerank(similarity.T, rerank_k, lambda p, c: by_head(c, p))  # queries: photos
    net.train(was_training)
    itm_head.train(head_was_training)
    return out | figures(text_to_image_recall(text_to_image, caption_image, ks),
                         image_to_text_recall(image_to_text, caption_image, ks)) | {
        f"{name}_itc": value for name, value in itc.items()}


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
        rerank_k: each query's shortlist re-ranked by the matching head, when the model has one;
            0 ranks by the contrastive score alone.
        batch_size: photos, captions or pairs per forward pass.
        every_n_epochs: in ``fit``, measured at every n-th epoch's validation and the last one
            (:class:`vitbert.lit.evaluation.SplitEvaluation`).
    """

    prefix = "retrieval_"

    def __init__(self, num_images: int = 0, rerank_k: int = 16, batch_size: int = 256,
                 every_n_epochs: int = 1) -> None:
        super().__init__(num_images, every_n_epochs)
        self.rerank_k = rerank_k
        self.batch_size = batch_size

    def figures(self, trainer, pl_module, dataset, limit: int | None) -> dict[str, float] | None:
        if not pl_module.net.has_itc:
            return None
        split = split_for_retrieval(dataset, pl_module.tokenizer, trainer.datamodule.max_length,
                                    limit)
        return retrieval_scores(pl_module.net, split, pl_module.heads.get("itm_head"),
                                self.rerank_k, batch_size=self.batch_size)
