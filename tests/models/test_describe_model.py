import torch
from helpers import load_script

from vitbert.models import VitBert, preset


def test_describe_counts_the_tied_matrix_once(capsys):
    load_script("describe_model").main(["default", "flickr30k_hybrid"])
    out = capsys.readouterr().out
    with torch.device("meta"):
        total = sum(p.numel() for p in VitBert(preset("default"))
                    .parameters())
    assert f"{total:,}" in out
    assert "decoder" in out and "Linear (tied)" in out
    assert "HybridEmbed" in out and "12 × Block" in out
