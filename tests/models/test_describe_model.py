import importlib.util
from pathlib import Path

import torch

from vitbert.models import VitBert, preset

SCRIPT = Path(__file__).parents[2] / "scripts" / "describe_model.py"


def _script():
    spec = importlib.util.spec_from_file_location("describe_model", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_describe_counts_the_tied_matrix_once(capsys):
    _script().main(["default", "flickr30k_hybrid"])
    out = capsys.readouterr().out
    with torch.device("meta"):
        total = sum(p.numel() for p in VitBert(preset("default"))
                    .parameters())
    assert f"{total:,}" in out
    assert "decoder" in out and "Linear (tied)" in out
    assert "HybridEmbed" in out and "12 × Block" in out
