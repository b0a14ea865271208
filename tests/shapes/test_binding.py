"""The binding swap tests: the pseudo-log-likelihood, the fill-mask reading, the shapes' swaps."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from vitbert.data.tokenizer import train_wordpiece
from vitbert.models import ImageTowerConfig, TextTowerConfig, VitBert, VitBertConfig
from vitbert.shapes.binding import (
    binding_scores,
    content_pieces,
    pseudo_log_likelihood,
)
from vitbert.shapes.captions import binding_swaps

CAPTIONS = ["a small red circle left of a large blue square",
            "the large green cross is above the small yellow triangle"] * 3


@pytest.fixture(scope="module")
def tokenizer():
    return train_wordpiece(CAPTIONS, vocab_size=200, min_frequency=1)


@pytest.fixture(scope="module")
def net(tokenizer):
    config = VitBertConfig(image=ImageTowerConfig(dim=32, depth=1, num_heads=2),
                           text=TextTowerConfig(dim=32, depth=1, num_heads=2),
                           vocab_size=len(tokenizer))
    return VitBert(config).eval()


def pictures(n: int) -> torch.Tensor:
    return torch.randint(0, 256, (n, 3, 32, 32), generator=torch.Generator().manual_seed(0),
                         dtype=torch.uint8)


def test_the_pseudo_log_likelihood_is_each_content_piece_hidden_in_turn(net, tokenizer):
    ids, keep, content = content_pieces(tokenizer, CAPTIONS[:2], 32)
    images = pictures(2)
    index = torch.tensor([1, 0])
    total, readings = pseudo_log_likelihood(net, ids, keep, content, tokenizer.mask_token_id,
                                            net.image_features(images), index, chunk=3)
    for b in range(2):
        expected = 0.0
        for position in content[b].nonzero().squeeze(1).tolist():
            masked = ids[b:b + 1].clone()
            masked[0, position] = tokenizer.mask_token_id
            with torch.no_grad():
                logits = net(masked, keep[b:b + 1],
                             net.image_features(images[index[b]][None]))  # (1, T, V)
            expected += logits[0, position].log_softmax(-1)[ids[b, position]].item()
        assert total[b].item() == pytest.approx(expected, abs=1e-4)
        assert len(readings[b]) == int(content[b].sum())
    words = tokenizer.convert_ids_to_tokens(ids[0][content[0]])
    assert "a" not in words and "of" not in words and "red" in words  # content words only
    # Image features without an index: caption b sees photo b.
    own, _ = pseudo_log_likelihood(net, ids, keep, content, tokenizer.mask_token_id,
                                   net.image_features(images[index]))
    torch.testing.assert_close(own, total)
    text_only, _ = pseudo_log_likelihood(net, ids, keep, content, tokenizer.mask_token_id, None)
    assert not torch.allclose(text_only, total)


def test_a_negative_that_is_the_caption_itself_ties(net, tokenizer):
    figures = binding_scores(net, tokenizer, pictures(2), [[c] for c in CAPTIONS[:2]],
                             lambda caption: [("same", caption)])
    assert figures["pll_same"] == figures["pll_text_same"] == 0.5
    assert figures["pairs_same"] == 2
    assert "fill_same" not in figures  # no word changed, nothing to hide


class RedThenBlue(nn.Module):
    """A stand-in model that guesses "red" for the first object's colour (a hidden piece in the
    first five positions) and "blue" for the second's, whatever the picture."""

    def __init__(self, tokenizer):
        super().__init__()
        vocab = tokenizer.get_vocab()
        self.red, self.blue = vocab["red"], vocab["blue"]
        self.vocab_size = len(tokenizer)
        self.anchor = nn.Parameter(torch.zeros(()))  # gives the model a device

    def image_features(self, images):
        return images.float()

    def forward(self, input_ids, attention_mask, image_features=None, image_index=None,
                target_mask=None, **_):
        position = target_mask.nonzero()[:, 1]  # (M,) the hidden piece of each row
        logits = torch.zeros(len(position), self.vocab_size)
        logits[:, self.red] = torch.where(position < 5, 2.0, 1.0)
        logits[:, self.blue] = torch.where(position < 5, 1.0, 2.0)
        return logits


def test_fill_mask_binding_compares_the_true_word_with_the_negatives(tokenizer):
    red_first = "a small red circle left of a large blue square"
    blue_first = "a small blue circle left of a large red square"
    model = RedThenBlue(tokenizer)
    right = binding_scores(model, tokenizer, pictures(1), [[red_first]], binding_swaps)
    wrong = binding_scores(model, tokenizer, pictures(1), [[blue_first]], binding_swaps)
    # Both colours hidden in turn, each against the other object's colour.
    assert right["fill_colour"] == 1.0 and wrong["fill_colour"] == 0.0
    assert right["pll_colour"] == 1.0 and wrong["pll_colour"] == 0.0
    unknown = binding_scores(model, tokenizer, pictures(1), [[red_first]],
                             lambda c: [("colour", c.replace("red", "pink"))])
    assert "fill_colour" not in unknown  # "pink" is not a word of the vocabulary: no reading


def test_the_shapes_swaps_exchange_colours_shapes_and_turn_the_relation():
    negatives = dict(binding_swaps("a small red circle left of a large blue square"))
    assert negatives == {
        "colour": "a small blue circle left of a large red square",
        "shape": "a small red square left of a large blue circle",
        "relation": "a small red circle right of a large blue square",
    }
    same_colour = dict(binding_swaps("the small red cross is below the large red square"))
    assert set(same_colour) == {"shape", "relation"}
    assert same_colour["relation"] == "the small red cross is above the large red square"
