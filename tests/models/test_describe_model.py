import torch
from helpers import load_script

from vitbert.cli import config_net
from vitbert.models import VitBert


def test_describe_counts_the_tied_matrix_once(capsys):
    load_script("describe_model").main(["default", "flickr30k_hybrid"])
    out = capsys.readouterr().out
    with torch.device("meta"):
        total = sum(p.numel() for p in VitBert(config_net("default"))
                    .parameters())
    assert f"{total:,}" in out
    assert "decoder" in out and "Linear (tied)" in out
    assert "HybridEmbed" in out and "12 × Block" in out
    # The embedded default's extension is part of the network it describes.
    assert "BindingReader" in out and "HueFormViT" in out
