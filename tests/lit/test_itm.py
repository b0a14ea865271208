"""Image-text matching: the pairs, the head, the tower run once, and nothing changed when off."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from steps import training_step

from vitbert.data.features import FEATURES_KEY, IMAGE_INDEX
from vitbert.lit.contrastive import ImageTextMatching, itm_loss, itm_pairs
from vitbert.lit.module import MaskedLMModule
from vitbert.lit.objectives import (
    IGNORE_INDEX,
    CaptionWriting,
    MaskedLM,
    caption_photos,
    masked_lm_loss,
    seq2seq_batch,
    tower_output,
)
from vitbert.lit.optim import OptimizerConfig, parameter_groups
from vitbert.models import ImageTowerConfig, ITMHead, TextTowerConfig, VitBert, VitBertConfig

MASK = 4
COLOURS = torch.tensor([[230, 20, 20], [20, 200, 20], [20, 20, 230], [230, 230, 20]])


def tiny_config() -> VitBertConfig:
    image = ImageTowerConfig(kind="vit", image_size=16, patch_size=8, dim=32, depth=1, num_heads=2)
    text = TextTowerConfig(dim=32, depth=1, num_heads=2, max_len=8)
    return VitBertConfig(image=image, text=text, vocab_size=30)


def colour_batch(captions_per_photo: int = 2, each_photo_once: bool = False
                 ) -> dict[str, torch.Tensor]:
    """Four one-colour photos, each with captions "[CLS] the <its colour's word> [SEP]"; one
    caption piece is an MLM target. Whether a photo is a caption's is learnable from the colour.
    ``each_photo_once``: the photos as the collator gives them, the 4 distinct ones and an
    ``image_index``; else one copy per caption."""
    image_id = torch.arange(4).repeat_interleave(captions_per_photo)  # (B,)
    shown = torch.arange(4) if each_photo_once else image_id
    images = COLOURS[shown][:, :, None, None].expand(len(shown), 3, 16, 16).to(torch.uint8)
    caption = torch.stack([torch.tensor([2, 7, 10 + int(i), 3]) for i in image_id])  # (B, 4)
    labels = torch.full_like(caption, IGNORE_INDEX)
    labels[:, 1] = caption[:, 1]
    input_ids = caption.clone()
    input_ids[:, 1] = MASK
    batch = {"input_ids": input_ids, "attention_mask": torch.ones_like(caption, dtype=torch.bool),
             "labels": labels, "image_id": image_id, "images": images.clone()}
    return batch | ({IMAGE_INDEX: image_id} if each_photo_once else {})


@pytest.mark.parametrize("image_ids", [
    torch.arange(13).repeat_interleave(5),        # Flickr30k: five captions per photo, together
    torch.tensor([7, 3, 7, 9, 3, 3, 100, 9]),     # shuffled, uneven counts
    torch.arange(64),                             # one caption per picture
])
def test_negatives_never_pair_a_caption_with_its_own_image(image_ids):
    text, photo, matched = itm_pairs(image_ids)
    B = len(image_ids)
    assert len(text) == len(photo) == len(matched) == 2 * B
    positives, negatives = matched == 1, matched == 0
    assert (text[positives] == torch.arange(B)).all()
    assert (photo[positives] == text[positives]).all()
    assert (text[negatives] == torch.arange(B)).all(), "every caption gets one negative"
    assert (image_ids[photo[negatives]] != image_ids[text[negatives]]).all()


def test_a_batch_of_one_image_has_no_negatives():
    text, photo, matched = itm_pairs(torch.full((5,), 42))
    assert (matched == 1).all() and (text == photo).all() and len(text) == 5


def test_swapped_captions_join_as_unmatched_pairs_with_their_own_photo():
    torch.manual_seed(0)
    net, head = VitBert(tiny_config()).eval(), ITMHead(32)
    batch = colour_batch()
    batch["content_mask"] = torch.ones_like(batch["attention_mask"])
    caption = batch["labels"].where(batch["labels"] != IGNORE_INDEX, batch["input_ids"])
    swapped = caption[:, [0, 2, 1, 3]]  # the two words exchanged
    has = torch.arange(len(caption)) % 2 == 0  # every other caption allows a swap

    def swaps(ids, content):
        return swapped.where(has[:, None], ids), has

    tower = net.tower_tokens(batch["images"])
    plain, _ = itm_loss(net, head, batch, tower)
    with_swaps, _ = itm_loss(net, head, batch, tower, swaps)
    hidden, _ = net.encode(swapped[has], batch["attention_mask"][has],
                           net.photos(batch["images"][has]))
    swap_losses = torch.nn.functional.binary_cross_entropy_with_logits(
        head(hidden[:, 0]), torch.zeros(int(has.sum())), reduction="sum")
    pairs = 2 * len(caption)  # with its photo and with another image's
    expected = (plain * pairs + swap_losses) / (pairs + has.sum())
    assert with_swaps.item() == pytest.approx(expected.item(), rel=1e-5)


def test_the_head_learns_a_learnable_match():
    """Trained until it tells every pair apart with a margin (loss under 0.3 against 0.69 for
    a coin toss), within a step budget several times what any machine has needed: the loss
    after a fixed number of steps differs from one CPU's arithmetic to another's."""
    torch.manual_seed(0)
    net, head = VitBert(tiny_config()), ITMHead(32)
    batch = colour_batch()
    optimizer = torch.optim.AdamW([*net.parameters(), *head.parameters()], lr=5e-4)
    losses = []
    for _ in range(600):
        loss, accuracy = itm_loss(net, head, batch, tower_output(net, batch))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if loss.item() < 0.3 and accuracy == 1.0:
            break
    assert losses[0] == pytest.approx(0.693, abs=0.05)  # a coin toss at the start
    assert losses[-1] < 0.3 and accuracy == 1.0, losses[::20]


def test_without_itm_the_training_loss_is_the_mlm_loss_bit_for_bit():
    """MaskedLM and CaptionWriting(0.5): the step's loss is the one its draw chose, computed
    here apart, and it draws no more random numbers than that choice and the re-masking."""
    torch.manual_seed(0)
    module = MaskedLMModule(net=tiny_config(), vocab_size=30,
                            objectives=[MaskedLM(), CaptionWriting(probability=0.5)])
    net = module.net
    batch = colour_batch()
    drawn = set()
    for seed in range(4):  # with the generation objective drawn or not
        torch.manual_seed(seed)
        writes = bool(torch.rand(()) < 0.5)
        tower = net.tower_tokens(batch["images"])
        if writes:
            expected = masked_lm_loss(net, seq2seq_batch(batch, MASK), tower, mode="seq2seq")
        else:
            expected = masked_lm_loss(net, batch, tower)
        after_expected = torch.get_rng_state()
        torch.manual_seed(seed)
        loss, parts = training_step(module, batch, MASK)
        assert torch.equal(loss, expected)
        assert list(parts) == (["train/generation_loss"] if writes else ["train/loss"])
        assert torch.equal(torch.get_rng_state(), after_expected), "no extra random numbers"
        drawn.add(writes)
    assert drawn == {False, True}, "both objectives met: the test means something"


def test_without_itm_no_head_is_built_and_nothing_drawn():
    config = tiny_config()
    torch.manual_seed(0)
    module = MaskedLMModule(net=config, vocab_size=30)
    after_module = torch.get_rng_state()
    torch.manual_seed(0)
    net = VitBert(config)
    assert "itm_head" not in module.heads and not hasattr(module, "itm_head")
    assert torch.equal(torch.get_rng_state(), after_module)
    for key, value in net.state_dict().items():
        assert torch.equal(module.net.state_dict()[key], value), key


def reference_itm_loss(net, head, batch):
    """The matching loss from pixels, a copy of each pair's photo through the tower."""
    caption = batch["labels"].where(batch["labels"] != IGNORE_INDEX, batch["input_ids"])
    text, photo, matched = itm_pairs(batch["image_id"])
    pixels = batch["images"][caption_photos(batch)[photo]]  # (pairs, 3, S, S)
    hidden, _ = net.encode(caption[text], batch["attention_mask"][text], net.photos(pixels))
    return torch.nn.functional.binary_cross_entropy_with_logits(head(hidden[:, 0]), matched)


