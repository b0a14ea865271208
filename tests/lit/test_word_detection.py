"""Word detection: its targets are each photo's content words, it learns them from the pixels
alone, it joins the training loss without another tower pass, and it is off unless asked for."""

from __future__ import annotations

import pytest
import torch
from steps import training_step
from torch import nn

from vitbert.data.features import IMAGE_INDEX
from vitbert.data.masking import STOP_WORDS, MLMCollator
from vitbert.data.tokenizer import train_wordpiece
from vitbert.lit.module import MaskedLMModule
from vitbert.lit.objectives import (
    MaskedLM,
    WordDetection,
    image_features,
    masked_lm_loss,
    word_detection_loss,
)
from vitbert.lit.optim import OptimizerConfig, parameter_groups
from vitbert.models import (
    ImageTowerConfig,
    TextTowerConfig,
    VitBert,
    VitBertConfig,
    WordDetectorHead,
)

PIXELS = {"red": (230, 20, 20), "green": (20, 200, 20), "blue": (20, 20, 230),
          "yellow": (230, 230, 20)}
# Two captions per photo: its colour, and words that are in every caption or in one only.
CAPTIONS = ("a {} square is on the left .", "the {} thing sits near a wall .")


@pytest.fixture(scope="module")
def tok():
    texts = [c.format(colour) for colour in PIXELS for c in CAPTIONS] * 3
    return train_wordpiece(texts, vocab_size=200, min_frequency=1)  # every word one piece


def tiny_config(vocab_size: int) -> VitBertConfig:
    image = ImageTowerConfig(kind="vit", image_size=16, patch_size=8, dim=32, depth=1, num_heads=2)
    text = TextTowerConfig(dim=32, depth=1, num_heads=2, max_len=16)
    return VitBertConfig(image=image, text=text, vocab_size=vocab_size)


def photo_items() -> list[dict]:
    """Each colour's photo with its two captions, as the dataset gives them (``row``: the photo)."""
    items = []
    for row, colour in enumerate(PIXELS):
        image = torch.tensor(PIXELS[colour], dtype=torch.uint8)[:, None, None].expand(3, 16, 16)
        for caption in CAPTIONS:
            items.append({"image": image.clone(), "caption": caption.format(colour),
                          "index": len(items), "row": row})
    return items


def test_the_targets_are_the_content_words_of_each_photos_captions(tok):
    torch.manual_seed(0)
    items = photo_items()
    # Half the pieces hidden (80% [MASK], 10% a random piece): the targets must not change.
    batch = MLMCollator(tok, mlm_probability=0.5)(items)
    assert len(batch["images"]) == len(PIXELS), "each photo once"
    head = WordDetectorHead(32, len(tok))
    tokens = torch.randn(len(PIXELS), 4, 32)  # (P, N, D_img): what the tower would give
    loss = word_detection_loss(head, batch, tokens)

    # The reference, from the caption strings: every piece of every non-function word.
    expected = []
    for row in range(len(PIXELS)):
        counts = torch.zeros(len(tok))
        for item in items:
            if item["row"] == row:
                for word in item["caption"].split():
                    if word not in STOP_WORDS:
                        for piece in tok(word, add_special_tokens=False)["input_ids"]:
                            counts[piece] += 1
        log_p = torch.log_softmax(head(tokens[row : row + 1])[0], dim=-1)
        expected.append(-(counts / counts.sum() * log_p).sum())
    torch.testing.assert_close(loss, torch.stack(expected).mean())


