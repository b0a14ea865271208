"""The objectives that align photos and captions: contrastive (ITC) and image-text matching (ITM).

**Contrastive** (ALBEF's image-text contrastive loss, ITC; CLIP's InfoNCE). Each caption and each
photo is embedded apart (:mod:`vitbert.models.contrastive`); over a training batch, every caption
should score its own photo above the batch's other photos, and every photo its own captions above
the other photos' captions, by a softmax over cosines divided by the learned temperature, both ways,
averaged.

The batch's *distinct* photos are the candidates: a batch holds several captions of one photo
(Flickr30k has five; ``group_by_photo`` keeps them together), and a loss over B × B caption-photo
cells would count a caption's own photo, shown again in a sibling caption's column, as a
negative: the loss would push a photo away from its own captions. Here:

- text → image: a softmax over the K distinct photos, the caption's own the one positive;
- image → text: for each (photo, one of its captions) pair, that caption against the *other*
  photos' captions only: the photo's other captions are positives too, so they are neither
  pushed away nor in the denominator.

Both directions average over the B (caption, own photo) pairs, so a photo weighs as many captions
as it has in the batch. Scores are in fp32 (the model never casts; the loss does).

**Image-text matching** (ALBEF, Li et al. 2021; ViLT): a binary "is this the caption's photo?"
loss on the caption's [CLS] row (:class:`vitbert.models.ITMHead`), over each caption with its own
photo and with the photo of a *different* image (:func:`vitbert.lit.conditions.another_photo`:
never its own, whichever of an image's five captions it is). A caption cannot be told from its
negative by its words, only by whether they fit the photo. Retrieval re-ranks its short list
with this head where the model has one (:mod:`vitbert.lit.retrieval`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vitbert.lit.conditions import another_photo
from vitbert.lit.negatives import SwapNegatives
from vitbert.lit.objectives import (
    Batch,
    Objective,
    TrainingStep,
    caption_photos,
    original_caption,
)
from vitbert.models import ConfigError, ITMHead, Photos, VitBert


def contrastive_loss(texts: Tensor, images: Tensor, caption_image: Tensor, temperature: Tensor
                     ) -> Tensor:
    """Symmetric InfoNCE over captions ``texts`` (B, E) and distinct photos ``images`` (K, E),
    unit vectors, caption b's photo ``images[caption_image[b]]`` (see the module doc).

    With one photo in the batch nothing is contrasted: the loss is 0 (with its graph kept).
    """
    logits = texts.float() @ images.float().T / temperature  # (B, K)
    text_to_image = F.cross_entropy(logits, caption_image)
    K = len(images)
    own = logits.gather(1, caption_image[:, None]).squeeze(1)  # (B,) each caption's own photo
    positive = caption_image[None, :] == torch.arange(K, device=logits.device)[:, None]  # (K, B)
    others = logits.T.masked_fill(positive, float("-inf")).logsumexp(dim=1)  # (K,) negatives
    image_to_text = (torch.logaddexp(own, others[caption_image]) - own).mean()
    return (text_to_image + image_to_text) / 2


def distinct_photos(batch: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
    """(rows (K,) of the batch's carried photos, one per distinct ``image_id``; each caption's
    place among those K (B,)). A batch from the collator carries each photo once already; one
    that carries a photo per caption (its own copy) is reduced to the distinct ones here."""
    photo = caption_photos(batch)  # (B,) row among the carried photos
    _, slot = torch.unique(batch["image_id"], return_inverse=True)  # (B,) in [0, K)
    K = int(slot.max()) + 1
    first = torch.full((K,), len(slot), device=slot.device).scatter_reduce(
        0, slot, torch.arange(len(slot), device=slot.device), "amin")  # (K,) a caption of each
    return photo[first], slot


class Contrastive(Objective):
    """The contrastive loss (module doc) over the step's tower output (no second tower pass) and
    the captions unmasked (ALBEF reads them whole: a hidden content word is what tells a photo
    from another). Trains the network's contrastive heads (``net.itc_dim``)."""

    name = "itc_loss"

    def build(self, net: VitBert) -> dict[str, nn.Module]:
        if not net.has_itc:
            raise ConfigError("the contrastive objective trains the network's contrastive heads, "
                              "and this net has none: set --model.net.itc_dim (e.g. 128)")
        return {}

    def __call__(self, net: VitBert, step: TrainingStep) -> Tensor:
        batch = step.batch
        rows, slot = distinct_photos(batch)
        images = net.embed_image_tokens(step.tower[rows])  # (K, E)
        texts = net.embed_texts(original_caption(batch), batch["attention_mask"])  # (B, E)
        return contrastive_loss(texts, images, slot, net.itc.temperature)


