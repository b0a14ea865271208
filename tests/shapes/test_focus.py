"""Focused masking: a copy of each caption with one hard content piece hidden and the rest in
view, drawn by the running loss it keeps per piece, trained beside the random masks
(vitbert.shapes.focus: the FocusedMaskedLM objective and its PieceDifficulty)."""

import math
from types import SimpleNamespace

import pytest
import torch

import vitbert.shapes.twins as twins
from vitbert.lit.module import MaskedLMModule
from vitbert.lit.objectives import IGNORE_INDEX, TrainingStep, masked_lm_loss, tower_output
from vitbert.models import ImageTowerConfig, TextTowerConfig, VitBertConfig
from vitbert.shapes import BindingLevers, FocusedMaskedLM, TwinContrast
from vitbert.shapes.focus import PieceDifficulty

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


def tiny_net(places_and_sharing: bool = False) -> VitBertConfig:
    """A tiny model; ``places_and_sharing``: with the tower's places, the neighbour lookup and
    read sharing (the relation lever, BindingLevers)."""
    image = ImageTowerConfig(image_size=8, patch_size=4, dim=16, depth=1, num_heads=2,
                             **(dict(kind="conv_stem") if places_and_sharing else {}))
    text = TextTowerConfig(dim=16, depth=1, num_heads=2, max_len=8)
    levers = (BindingLevers(hue_dim=4, places=True, lookup_heads=2, share_window=2,
                            lookup_place=False) if places_and_sharing else None)
    return VitBertConfig(image=image, text=text, vocab_size=V, extension=levers)


def focusing_module(places_and_sharing: bool = False, **settings) -> MaskedLMModule:
    """:func:`tiny_net` trained by FocusedMaskedLM alone (``settings`` its arguments; it focuses
    every caption from the first step unless told otherwise)."""
    objective = FocusedMaskedLM(**{"focus_weight": 1.0, "start": 0.0, **settings})
    return MaskedLMModule(tiny_net(places_and_sharing), objectives=[objective])


def photographed(batch: dict) -> dict:
    """``batch`` with a random photo per caption, as the training step sees it."""
    return {**batch, "images": torch.randint(0, 256, (3, 3, 8, 8), dtype=torch.uint8),
            "image_index": torch.arange(3)}


def training_step(module: MaskedLMModule, batch: dict, step: int = 0, total_steps: int = 1
                  ) -> tuple[torch.Tensor, TrainingStep]:
    """The module's one objective on ``batch`` at optimiser step ``step`` of ``total_steps``, as
    the training step calls it: its loss (unweighted) and the step (``logged``)."""
    (objective,) = module.objectives
    training = TrainingStep(batch, tower_output(module.net, batch), MASK, step=step,
                            total_steps=total_steps)
    return objective(module.net, training), training


@pytest.fixture
def tiny_module():
    return focusing_module()


def test_before_the_start_the_loss_is_the_random_masks_and_nothing_is_drawn():
    """Before ``start`` the batch's random targets are the loss, their losses update the running
    difficulty, and no random number is drawn; a focus_weight of 0 never focuses."""
    batch, caption = mlm_batch()
    batch = photographed(batch)
    module = focusing_module(start=0.5).eval()  # no dropout: the same loss twice
    expected = masked_lm_loss(module.net, batch, tower_output(module.net, batch))
    before = module.difficulty.loss.clone()
    state = torch.get_rng_state()
    loss, step = training_step(module, batch, step=4, total_steps=10)
    assert torch.equal(torch.get_rng_state(), state), "no random number drawn"
    torch.testing.assert_close(loss, expected)
    assert "train/focus_loss" not in step.logged
    changed = set((module.difficulty.loss != before).nonzero()[:, 0].tolist())
    assert changed == set(caption[:, 1].tolist())  # the three random targets' pieces
    unweighted = FocusedMaskedLM(focus_weight=0.0, start=0.0)
    assert not any(unweighted.focusing(step, 10) for step in range(10))


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


