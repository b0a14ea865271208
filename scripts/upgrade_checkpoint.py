#!/usr/bin/env python
"""Write a checkpoint or an exported folder of an older vitbert anew, in this version's form.

What it reads anew, a setting at a time:

- files written before the network took extensions held the shapes data's binding levers as
  settings of the core's config (``chroma_dim``, ``neighbour_lookup_heads``, …) and their weights
  at the network's top level: the shapes package reads them as its ``BindingLevers``
  (``vitbert.shapes.model.read_pre_extension_levers``);
- ``image.backbone_pool: true`` (a hybrid tower's CNN output averaged to one cell) is
  ``image.backbone_grid: 1``;
- the heads of objectives since removed (:data:`REMOVED_HEADS`) are left out, and named.

The core's loaders refuse such a file with one line that names this script:

    python scripts/upgrade_checkpoint.py old.ckpt new.ckpt
    python scripts/upgrade_checkpoint.py old_export/ new_export/

The new file predicts, writes captions, searches and fine-tunes (``--model.init_from``) as the old
one did; a ``.ckpt`` keeps everything else it held (the optimizer's state, the run's settings).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import torch

from vitbert.io import CONFIG_FILE, TOKENIZER_FILE, WEIGHTS_FILE, CheckpointError
from vitbert.io.files import load_tensors_file, safetensors_bytes, write_shared
from vitbert.shapes.model import read_pre_extension_levers

# Heads of objectives since removed, with why: an upgraded file is written without them.
REMOVED_HEADS = {"itm_head": "image-text matching's head: that objective was removed (it "
                             "measured below the contrastive score alone)"}


def upgraded(config: dict, weights: dict) -> tuple[dict, dict]:
    """A network's config (plain values) and weights, each older setting read anew."""
    config, weights = read_pre_extension_levers(config, weights)
    image = dict(config.get("image", {}))
    if "backbone_pool" in image:
        image["backbone_grid"] = 1 if image.pop("backbone_pool") else None
    return {**config, "image": image}, weights


def without_removed_heads(weights: dict) -> tuple[dict, list[str]]:
    """``weights`` without the tensors of :data:`REMOVED_HEADS`, and what was left out."""
    dropped = sorted({key.split(".", 1)[0] for key in weights} & set(REMOVED_HEADS))
    kept = {key: value for key, value in weights.items() if key.split(".", 1)[0] not in dropped}
    return kept, [f"left out {head} ({REMOVED_HEADS[head]})" for head in dropped]


def upgrade_checkpoint(source: Path, out: Path) -> list[str]:
    """A Lightning ``.ckpt``: its network's config and ``net.*`` weights read anew; what was
    left out."""
    checkpoint = load_tensors_file(source)
    weights, said = without_removed_heads(checkpoint["state_dict"])
    net = {key.removeprefix("net."): value for key, value in weights.items()
           if key.startswith("net.")}
    config, net = upgraded(checkpoint["hyper_parameters"]["net"], net)
    checkpoint["hyper_parameters"]["net"] = config
    checkpoint["state_dict"] = ({k: v for k, v in weights.items() if not k.startswith("net.")}
                                | {f"net.{k}": v for k, v in net.items()})
    torch.save(checkpoint, out)
    return said


def upgrade_exported(source: Path, out: Path) -> list[str]:
    """An exported folder: config.json and model.safetensors read anew (its header kept), the
    tokenizer copied; what was left out."""
    from safetensors import safe_open
    from safetensors.torch import load_file

    with safe_open(source / WEIGHTS_FILE, "pt") as stored:
        metadata = stored.metadata() or {}
    weights, said = without_removed_heads(load_file(source / WEIGHTS_FILE))
    config, weights = upgraded(json.loads((source / CONFIG_FILE).read_text()), weights)
    out.mkdir(parents=True, exist_ok=True)
    write_shared(out / CONFIG_FILE, json.dumps(config, indent=2) + "\n")
    write_shared(out / WEIGHTS_FILE, safetensors_bytes(weights, metadata))
    if (source / TOKENIZER_FILE).is_file():
        shutil.copyfile(source / TOKENIZER_FILE, out / TOKENIZER_FILE)
    return said


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", type=Path, help="an older .ckpt or exported folder")
    parser.add_argument("out", type=Path, help="where to write the new one")
    args = parser.parse_args(argv)
    try:
        if args.source.is_dir():
            said = upgrade_exported(args.source, args.out)
        elif args.source.is_file():
            said = upgrade_checkpoint(args.source, args.out)
        else:
            raise CheckpointError(f"{args.source}: no such file or folder")
    except (CheckpointError, KeyError) as error:
        print(f"error: {args.source}: not a vitbert checkpoint or exported folder ({error})",
              file=sys.stderr)
        return 2
    print("\n".join([*said, f"wrote {args.out}"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
