"""Sample, then rerank: of several captions the writer finds likely, keep the one whose whole
sentence best matches the photo.

Why: written left to right, a caption's second object begins with a word that comes before
anything saying which object it is ("a small red circle left of a large ___"): the writer has to
choose the object not yet named, and where it fails it names the first object twice, each word
likely given the ones before it. A score of the whole caption against the photo sees that the
second object is missing. The contrastive heads (ALBEF's ITC, :mod:`vitbert.models.contrastive`)
give such a score in one text pass per caption: sampling N captions and keeping the one they
score highest is how DALL·E's images were chosen with CLIP and how BLIP filters its synthetic
captions. The greedy caption is among the candidates, so the choice can only fall on a caption
the two scores below prefer to it.

The contrastive score embeds the caption whole, apart from the photo, and so binds only as well
as one vector can ("a red circle and a blue square" against "a blue circle and a red square").
The masked-language head reads the photo with each word hidden in turn and binds where the
model does: the pseudo-log-likelihood of the caption's content pieces with the photo
(:mod:`vitbert.decoding.likelihood`). Both are log-probabilities of the caption given the photo
up to a constant over the candidates (the contrastive one is the similarity divided by the
learned temperature: the logit of the image-to-text softmax), so the candidates are ranked by
their sum, a product of the two experts, with no weight to tune (what each kept when it was
measured: docs/research-log.md).
"""

from __future__ import annotations

import torch
from torch import Tensor

from vitbert.decoding.generate import CaptionTokens, Generated, greedy, sample
from vitbert.decoding.likelihood import pseudo_log_likelihood


def caption_rows(tokens: CaptionTokens, captions: list[Generated], max_len: int
                 ) -> tuple[Tensor, Tensor]:
    """Captions → ``[CLS] pieces [SEP]`` rows, padded (C, T) and their attention mask (C, T);
    pieces past ``max_len`` - 2 are cut, as the tokenizer cuts."""
    rows = [[tokens.cls, *c.token_ids[:max_len - 2], tokens.sep] for c in captions]
    width = max(len(r) for r in rows)
    ids = torch.zeros(len(rows), width, dtype=torch.long)  # [PAD] is 0 in BERT's vocabulary
    keep = torch.zeros(len(rows), width, dtype=torch.bool)
    for i, row in enumerate(rows):
        ids[i, :len(row)] = torch.tensor(row)
        keep[i, :len(row)] = True
    return ids, keep


@torch.no_grad()
def rerank(model, tokens: CaptionTokens, images: Tensor, candidates: list[list[Generated]],
           likelihood: bool = True) -> list[list[Generated]]:
    """Per image its candidates (duplicates dropped), best first, each with ``similarity`` (the
    contrastive cosine) and ``likelihood`` (the pseudo-log-likelihood of its content pieces with
    the photo) set; ranked by similarity / temperature + likelihood (module doc).
    ``likelihood=False``: by the contrastive score alone, one text pass per caption instead of
    one per content piece. ``images`` (B, 3, S, S); the model needs its contrastive heads
    (``net.itc_dim`` > 0)."""
    features = model.image_features(images)  # (B, N, D_img): the tower once, for both scores
    photos = model.embed_image_features(features)  # (B, E), unit vectors
    unique = [list({tuple(c.token_ids): c for c in found}.values()) for found in candidates]
    ids, keep = caption_rows(tokens, [c for found in unique for c in found],
                             model.config.text.max_len)  # (C, T): every image's, in one pass
    ids, keep = ids.to(images.device), keep.to(images.device)
    texts = model.embed_texts(ids, keep)  # (C, E)
    owner = torch.repeat_interleave(torch.tensor([len(found) for found in unique]))  # (C,)
    owner = owner.to(images.device)
    similarity = (texts * photos[owner]).sum(dim=-1)  # (C,)
    fit = torch.zeros_like(similarity)  # (C,)
    if likelihood:
        pieces = keep & (ids != tokens.cls) & (ids != tokens.sep)
        content = pieces & ~torch.isin(ids, torch.tensor(tokens.function, device=ids.device))
        fit, _ = pseudo_log_likelihood(model, ids, keep, content, tokens.mask, features, owner)
    rank = (similarity / model.itc.temperature + fit).tolist()
    similarity, fit = similarity.tolist(), fit.tolist()
    results, start = [], 0
    for found in unique:
        order = sorted(range(len(found)), key=lambda i: -rank[start + i])  # ties: first offered
        results.append([Generated(found[i].token_ids, found[i].score, similarity[start + i],
                                  fit[start + i] if likelihood else None) for i in order])
        start += len(found)
    return results


def sample_and_rerank(model, tokens: CaptionTokens, images: Tensor, num_samples: int = 15,
                      max_new_tokens: int | None = None, seed: int = 0,
                      greedy_captions: list[Generated] | None = None,
                      likelihood: bool = True) -> list[list[Generated]]:
    """The greedy caption (``greedy_captions`` when written already) and ``num_samples``
    sampled ones per image (:func:`sample`, at temperature 1), reranked (:func:`rerank`,
    ``likelihood`` as there): per image the distinct candidates, best first."""
    first = (greedy_captions if greedy_captions is not None
             else greedy(model, tokens, images, max_new_tokens=max_new_tokens))
    drawn = sample(model, tokens, images, num_samples=num_samples,
                   max_new_tokens=max_new_tokens, seed=seed)
    return rerank(model, tokens, images, [[g, *s] for g, s in zip(first, drawn, strict=True)],
                  likelihood)