def test_the_focused_copy_is_trained_beside_the_random_masks():
    """loss = the random targets' mean + focus_weight × the focused copy's mean, and the running
    difficulty learns from both: the three random targets (a function word each) and one content
    piece of each of the first two captions."""
    batch, caption = mlm_batch()
    batch = photographed(batch)
    module = focusing_module(focus_weight=2.5).eval()  # no dropout: the same losses twice
    difficulty = module.difficulty
    tower = tower_output(module.net, batch)
    before = difficulty.loss.clone()
    torch.manual_seed(3)
    focused = difficulty.focus(batch, MASK)
    expected = (masked_lm_loss(module.net, batch, tower)
                + 2.5 * masked_lm_loss(module.net, focused, tower))
    torch.manual_seed(3)
    loss, step = training_step(module, batch)
    torch.testing.assert_close(loss, expected)
    torch.testing.assert_close(loss, step.logged["train/loss"]
                               + 2.5 * step.logged["train/focus_loss"])
    changed = set((difficulty.loss != before).nonzero()[:, 0].tolist())
    drawn = set(caption[focused["labels"] != IGNORE_INDEX].tolist())
    assert len(drawn) == 2 and drawn <= set(caption[:2, 2:5].flatten().tolist())
    assert changed == set(caption[:, 1].tolist()) | drawn


def test_a_fraction_of_the_batch_is_focused_and_its_photos_stay_whole(tiny_module):
    """fraction 0.5 of three captions: the first two (⌈1.5⌉) get a focused copy, each still
    pointing at its own photo; at 0.3 the first alone, and the loss is the random targets' mean
    over all three + the weight × that one copy's loss. The batch's twins stay out of the copy
    (the twin contrast reads the random masks), so a twin batch is focused as one without."""
    batch = photographed(mlm_batch()[0])
    batch["image_index"] = torch.tensor([2, 0, 1])  # caption b sees photo image_index[b]
    generator = torch.Generator().manual_seed(0)
    focused = tiny_module.difficulty.focus(batch, MASK, generator, fraction=0.5)
    assert focused["input_ids"].shape == (2, 7)
    torch.testing.assert_close(focused["image_index"], torch.tensor([2, 0]))
    assert focused["images"] is batch["images"]
    torch.testing.assert_close(focused["labels"] != IGNORE_INDEX,
                               (focused["input_ids"] == MASK) & batch["content_mask"][:2])

    module = focusing_module(focus_weight=2.0, fraction=0.3).eval()  # the same losses twice
    tower = tower_output(module.net, batch)
    torch.manual_seed(3)
    first = module.difficulty.focus(batch, MASK, fraction=0.3)
    assert len(first["input_ids"]) == 1
    expected = (masked_lm_loss(module.net, batch, tower)
                + 2.0 * masked_lm_loss(module.net, first, tower))
    with_twins = {**batch, "twin_images": torch.zeros(1, 3, 8, 8),
                  "twin_index": torch.tensor([-1, 0, -1]),
                  "twin_mask": batch["content_mask"].clone()}
    torch.manual_seed(3)
    loss, _ = training_step(module, with_twins)
    torch.testing.assert_close(loss, expected)
    with pytest.raises(ValueError, match=r"fraction=0\.0 is the share"):
        FocusedMaskedLM(fraction=0.0)


def test_a_resumed_run_draws_what_the_uninterrupted_one_would(tiny_module):
    """The running loss is a buffer of the module (``difficulty.loss``): a checkpoint holds it, a
    module rebuilt from the checkpoint's hyperparameters loads it, and draws the same."""
    batch, caption = mlm_batch()
    tiny_module.difficulty.loss[caption[0, 2:5]] = torch.tensor([0.0, 0.0, 5.0])  # only 4
    tiny_module.difficulty.loss[caption[1, 2:5]] = torch.tensor([5.0, 0.0, 0.0])  # only 2
    state = tiny_module.state_dict()
    assert "difficulty.loss" in state
    resumed = MaskedLMModule(**tiny_module.hparams)  # as a checkpoint rebuilds the module
    fresh = resumed.difficulty.focus(batch, MASK, torch.Generator().manual_seed(0))
    resumed.load_state_dict(state)
    torch.testing.assert_close(resumed.difficulty.loss, tiny_module.difficulty.loss)
    for seed in range(5):
        drawn = resumed.difficulty.focus(batch, MASK, torch.Generator().manual_seed(seed))
        assert drawn["labels"][0, 4] == caption[0, 4] and drawn["labels"][1, 2] == caption[1, 2]
        uninterrupted = tiny_module.difficulty.focus(batch, MASK,
                                                     torch.Generator().manual_seed(seed))
        assert torch.equal(drawn["labels"], uninterrupted["labels"])
    # Without the buffer (every piece at ln V) the draw differs: the check above is the buffer's.
    assert not torch.equal(fresh["labels"], tiny_module.difficulty.focus(
        batch, MASK, torch.Generator().manual_seed(0))["labels"])


