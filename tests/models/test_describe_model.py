import torch
from helpers import load_script

from vitbert.cli import config_net
from vitbert.models import build_network


def test_describe_counts_the_tied_matrix_once(capsys):
    load_script("describe_model").main(["shapes_binding", "flickr30k_hybrid"])
    out = capsys.readouterr().out
    with torch.device("meta"):
        total = sum(p.numel() for p in build_network(config_net("shapes_binding"))
                    .parameters())
    assert f"{total:,}" in out
    assert "decoder" in out and "Linear (tied)" in out
    assert "HybridEmbed" in out and "12 × Block" in out
    # A config's extension builds the network it describes.
    assert "BindingReader" in out and "HueFormViT" in out
