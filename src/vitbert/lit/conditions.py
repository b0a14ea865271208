"""The evaluation conditions: what the model sees beside each caption. Declared once, here.

Every validation, test and prediction reads each caption three times:

- ``WITH_PHOTO``: with its own photo;
- ``ANOTHER_PHOTO``: with the photo of a *different* image from the same batch (the control);
- ``TEXT_ONLY``: with no image tokens at all.

The honest image gain is with-photo minus another-photo: both inputs have image tokens, only the
photo's content differs. With-photo minus text-only also counts the mere presence of image tokens.
The metrics (``lit/metrics.py``), the table (``run/console.py``), the module and the prediction
records all iterate over :data:`CONDITIONS` and take names from it. The photos are read as the
image tower's output, once per batch: another image's photo is the same output, permuted.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from vitbert.data.features import IMAGE_INDEX, PARTS
from vitbert.lit.objectives import Batch, masked_logits


def select_captions(batch: Batch, keep: Tensor) -> Batch:
    """The captions ``keep`` (B,) bool of ``batch``: per-caption keys are sliced; the batch's
    distinct photos stay whole (their ``image_index`` is sliced, so each kept caption keeps its
    photo)."""
    photos = (*PARTS.values(), "images") if IMAGE_INDEX in batch else ()
    return {key: value if key in photos else value[keep] for key, value in batch.items()}


def another_photo(image_ids: Tensor) -> tuple[Tensor, Tensor]:
    """For each caption the batch row of a photo of a different image, and which captions have one.

    A derangement by image id: the distinct ids of the batch, sorted, each send their captions the
    photo of the next id (the last to the first), taken from the first row that holds it. It never
    pairs a caption with its own image (several captions of one photo, as in Flickr30k's five,
    all move together), and it depends on the batch's ids alone, not on a random state: a batch
    gets the same pairing in every run, worker and DDP rank.

    When every caption of the batch shares one image (a last batch of a few captions) there is no
    other photo in the batch. Those captions are *left out* of the another-photo reading and
    counted (the metric ``skipped_mismatch``, in captions), rather than given a photo from
    elsewhere (a previous batch would make the figure depend on loader order) or their own (which
    would flatter the control).

    Args:
        image_ids: (B,) which image each caption describes.

    Returns:
        source: (B,) long, the row whose photo caption b sees (only meaningful where ``has_other``);
        has_other: (B,) bool, False for captions with no other image in the batch.
    """
    ids, slot = torch.unique(image_ids, sorted=True, return_inverse=True)  # (K,), (B,)
    rows = torch.arange(len(image_ids), device=image_ids.device)
    first_row = torch.full_like(ids, len(image_ids)).scatter_reduce(0, slot, rows, "amin")  # (K,)
    source = first_row[(slot + 1) % len(ids)]  # (B,)
    has_other = torch.full_like(slot, len(ids) > 1, dtype=torch.bool)
    return source, has_other


@dataclass(frozen=True)
class Condition:
    """One way of reading the captions.

    Attributes:
        key: the name in prediction records and metric containers (``with_image``, ...).
        suffix: appended to a metric's name (``top1`` + ``_mismatch``); empty for the photo itself.
        description: the table's row label.
        view: (batch, the image features of its photos) → (the image features to show or
            None, which captions are read (B,) bool); the features are for the read captions
            only: one per read caption, or, when the batch has an ``image_index``, the batch's P
            photos in the places that index points at.
    """

    key: str
    suffix: str
    description: str
    view: Callable[[Batch, Tensor], tuple[Tensor | None, Tensor]]


def _every_caption(batch: Batch) -> Tensor:
    return torch.ones(len(batch["input_ids"]), dtype=torch.bool, device=batch["input_ids"].device)


def _another_photos(batch: Batch, features: Tensor) -> tuple[Tensor, Tensor]:
    source, has_other = another_photo(batch["image_id"])  # (B,) rows, (B,) bool
    if IMAGE_INDEX not in batch:  # one photo per caption: gather the other image's
        return features[source[has_other]], has_other
    # The P distinct photos, permuted: the place caption b points at (image_index[b]) now holds
    # the photo of caption source[b]. All captions of one photo share its place and their source
    # (another_photo moves them together), so each place gets one photo; a place no caption
    # points at keeps its own.
    index = batch[IMAGE_INDEX]  # (B,)
    shown = torch.arange(len(features), device=index.device).scatter_(0, index, index[source])
    return features[shown], has_other  # (P, ...)


WITH_PHOTO = Condition("with_image", "", "with the photo",
                       lambda batch, features: (features, _every_caption(batch)))
ANOTHER_PHOTO = Condition("another_image", "_mismatch", "another image's photo", _another_photos)
TEXT_ONLY = Condition("text_only", "_text", "text only",
                      lambda batch, features: (None, _every_caption(batch)))
CONDITIONS = (WITH_PHOTO, ANOTHER_PHOTO, TEXT_ONLY)


def read(net, batch: Batch, features: Tensor) -> dict[Condition, tuple[Tensor | None, Tensor]]:
    """Each condition's reading of ``batch``, whose photos the tower turned into the image
    ``features`` (P, N, D_img): (logits (M_c, V) at the targets of the captions it reads, or None
    when it reads none; which captions it reads (B,) bool)."""
    readings = {}
    for condition in CONDITIONS:
        shown, reads = condition.view(batch, features)
        seen = batch if reads.all() else select_captions(batch, reads)
        readings[condition] = (masked_logits(net, seen, shown) if reads.any() else None, reads)
    return readings