class ImageTextMatching(Objective):
    """Binary cross-entropy of matched / not matched over :func:`itm_pairs` (module doc), by a
    head on the [CLS] row (``itm_head``); ``val/itm_accuracy`` is the share of pairs judged right.

    Each pair reads the *unmasked* caption, as ALBEF does: the [CLS] then compares the whole
    caption with the photo, whichever objective the batch trains. The cost is one extra encoder
    pass over the 2B pairs; the photos are the step's tower output, so no tower runs again.

    ``swap_negatives``: each caption that allows one also meets its own photo with two of its
    words swapped (:mod:`vitbert.lit.negatives`; NegCLIP's hard negatives), not matched: the
    same words about the same photo, told apart only by what is bound to what. The swaps are
    those the training captions allow, read when the fit starts.
    """

    name = "itm_loss"

    def __init__(self, weight: float = 1.0, swap_negatives: bool = False) -> None:
        super().__init__(weight)
        self.swap_negatives = swap_negatives
        self.swaps: SwapNegatives | None = None

    def build(self, net: VitBert) -> dict[str, nn.Module]:
        self.head = ITMHead(net.config.text.dim)
        return {"itm_head": self.head}

    def prepare(self, datamodule, tokenizer) -> None:
        if self.swap_negatives:
            self.swaps = SwapNegatives.from_captions(tokenizer, datamodule.train_captions())

    def __call__(self, net: VitBert, step: TrainingStep) -> Tensor:
        loss, _ = itm_loss(net, self.head, step.batch, step.tower, self.swaps)
        return loss

    def validation_figures(self, net: VitBert, batch: Batch, tower: Tensor) -> dict[str, Tensor]:
        _, accuracy = itm_loss(net, self.head, batch, tower)
        return {"itm_accuracy": accuracy}


def itm_pairs(image_ids: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """The pairs image-text matching is trained on, for a batch's captions of ``image_ids`` (B,).

    Every caption with its own photo (matched), then every caption that has another image in the
    batch with that image's photo (:func:`another_photo`: never its own image, whichever of an
    image's five captions it is; not matched): B + K pairs, K = B unless the whole batch shows
    one image. Balanced, as in ViLT; the negatives are the batch's, not mined.

    Returns:
        text: (B + K,) the batch row of each pair's caption;
        photo: (B + K,) the batch row of each pair's photo;
        matched: (B + K,) float, 1 for the first B pairs, 0 for the rest.
    """
    B = len(image_ids)
    rows = torch.arange(B, device=image_ids.device)
    source, has_other = another_photo(image_ids)
    text = torch.cat((rows, rows[has_other]))
    photo = torch.cat((rows, source[has_other]))
    matched = (torch.arange(len(text), device=image_ids.device) < B).float()
    return text, photo, matched


def itm_loss(net: VitBert, head: nn.Module, batch: Batch, tower: Tensor,
             swaps: SwapNegatives | None = None) -> tuple[Tensor, Tensor]:
    """The matching loss over :func:`itm_pairs` (and, with ``swaps``, each caption's swapped
    copy with its own photo), and the share of pairs judged right; ``tower`` (P, N, D_img) is the
    batch's tower output."""
    caption = original_caption(batch)  # (B, T)
    text, photo, matched = itm_pairs(batch["image_id"])  # (B + K,) each
    captions, keep = caption[text], batch["attention_mask"][text]
    if swaps is not None:
        negative, has = swaps(caption, batch["content_mask"].bool())  # (B, T), (B,)
        rows = has.nonzero().squeeze(1)  # (S,) the captions with a swap
        captions = torch.cat((captions, negative[rows]))  # (B + K + S, T)
        keep = torch.cat((keep, batch["attention_mask"][rows]))
        photo = torch.cat((photo, rows))
        matched = torch.cat((matched, matched.new_zeros(len(rows))))
    index = caption_photos(batch)[photo]  # each pair's photo among the batch's
    hidden, _ = net.encode(captions, keep, Photos(tower, index))  # (pairs, T, D)
    logits = head(hidden[:, 0]).float()  # (pairs,) from each pair's [CLS]
    loss = F.binary_cross_entropy_with_logits(logits, matched)
    return loss, ((logits > 0).float() == matched).float().mean()