@pytest.mark.parametrize("each_photo_once", [False, True])
def test_the_image_tower_runs_once_per_step_and_gives_the_same_loss(each_photo_once):
    torch.manual_seed(0)
    module = MaskedLMModule(net=tiny_config(), vocab_size=30,
                            objectives=[MaskedLM(), ImageTextMatching(weight=0.5)]).eval()
    net, head = module.net, module.itm_head  # eval: no dropout, comparable
    batch = colour_batch(each_photo_once=each_photo_once)
    sizes = []
    net.image_tower.register_forward_hook(lambda _, args, out: sizes.append(len(args[0])))
    loss, parts = training_step(module, batch, MASK)
    assert sizes == [len(batch["images"])], "the pairs reuse the tower's output"
    assert set(parts) == {"train/loss", "train/itm_loss"}
    torch.testing.assert_close(loss, parts["train/loss"] + 0.5 * parts["train/itm_loss"])
    # The same numbers as from pixels, where the tower runs again for the pairs.
    torch.testing.assert_close(parts["train/itm_loss"], reference_itm_loss(net, head, batch))
    reference = F.cross_entropy(
        net(batch["input_ids"], batch["attention_mask"],
            net.photos(batch["images"][caption_photos(batch)]))[batch["labels"] != IGNORE_INDEX],
        batch["labels"][batch["labels"] != IGNORE_INDEX])
    torch.testing.assert_close(parts["train/loss"], reference)
    # A frozen tower's cache in place of the pixels: the same figures, no tower pass.
    with torch.no_grad():
        cached = {**{k: v for k, v in batch.items() if k != "images"},
                  FEATURES_KEY: net.tower_tokens(batch["images"])}
    sizes.clear()
    torch.testing.assert_close(training_step(module, cached, MASK)[1], parts)
    assert sizes == []
    if each_photo_once:  # the same figures as with one copy of the photo per caption
        copies = colour_batch()
        torch.testing.assert_close(itm_loss(net, head, copies, tower_output(net, copies)),
                                   itm_loss(net, head, batch, tower_output(net, batch)))