def test_the_detector_learns_each_photos_colour_from_its_pixels_alone(tok):
    torch.manual_seed(0)
    net = VitBert(tiny_config(len(tok)))
    head = WordDetectorHead(32, len(tok))
    batch = MLMCollator(tok)(photo_items())
    optimizer = torch.optim.AdamW([*net.image_tower.parameters(), *head.parameters()], lr=3e-3)
    for _ in range(100):
        loss = word_detection_loss(head, batch, image_features(net, batch))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    colour_ids = [tok.convert_tokens_to_ids(colour) for colour in PIXELS]
    assert tok.unk_token_id not in colour_ids
    with torch.no_grad():
        logits = head(image_features(net, batch))  # (P, V)
    scores = logits[:, colour_ids]  # (P, colours)
    assert scores.argmax(dim=1).tolist() == list(range(len(PIXELS))), scores
    # Every caption holds one colour among ~10 content pieces: the photo's own gets about 1/10.
    probabilities = torch.softmax(logits, dim=-1)
    assert (probabilities[:, colour_ids].diagonal() > 0.05).all()


def test_the_training_loss_adds_the_weighted_word_loss_with_one_tower_pass(tok):
    torch.manual_seed(0)
    module = MaskedLMModule(net=tiny_config(len(tok)), vocab_size=len(tok),
                            objectives=[MaskedLM(), WordDetection(weight=0.3)]).eval()
    net, head = module.net, module.word_head
    batch = MLMCollator(tok)(photo_items())
    sizes = []
    net.image_tower.register_forward_hook(lambda _, args, out: sizes.append(len(args[0])))
    loss, parts = training_step(module, batch, tok.mask_token_id)
    assert sizes == [len(PIXELS)], "the MLM pass reuses the tower's output"
    assert set(parts) == {"train/loss", "train/word_loss"}
    torch.testing.assert_close(loss, parts["train/loss"] + 0.3 * parts["train/word_loss"])
    tower = net.image_features(batch["images"])
    torch.testing.assert_close(parts["train/loss"], masked_lm_loss(net, batch, tower))
    torch.testing.assert_close(parts["train/word_loss"], word_detection_loss(head, batch, tower))
    assert batch[IMAGE_INDEX].tolist() == [0, 0, 1, 1, 2, 2, 3, 3]


def test_without_the_objective_no_head_and_old_checkpoints_load_strictly():
    config = tiny_config(30)
    without = MaskedLMModule(net=config, vocab_size=30)
    assert "word_head" not in without.heads and not hasattr(without, "word_head")
    with_head = MaskedLMModule(net=config, vocab_size=30,
                               objectives=[MaskedLM(), WordDetection(weight=1.0)])
    assert with_head.word_head.classifier.out_features == 30
    assert with_head.heads == {"word_head": with_head.word_head}
    fresh = {k: v.clone() for k, v in with_head.word_head.state_dict().items()}
    with_head.load_state_dict(without.state_dict(), strict=True)
    for key, value in fresh.items():  # the head keeps its fresh weights
        assert torch.equal(with_head.word_head.state_dict()[key], value), key
    for key, value in without.net.state_dict().items():
        assert torch.equal(with_head.net.state_dict()[key], value), key


def test_the_optimizer_trains_every_head():
    net = VitBert(tiny_config(30))
    heads = nn.ModuleList([nn.Linear(32, 1), WordDetectorHead(32, 30)])  # another head beside
    groups = parameter_groups(net, OptimizerConfig(), heads=heads)
    trained = [id(p) for g in groups for p in g["params"]]
    expected = {id(p) for p in [*net.parameters(), *heads.parameters()]}
    assert len(trained) == len(set(trained)) and set(trained) == expected


def test_a_batch_with_no_content_word_teaches_nothing_and_keeps_its_graph(tok):
    batch = MLMCollator(tok)(photo_items())
    head = WordDetectorHead(32, len(tok))
    tokens = torch.randn(len(PIXELS), 4, 32, requires_grad=True)
    no_content = torch.zeros_like(batch["content_mask"], dtype=torch.bool)
    loss = word_detection_loss(head, {**batch, "content_mask": no_content}, tokens)
    assert loss.item() == 0.0
    loss.backward()  # DDP needs every parameter in the graph, with a zero gradient here
    assert torch.equal(head.classifier.weight.grad, torch.zeros_like(head.classifier.weight))
