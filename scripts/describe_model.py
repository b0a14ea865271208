"""Print the module tree and parameter counts of a model configuration.

    python scripts/describe_model.py                      # default and flickr30k
    python scripts/describe_model.py flickr30k_hybrid     # one or more configs/<name>.yaml
    python scripts/describe_model.py --config configs/default.yaml   # model.net of a CLI config
    python scripts/describe_model.py --depth 4 flickr30k  # a deeper tree

Models are built on the meta device: no memory, no compute, no weight download. Repeated blocks
are shown once ("× 12"); the tied MLM decoder matrix is counted once, under the word embedding.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from torch import nn

from vitbert.cli import CONFIGS, config_net
from vitbert.models import VitBertConfig, build_network


def load_config(path: Path) -> VitBertConfig:
    """A VitBertConfig from a YAML / JSON file: the ``model.net`` section, or the whole file."""
    import yaml

    data = yaml.safe_load(path.read_text())
    section = data.get("model", {}).get("net", data) if isinstance(data, dict) else None
    if not isinstance(section, dict):
        raise ValueError(f"{path}: no model.net section")
    return VitBertConfig.from_dict(section)


def _owners(model: nn.Module) -> dict[int, str]:
    """Parameter id → the one name it is counted under (the first, as named_parameters dedups)."""
    return {id(p): name for name, p in model.named_parameters()}


def _count(module: nn.Module, prefix: str, owners: dict[int, str]) -> int:
    return sum(
        p.numel() for name, p in module.named_parameters(prefix=prefix, remove_duplicate=False)
        if owners.get(id(p)) == name
    )


def tree(model: nn.Module, max_depth: int = 4) -> list[str]:
    """Indented lines ``name  Class  params``; a ModuleList of identical blocks shows one."""
    owners = _owners(model)
    lines: list[str] = []

    def line(label: str, kind: str, count: int, depth: int) -> None:
        lines.append(f"{'  ' * depth + label:<44} {kind:<22} {count:>13,}")

    def visit(module: nn.Module, name: str, prefix: str, depth: int) -> None:
        children = list(module.named_children())
        kind = type(module).__name__
        repeated = (
            isinstance(module, nn.ModuleList) and len(children) > 1
            and len({tuple(p.shape for p in c.parameters()) for _, c in children}) == 1
        )
        if repeated:
            kind = f"{len(children)} × {type(children[0][1]).__name__}"
            children = children[:1]
        if any(owners.get(id(p)) != n
               for n, p in module.named_parameters(prefix=prefix, recurse=False)):
            kind += " (tied)"  # its weight is counted where it is owned
        line(name, kind, _count(module, prefix, owners), depth)
        if depth >= max_depth:
            return
        for param_name, param in module.named_parameters(prefix=prefix, recurse=False):
            if children and owners.get(id(param)) == param_name:  # e.g. the class token
                line(param_name.rsplit(".", 1)[-1], "Parameter", param.numel(), depth + 1)
        for child_name, child in children:
            child_prefix = f"{prefix}.{child_name}" if prefix else child_name
            if not any(True for _ in child.parameters()):
                continue  # activations, dropouts, identities: nothing to count
            label = f"{child_name} (each)" if repeated else child_name
            visit(child, label, child_prefix, depth + 1)

    visit(model, type(model).__name__, "", 0)
    return lines


def describe(name: str, config: VitBertConfig, max_depth: int = 4) -> str:
    with torch.device("meta"):
        model = build_network(config)
    image, text = config.image, config.text
    total = sum(p.numel() for p in model.parameters())
    grid = image.backbone_grid
    cnn = (f"{image.backbone}{f' (averaged to {grid}×{grid})' if grid else ''}" if image.backbone
           else f"ResNetV2{tuple(image.hybrid_layers)}")
    header = [
        f"== {name} ==",
        f"image: {image.kind} {image.image_size}² patch {image.patch_size}"
        + (f" {cnn}" if image.kind == "hybrid" else "")
        + f" → {model.image_tower.grid_size[0]}×{model.image_tower.grid_size[1]} grid,"
        f" D={image.dim}, {image.depth} blocks, {image.num_heads} heads, pool={image.pool}"
        + (f", attention within {2 * image.attention_radius + 1}×{2 * image.attention_radius + 1}"
           f" patches" if image.attention_radius is not None else "")
        + (f", pretrained={image.pretrained}" if image.pretrained else ""),
        f"text:  D={text.dim}, {text.depth} blocks, {text.num_heads} heads, max_len={text.max_len},"
        f" vocab={config.vocab_size} (decoder tied to the word embedding), layout {text.layout}"
        + (f", pretrained={text.pretrained}" if text.pretrained else ""),
        f"image tokens into the text: {model.num_image_tokens} ({config.image_tokens})",
        "",
        f"{'module':<44} {'class':<22} {'parameters':>13}",
    ]
    return "\n".join([*header, *tree(model, max_depth), f"{'total':<67} {total:>13,}", ""])


def build_parser() -> argparse.ArgumentParser:
    """The command line (tests/test_readme_commands.py parses the docs' commands with it)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    names = ", ".join(sorted(p.stem for p in CONFIGS.glob("*.yaml")))
    parser.add_argument("presets", nargs="*", help=f"names of configs/*.yaml: {names}")
    parser.add_argument("--config", type=Path, action="append", default=[],
                        help="a YAML/JSON config (its model.net section); may repeat")
    parser.add_argument("--depth", type=int, default=4, help="tree depth to print")
    return parser


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    names = args.presets or ([] if args.config else ["default", "flickr30k"])
    for name in names:
        print(describe(name, config_net(name), args.depth))
    for path in args.config:
        print(describe(str(path), load_config(path), args.depth))


if __name__ == "__main__":
    main()
