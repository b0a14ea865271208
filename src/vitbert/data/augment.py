"""Training-time picture augmentation that keeps the caption true.

An augmentation is only harmless to a captioning target if every word of the caption still holds
for the changed picture. A random resized crop that keeps most of the picture (by default at least
half its area) moves and rescales what is shown without removing it or changing its colour. Not
used, and why:

- horizontal flip: turns "on the left" into a lie (Flickr30k captions say left and right);
- colour jitter / hue shift: turns "a red shirt" into a lie (colour words are among the words the
  photo should help most with);
- small crops: may cut out the dog the caption is about.
"""

from __future__ import annotations

from torchvision.transforms import v2


def random_resized_crop(image_size: int, min_scale: float) -> v2.Transform | None:
    """A crop of at least `min_scale` of the area (aspect 3:4 to 4:3), resized back to
    `image_size`; None when `min_scale` is 1 (no augmentation). Works on uint8 (3, S, S)."""
    if not 0.0 < min_scale <= 1.0:
        raise ValueError(f"random_crop_scale must be in (0, 1], got {min_scale}")
    if min_scale == 1.0:
        return None
    return v2.RandomResizedCrop(image_size, scale=(min_scale, 1.0), ratio=(3 / 4, 4 / 3),
                                antialias=True)