def test_focus_weight_is_a_weight():
    with pytest.raises(ValueError, match=r"focus_weight=-1\.0 weighs a loss"):
        FocusedMaskedLM(focus_weight=-1.0)
    plain = MaskedLMModule()  # off by default: random masking alone
    assert "difficulty" not in plain.heads and "difficulty.loss" not in plain.state_dict()


def test_captions_are_focused_from_start_on(tiny_module):
    """A fraction of the run's steps: before it the running losses are measured, not used."""
    objective = FocusedMaskedLM(start=0.5)
    assert not objective.focusing(4, 10) and objective.focusing(5, 10)
    module = focusing_module(start=0.5)
    batch = photographed(mlm_batch()[0])
    assert "train/focus_loss" not in training_step(module, batch, 4, 10)[1].logged
    assert "train/focus_loss" in training_step(module, batch, 5, 10)[1].logged
    with pytest.raises(ValueError, match=r"start=1\.0 is a fraction"):
        FocusedMaskedLM(focus_weight=1.0, start=1.0)


def test_the_twin_contrast_reads_the_random_mask_not_the_focused_one(monkeypatch):
    """Focusing seldom hides an exchanged word once it is learnt; the contrast keeps the batch's
    own targets (and its twins), in the module's training step, after the focused objective."""
    seen = {}

    def contrast(net, batch, tower):
        seen.update(batch)
        return torch.zeros(())

    monkeypatch.setattr(twins, "twin_contrast_loss", contrast)
    module = MaskedLMModule(tiny_net(places_and_sharing=True),
                            objectives=[FocusedMaskedLM(focus_weight=1.0, start=0.0),
                                        TwinContrast(weight=1.0)])
    module._trainer = SimpleNamespace(estimated_stepping_batches=10, global_step=5)
    module.tokenizer = SimpleNamespace(mask_token_id=MASK)
    logged = {}
    monkeypatch.setattr(module, "log_dict", lambda values, **_: logged.update(values))
    batch = photographed(mlm_batch()[0])
    batch["twin_images"], batch["twin_index"] = torch.zeros(1, 3, 8, 8), torch.tensor([-1, 0, -1])
    batch["twin_mask"] = batch["content_mask"].clone()
    module.training_step(batch, 0)
    assert "train/focus_loss" in logged and "train/twin_loss" in logged  # both ran
    assert torch.equal(seen["labels"], batch["labels"])
    assert torch.equal(seen["input_ids"], batch["input_ids"])
    assert seen["twin_index"] is batch["twin_index"]


def test_the_read_sharing_waits_for_the_focus():
    """Held at its zero start until ``start`` (a zero gradient: AdamW then moves nothing),
    trained from then on: FocusedMaskedLM.before_optimizer_step, called by the module."""
    module = focusing_module(places_and_sharing=True, start=0.5)
    module._trainer = SimpleNamespace(estimated_stepping_batches=10, global_step=0)
    optimizer = torch.optim.AdamW(module.parameters(), lr=0.1, weight_decay=0.1)
    batch = photographed(mlm_batch()[0])
    weight = module.net.reader.sharing.mix.weight
    for step, moves in ((0, False), (4, False), (5, True)):
        module._trainer.global_step = step
        optimizer.zero_grad()
        with torch.no_grad():  # a lookup that reads something, so the sharing has a gradient
            module.net.reader.lookup.out.weight.normal_()
        loss, _ = training_step(module, batch, step, total_steps=10)
        loss.backward()
        assert weight.grad.abs().sum() > 0
        module.on_before_optimizer_step(optimizer)
        optimizer.step()
        assert (weight.abs().sum() > 0) == moves, step
