"""Which objects the written captions get right on the embedded shapes, and how the rest fail.

``colour_shape`` (:mod:`vitbert.lit.caption_metrics`) counts the captions that name both objects'
colours and shapes right; this says which objects fail and how. Every val and test picture of the
shapes data holds a colour–shape pair training never showed (:func:`vitbert.data.shapes.
held_out_pairs`, a compositional split in the manner of CLEVR CoGenT), so objects are counted
apart: a *seen* pair or a *new* one. A new pair named right means the model read its colour and
its shape separately and put them together; a seen pair named right may be a pair remembered.
A miss is told apart by :func:`~vitbert.lit.caption_metrics.object_verdicts`: the colour given
the other object's shape (binding), a shape the picture does not hold, or no shape at all.

The control is the caption written from no image, as in the training table.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from vitbert.analysis import checkpoint_source
from vitbert.data.cache import SPLITS, CaptionDataset, DataError
from vitbert.data.shapes import COLOURS, SHAPES, held_out_pairs
from vitbert.data.sources import ShapesSource
from vitbert.io import CheckpointError, load_model
from vitbert.lit.caption_metrics import VERDICTS, colour_shape_shares, object_verdicts
from vitbert.lit.captioning import write_captions

PAIR_KINDS = ("seen", "new")  # the object's colour-shape pair was / was never in training


def analyse_captions(ckpt: str | Path, split: str = "val", num_images: int | None = 500,
                     root: str | None = None, cache_dir: str | None = None) -> dict[str, Any]:
    """Greedy captions of ``num_images`` pictures of ``split`` (a fixed sample; None: all),
    scored per picture and per object (:func:`tally`), for a ``.ckpt`` trained on the shapes
    with the generation objective."""
    if split not in SPLITS:
        raise DataError(f"split {split!r} is not one of {SPLITS}")
    source, data = checkpoint_source(ckpt, root, cache_dir)
    if not isinstance(source, ShapesSource):
        raise DataError(f"{ckpt}: trained on {type(source).__name__}; the per-object figures "
                        f"need the embedded shapes data (ShapesSource)")
    hparams = torch.load(ckpt, map_location="cpu", weights_only=True).get("hyper_parameters", {})
    if not hparams.get("generation_probability"):
        raise CheckpointError(f"{ckpt}: trained with MLM alone (generation_probability 0), so it "
                              f"writes no captions left to right; train with "
                              f"--model.generation_probability > 0")
    source.build_cache(int(data["image_size"]))
    dataset = CaptionDataset(source.cache_dir, split)
    model, tokenizer = load_model(ckpt)
    captions, text_only, references = write_captions(model, tokenizer, dataset, num_images)
    colour_names = list(COLOURS)
    new_pairs = {(colour_names[c], SHAPES[s]) for c, s in held_out_pairs(source.seed)}
    return {"split": split, **tally(captions, text_only, [r[0] for r in references], new_pairs)}


def tally(captions: Sequence[str], text_only: str, references: Sequence[str],
          new_pairs: set[tuple[str, str]]) -> dict[str, Any]:
    """Per picture: the shares with every colour and shape right, the colours right, the shapes
    right, with the photo and from no photo. Per object, for seen and new pairs apart: how many,
    and the share of each verdict (``right``, ``other_object``, ``other_shape``,
    ``not_named``)."""
    pictures = {condition: colour_shape_shares(written, references)
                for condition, written in (("photo", captions),
                                           ("no_photo", [text_only] * len(captions)))}
    if pictures["photo"] is None:
        raise DataError("a reference names no colour-shape pair: not a shapes caption")
    verdicts = {kind: Counter() for kind in PAIR_KINDS}
    for caption, reference in zip(captions, references, strict=True):
        for pair, verdict in object_verdicts(caption, reference):
            verdicts["new" if pair in new_pairs else "seen"][verdict] += 1
    objects = {kind: {"count": counts.total(),
                      **{v: counts[v] / max(counts.total(), 1) for v in VERDICTS}}
               for kind, counts in verdicts.items()}
    return {"images": len(captions), "text_only_caption": text_only, "pictures": pictures,
            "objects": objects, "new_pairs": sorted(" ".join(p) for p in new_pairs)}


_PICTURE_ROWS = (("colour_shape", "every colour and shape right"), ("colours", "colours right"),
                 ("shapes", "shapes right"))
_OBJECT_ROWS = (("right", "named right"), ("other_object", "the other object's shape"),
                ("other_shape", "a shape not in the picture"),
                ("not_named", "no shape after its colour"))


def format_caption_summary(summary: dict[str, Any]) -> str:
    """The per-picture and per-object tables, as printed by ``scripts/analyze.py --captions``."""
    pictures, objects = summary["pictures"], summary["objects"]
    lines = [f"greedy captions of {summary['images']} {summary['split']} pictures "
             f"(never in training: {', '.join(summary['new_pairs'])})",
             f"  {'per picture':<34}{'photo':>8}{'no photo':>10}"]
    lines += [f"  {label:<34}{pictures['photo'][key]:>8.1%}{pictures['no_photo'][key]:>10.1%}"
              for key, label in _PICTURE_ROWS]
    lines.append(f"  {'per object, colour-shape pair':<34}{'seen':>8}{'new':>10}")

    def share(kind: str, key: str) -> str:  # no objects of a kind (train pictures): no share
        return f"{objects[kind][key]:.1%}" if objects[kind]["count"] else "–"

    lines += [f"  {label:<34}{share('seen', key):>8}{share('new', key):>10}"
              for key, label in _OBJECT_ROWS]
    lines.append(f"  {'objects':<34}{objects['seen']['count']:>8}{objects['new']['count']:>10}")
    lines.append(f"  no-photo caption: {summary['text_only_caption']!r}")
    return "\n".join(lines)
