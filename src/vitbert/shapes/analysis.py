"""Which objects the written captions get right on the embedded shapes, and how the rest fail.

``colour_shape`` (:mod:`vitbert.shapes.captions`) counts the captions that name both objects'
colours and shapes right; this says which objects fail and how. Every val and test picture of the
shapes data holds a colour–shape pair training never showed (:func:`vitbert.shapes.data.
held_out_pairs`, a compositional split in the manner of CLEVR CoGenT), so objects are counted
apart: a *seen* pair or a *new* one. A new pair named right means the model read its colour and
its shape separately and put them together; a seen pair named right may be a pair remembered.
A miss is told apart by :func:`~vitbert.shapes.captions.object_verdicts`: the colour given
the other object's shape (binding), a shape the picture does not hold, or no shape at all.

The control is the caption written from no image, as in the training table.

:func:`named_object_attention` looks one step further in: when the model is about to write the
shape after a colour, how much of its attention is on the object that colour names, and how much
on the other object. A model that binds reads the named one; one that reads the picture as a bag
of words looks at both alike.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from vitbert.analysis import checkpoint_source
from vitbert.data.cache import SPLITS, CaptionDataset, DataError
from vitbert.io import CheckpointError, load_model
from vitbert.lit.evaluation import images_and_references, write_captions
from vitbert.shapes.captions import (
    COLOUR_SHAPE,
    VERDICTS,
    colour_shape_shares,
    object_verdicts,
)
from vitbert.shapes.data import COLOURS, SHAPES, held_out_pairs
from vitbert.shapes.source import ShapesSource

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
    if not any(o["class_path"].endswith(".CaptionWriting")
               and o.get("init_args", {}).get("probability", 0.3)
               for o in hparams.get("objectives", [])):
        raise CheckpointError(f"{ckpt}: trained without the CaptionWriting objective, so it "
                              f"writes no captions left to right; train with "
                              f"vitbert.lit.objectives.CaptionWriting in model.objectives")
    source.build_cache(int(data["image_size"]))
    dataset = CaptionDataset(source.cache_dir, split)
    model, tokenizer = load_model(ckpt)
    captions, text_only, references, _ = write_captions(model, tokenizer, dataset,
                                                        num_images)
    colour_names = list(COLOURS)
    new_pairs = {(colour_names[c], SHAPES[s]) for c, s in held_out_pairs(source.seed)}
    return {"split": split, **tally(captions, text_only, [r[0] for r in references], new_pairs),
            "attention": named_object_attention(model, tokenizer, dataset, num_images)}


# A patch shows an object when this share of its pixels is within COLOUR_DISTANCE of the
# object's palette colour (the background is grey 30 ± 6, far from every palette colour).
OBJECT_SHARE, COLOUR_DISTANCE = 0.2, 40.0


def colour_patches(image: torch.Tensor, colour: str, patch_size: int) -> torch.Tensor:
    """uint8 (3, S, S) picture → (rows·cols,) bool in raster order: the patches that show the
    object painted ``colour`` (the image tokens over it)."""
    rgb = torch.tensor(COLOURS[colour], dtype=torch.float32)
    near = (image.float().permute(1, 2, 0) - rgb).norm(dim=-1) < COLOUR_DISTANCE  # (S, S)
    S = near.shape[0] // patch_size
    share = near.view(S, patch_size, S, patch_size).float().mean(dim=(1, 3))  # (rows, cols)
    return share.flatten() >= OBJECT_SHARE


@torch.no_grad()
def named_object_attention(model, tokenizer, dataset, num_images: int | None = None
                           ) -> dict[str, Any] | None:
    """Where the model looks when it is about to write a shape: teacher-forced, each picture's
    caption up to an object's colour, then the [MASK] greedy decoding would fill, read under
    the seq2seq mask. Per text-encoder layer, the share of that [MASK]'s attention on the
    object the colour names and on the other object (:func:`colour_patches`), as the mean of
    the heads and for the head that tells them apart most.

    Only pictures whose two objects differ in colour and in shape count (otherwise "named" and
    "other" are not two things). None for a model with one pooled image token (no patches).
    """
    if model.config.image_tokens == "pooled":
        return None
    patch_size, N = model.image_tower.stride, model.num_image_tokens
    device = next(model.parameters()).device
    _, firsts, references = images_and_references(dataset, num_images)
    totals, objects = None, 0  # (layers, heads, 2): named, other
    for index, caption in zip(firsts, (r[0] for r in references), strict=True):
        found = list(COLOUR_SHAPE.finditer(caption.lower()))
        colours, shapes = {m[1] for m in found}, {m[2] for m in found}
        if len(found) != 2 or len(colours) != 2 or len(shapes) != 2:
            continue
        image = dataset[index]["image"]
        patches = {m[1]: colour_patches(image, m[1], patch_size).to(device) for m in found}
        features = model.image_features(image[None].to(device))  # the tower once a picture
        for match, other in zip(found, found[::-1], strict=True):
            prompt = f"{caption[:match.start(2)]}{tokenizer.mask_token}"
            ids = tokenizer(prompt, return_tensors="pt")["input_ids"][:, :-1]  # (1, t): no [SEP]
            ids = ids.to(device)
            _, attention = model(ids, torch.ones_like(ids, dtype=torch.bool), features,
                                 mode="seq2seq", return_attention=True)
            row = torch.stack([a[0, :, -1, :N] for a in attention]).float()  # (layers, H, N)
            shares = torch.stack((row @ patches[match[1]].float(),
                                  row @ patches[other[1]].float()), dim=-1)  # (layers, H, 2)
            totals = shares if totals is None else totals + shares
            objects += 1
    if not objects:
        return {"objects": 0, "layers": []}
    mean = (totals / objects).cpu()  # (layers, H, 2)
    layers = []
    for per_head in mean:
        head = int((per_head[:, 0] - per_head[:, 1]).argmax())
        layers.append({"named": float(per_head[:, 0].mean()), "other": float(per_head[:, 1].mean()),
                       "head": head, "head_named": float(per_head[head, 0]),
                       "head_other": float(per_head[head, 1])})
    return {"objects": objects, "layers": layers}


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
    lines += format_attention(summary.get("attention"))
    return "\n".join(lines)


def format_attention(attention: dict[str, Any] | None) -> list[str]:
    """The lines of :func:`named_object_attention`'s table."""
    if attention is None:
        return ["  (one pooled image token: no patches to tell the objects apart)"]
    lines = [f"  where the [MASK] before a shape looks, over {attention['objects']} objects "
             f"(share of its attention)",
             f"  {'text-encoder layer':<22}{'named':>8}{'other':>8}   most selective head"]
    lines += [f"  {i:<22}{layer['named']:>8.1%}{layer['other']:>8.1%}   "
              f"{layer['head']}: {layer['head_named']:.1%} vs {layer['head_other']:.1%}"
              for i, layer in enumerate(attention["layers"])]
    return lines
