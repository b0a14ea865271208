"""Focused masking: a copy of each caption with one hard content piece hidden and the rest in
view, drawn by the running loss it keeps per piece, trained beside the random masks
(vitbert.lit.focus)."""

import math
from types import SimpleNamespace

import pytest
import torch
from vitbert.lit.focus import PieceDifficulty
from vitbert.lit.loss import masked_lm_loss

from vitbert.lit.module import MaskedLMModule
from vitbert.lit.objectives import IGNORE_INDEX, training_loss
from vitbert.models import ImageTowerConfig, TextTowerConfig, VitBertConfig

MASK, V = 4, 40


def mlm_batch():
    """Three captions [CLS] w… [SEP] [PAD]…: content pieces at 2-4 of the first two, none in the
    third; one random target already drawn in each (position 1, a function word)."""
    caption = torch.tensor([[2, 10, 11, 12, 13, 3, 0],
                            [2, 14, 15, 16, 17, 18, 3],
                            [2, 19, 20, 3, 0, 0, 0]])
    attention_mask = caption != 0
    content_mask = torch.zeros_like(attention_mask)
    content_mask[:2, 2:5] = True
    labels = torch.full_like(caption, IGNORE_INDEX)
    labels[:, 1] = caption[:, 1]
    return {"input_ids": caption.masked_fill(labels != IGNORE_INDEX, MASK),
            "attention_mask": attention_mask, "labels": labels, "content_mask": content_mask,
            "images": torch.zeros(3, 3, 8, 8)}, caption


def test_the_running_loss_is_a_moving_mean_of_each_piece_and_starts_at_a_uniform_guess():
    difficulty = PieceDifficulty(V, momentum=0.75)
    assert torch.allclose(difficulty.loss, torch.full((V,), math.log(V)))
    difficulty.update(torch.tensor([5, 7, 5]), torch.tensor([1.0, 2.0, 3.0]))
    expected = torch.full((V,), math.log(V))
    expected[5] = 0.75 * math.log(V) + 0.25 * 2.0  # piece 5 twice: its batch mean, 2.0
    expected[7] = 0.75 * math.log(V) + 0.25 * 2.0
    torch.testing.assert_close(difficulty.loss, expected)


def test_a_focused_caption_hides_one_content_piece_and_shows_the_rest():
    batch, caption = mlm_batch()
    difficulty = PieceDifficulty(V)
    for seed in range(20):
        out = difficulty.focus(batch, MASK, torch.Generator().manual_seed(seed))
        targets = out["labels"] != IGNORE_INDEX
        for b in range(2):  # the captions with content pieces: one target, a content piece
            (position,) = targets[b].nonzero()[:, 0].tolist()
            assert batch["content_mask"][b, position]
            assert out["labels"][b, position] == caption[b, position]
            assert out["input_ids"][b, position] == MASK
            shown = torch.arange(7) != position
            assert (out["input_ids"][b, shown] == caption[b, shown]).all(), "the rest in view"
        # No content piece: no target in the copy, the whole caption shown.
        assert not targets[2].any() and (out["input_ids"][2] == caption[2]).all()
        assert out["images"] is batch["images"]


def test_without_a_focus_weight_the_loss_is_the_random_masks_and_nothing_is_drawn(tiny_module):
    """Before focus_start (weight 0) the batch's random targets are the loss, their losses update
    the running difficulty, and no random number is drawn."""
    batch, caption = mlm_batch()
    batch = photographed(batch)
    tiny_module.eval()  # no dropout: the same loss twice
    expected = masked_lm_loss(tiny_module.net, batch)
    before = tiny_module.difficulty.loss.clone()
    state = torch.get_rng_state()
    loss, parts = training_loss(tiny_module.net, batch, 0.0, MASK,
                                difficulty=tiny_module.difficulty, focus_weight=0.0)
    assert torch.equal(torch.get_rng_state(), state), "no random number drawn"
    torch.testing.assert_close(loss, expected)
    assert "train/focus_loss" not in parts
    changed = set((tiny_module.difficulty.loss != before).nonzero()[:, 0].tolist())
    assert changed == set(caption[:, 1].tolist())  # the three random targets' pieces


