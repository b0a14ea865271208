"""The objective that aligns photos and captions: ALBEF's image-text contrastive loss (ITC;
CLIP's InfoNCE). Each caption and each photo is embedded apart (:mod:`vitbert.models.contrastive`);
over a training batch, every caption should score its own photo above the batch's other photos,
and every photo its own captions above the other photos' captions, by a softmax over cosines
divided by the learned temperature, both ways, averaged.

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
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vitbert.lit.objectives import (
    Objective,
    TrainingStep,
    caption_photos,
    original_caption,
)
from vitbert.models import ConfigError, VitBert


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
    """The contrastive loss (module doc) over the step's image features (no second tower pass) and
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
        images = net.embed_image_features(step.image_features[rows])  # (K, E)
        texts = net.embed_texts(original_caption(batch), batch["attention_mask"])  # (B, E)
        return contrastive_loss(texts, images, slot, net.itc.temperature)