def test_a_checkpoint_trained_without_the_head_loads_strictly():
    config = tiny_config()
    without = MaskedLMModule(net=config, vocab_size=30)
    with_itm = MaskedLMModule(net=config, vocab_size=30,
                              objectives=[MaskedLM(), ImageTextMatching()])
    fresh = {k: v.clone() for k, v in with_itm.itm_head.state_dict().items()}
    with_itm.load_state_dict(without.state_dict(), strict=True)
    for key, value in without.net.state_dict().items():
        assert torch.equal(with_itm.net.state_dict()[key], value), key
    for key, value in fresh.items():  # the head keeps its fresh weights
        assert torch.equal(with_itm.itm_head.state_dict()[key], value), key
    # And a checkpoint that has the head loads it.
    other = MaskedLMModule(net=config, vocab_size=30, objectives=[MaskedLM(), ImageTextMatching()])
    other.load_state_dict(with_itm.state_dict(), strict=True)
    assert torch.equal(other.itm_head.pooler.weight, with_itm.itm_head.pooler.weight)


def test_the_optimizer_trains_the_head_too():
    net, head = VitBert(tiny_config()), ITMHead(32)
    groups = parameter_groups(net, OptimizerConfig(), heads=head)
    trained = [id(p) for g in groups for p in g["params"]]
    expected = {id(p) for p in [*net.parameters(), *head.parameters()]}
    assert len(trained) == len(set(trained)) and set(trained) == expected
    decayed = {id(p) for g in groups if g["weight_decay"] > 0 for p in g["params"]}
    assert id(head.pooler.weight) in decayed and id(head.pooler.bias) not in decayed
    names = {n for g in parameter_groups(net, OptimizerConfig()) for n in g["names"]}
    assert names == {n for n, _ in net.named_parameters()}, "without heads, as before"