def test_the_draw_follows_the_running_loss():
    """Weights 3 : 1 : 0 over the first caption's three content pieces."""
    batch, caption = mlm_batch()
    difficulty = PieceDifficulty(V)
    difficulty.loss[caption[0, 2:5]] = torch.tensor([3.0, 1.0, 0.0])
    drawn = torch.zeros(7)
    generator = torch.Generator().manual_seed(0)
    for _ in range(2000):
        drawn += (difficulty.focus(batch, MASK, generator)["labels"][0] != IGNORE_INDEX)
    assert drawn[4] == 0, "a solved piece (running loss 0) is not drawn"
    assert 0.70 < drawn[2] / 2000 < 0.80


def focusing_module(places_and_sharing: bool = False, **settings) -> MaskedLMModule:
    """A tiny model that focuses every caption; ``places_and_sharing``: with the tower's places,
    the neighbour lookup and read sharing (the relation lever)."""
    image = ImageTowerConfig(image_size=8, patch_size=4, dim=16, depth=1, num_heads=2,
                             **(dict(kind="conv_stem", chroma_dim=4, chroma_place=True)
                                if places_and_sharing else {}))
    text = TextTowerConfig(dim=16, depth=1, num_heads=2, max_len=8)
    net = VitBertConfig(image=image, text=text, vocab_size=V,
                        **(dict(neighbour_lookup_heads=2, lookup_share_window=2)
                           if places_and_sharing else {}))
    return MaskedLMModule(net, **{"focus_weight": 1.0, **settings})


def photographed(batch: dict) -> dict:
    """``batch`` with a random photo per caption, as the training step sees it."""
    return {**batch, "images": torch.randint(0, 256, (3, 3, 8, 8), dtype=torch.uint8),
            "image_index": torch.arange(3)}


@pytest.fixture
def tiny_module():
    return focusing_module()


def test_the_focused_copy_is_trained_beside_the_random_masks(tiny_module):
    """loss = the random targets' mean + focus_weight × the focused copy's mean, and the running
    difficulty learns from both: the three random targets (a function word each) and one content
    piece of each of the first two captions."""
    batch, caption = mlm_batch()
    batch = photographed(batch)
    tiny_module.eval()  # no dropout: the same losses twice
    difficulty = tiny_module.difficulty
    before = difficulty.loss.clone()
    torch.manual_seed(3)
    focused = difficulty.focus(batch, MASK)
    expected = (masked_lm_loss(tiny_module.net, batch)
                + 2.5 * masked_lm_loss(tiny_module.net, focused))
    torch.manual_seed(3)
    loss, parts = training_loss(tiny_module.net, batch, 0.0, MASK, difficulty=difficulty,
                                focus_weight=2.5)
    torch.testing.assert_close(loss, expected)
    torch.testing.assert_close(loss, parts["train/loss"] + 2.5 * parts["train/focus_loss"])
    changed = set((difficulty.loss != before).nonzero()[:, 0].tolist())
    drawn = set(caption[focused["labels"] != IGNORE_INDEX].tolist())
    assert len(drawn) == 2 and drawn <= set(caption[:2, 2:5].flatten().tolist())
    assert changed == set(caption[:, 1].tolist()) | drawn


def test_a_fraction_of_the_batch_is_focused_and_its_photos_stay_whole(tiny_module):
    """focus_fraction 0.5 of three captions: the first two (⌈1.5⌉) get a focused copy, each still
    pointing at its own photo and twin; at 0.3 the first alone, and the loss is the random
    targets' mean over all three + the weight × that one copy's loss."""
    batch = photographed(mlm_batch()[0])
    batch["image_index"] = torch.tensor([2, 0, 1])  # caption b sees photo image_index[b]
    batch["twin_images"], batch["twin_index"] = torch.zeros(1, 3, 8, 8), torch.tensor([-1, 0, -1])
    generator = torch.Generator().manual_seed(0)
    focused = tiny_module.difficulty.focus(batch, MASK, generator, fraction=0.5)
    assert focused["input_ids"].shape == (2, 7)
    torch.testing.assert_close(focused["image_index"], torch.tensor([2, 0]))
    torch.testing.assert_close(focused["twin_index"], torch.tensor([-1, 0]))
    assert focused["images"] is batch["images"] and focused["twin_images"] is batch["twin_images"]
    torch.testing.assert_close(focused["labels"] != IGNORE_INDEX,
                               (focused["input_ids"] == MASK) & batch["content_mask"][:2])

    tiny_module.eval()  # no dropout: the same losses twice
    torch.manual_seed(3)
    first = tiny_module.difficulty.focus(batch, MASK, fraction=0.3)
    assert len(first["input_ids"]) == 1
    expected = masked_lm_loss(tiny_module.net, batch) + 2.0 * masked_lm_loss(tiny_module.net, first)
    torch.manual_seed(3)
    loss, _ = training_loss(tiny_module.net, batch, 0.0, MASK, difficulty=tiny_module.difficulty,
                            focus_weight=2.0, focus_fraction=0.3)
    torch.testing.assert_close(loss, expected)
    with pytest.raises(ValueError, match=r"focus_fraction=0\.0 is the share"):
        focusing_module(focus_fraction=0.0)


def test_the_running_loss_is_saved_with_the_module_and_loads_back(tiny_module):
    tiny_module.difficulty.loss[7] = 0.5
    state = tiny_module.state_dict()
    assert "difficulty.loss" in state
    other = focusing_module()
    other.load_state_dict(state)
    assert other.difficulty.loss[7] == 0.5


def test_focus_weight_is_a_weight():
    with pytest.raises(ValueError, match=r"focus_weight=-1\.0 weighs a loss"):
        MaskedLMModule(focus_weight=-1.0)
    assert MaskedLMModule().difficulty is None  # off by default: random masking alone


def test_captions_are_focused_from_focus_start_on(tiny_module):
    """A fraction of the run's steps: before it the running losses are measured, not used."""
    tiny_module.hparams.focus_start = 0.5
    tiny_module._trainer = SimpleNamespace(estimated_stepping_batches=10, global_step=4)
    assert not tiny_module.focusing
    tiny_module._trainer.global_step = 5
    assert tiny_module.focusing
    with pytest.raises(ValueError, match=r"focus_start=1\.0 is a fraction"):
        MaskedLMModule(focus_weight=1.0, focus_start=1.0)


def test_the_twin_contrast_reads_the_random_mask_not_the_focused_one(tiny_module, monkeypatch):
    """Focusing seldom hides an exchanged word once it is learnt; the contrast keeps the batch's
    own targets."""
    import vitbert.lit.objectives as objectives

    seen = {}

    def contrast(net, batch):
        seen.update(batch)
        return torch.zeros(())

    monkeypatch.setattr(objectives, "twin_contrast_loss", contrast)
    batch = photographed(mlm_batch()[0])
    training_loss(tiny_module.net, batch, 0.0, MASK, twin_weight=1.0,
                  difficulty=tiny_module.difficulty, focus_weight=1.0)
    assert torch.equal(seen["labels"], batch["labels"])
    assert torch.equal(seen["input_ids"], batch["input_ids"])


def test_the_read_sharing_waits_for_the_focus():
    """Held at its zero start until focus_start (a zero gradient: AdamW then moves nothing),
    trained from then on."""
    module = focusing_module(places_and_sharing=True, focus_start=0.5)
    module._trainer = SimpleNamespace(estimated_stepping_batches=10, global_step=0)
    optimizer = torch.optim.AdamW(module.parameters(), lr=0.1, weight_decay=0.1)
    batch = photographed(mlm_batch()[0])
    weight = module.net.read_sharing.mix.weight
    for step, moves in ((0, False), (4, False), (5, True)):
        module._trainer.global_step = step
        optimizer.zero_grad()
        with torch.no_grad():  # a lookup that reads something, so the sharing has a gradient
            module.net.lookup.out.weight.normal_()
        loss, _ = training_loss(module.net, batch, 0.0, MASK, difficulty=module.difficulty,
                                focus_weight=1.0)
        loss.backward()
        assert weight.grad.abs().sum() > 0
        module.on_before_optimizer_step(optimizer)
        optimizer.step()
        assert (weight.abs().sum() > 0) == moves, step
