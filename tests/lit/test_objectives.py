"""The objectives list: the seq2seq batch hides caption pieces at a per-caption rate, never the
prompt or padding; the module runs the tower once per step and sums weight × loss of the listed
objectives; a claimed batch is written, not filled; the list is saved as plain values."""

import io

import pytest
import torch
import torch.nn.functional as F
from colours import colour_batch, tiny_config
from steps import training_step

from vitbert.data.features import IMAGE_INDEX
from vitbert.lit.contrastive import Contrastive
from vitbert.lit.module import MaskedLMModule
from vitbert.lit.objectives import (
    IGNORE_INDEX,
    CaptionWriting,
    MaskedLM,
    TrainingStep,
    WordDetection,
    masked_lm_loss,
    seq2seq_batch,
)

MASK = 4


def mlm_batch():
    """Four captions [CLS] w… [SEP] [PAD]…, with a BERT-style target already drawn in each."""
    lengths = [12, 9, 3, 12]
    input_ids = torch.zeros(4, 12, dtype=torch.long)
    attention_mask = torch.zeros(4, 12, dtype=torch.bool)
    for b, n in enumerate(lengths):
        input_ids[b, :n] = torch.arange(10, 10 + n) + 20 * b
        input_ids[b, 0], input_ids[b, n - 1] = 2, 3
        attention_mask[b, :n] = True
    caption = input_ids.clone()
    labels = torch.full_like(input_ids, IGNORE_INDEX)
    labels[:, 1] = input_ids[:, 1]
    input_ids[:, 1] = MASK
    return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels,
            "images": torch.zeros(4, 3, 8, 8)}, caption


def test_targets_are_caption_pieces_and_inputs_are_masks():
    batch, caption = mlm_batch()
    rates = []
    for seed in range(50):
        out = seq2seq_batch(batch, MASK, torch.Generator().manual_seed(seed))
        hidden = out["labels"] != IGNORE_INDEX
        assert not hidden[:, 0].any(), "[CLS] is the prompt, never a target"
        assert not (hidden & ~batch["attention_mask"]).any(), "padding is never a target"
        assert hidden.sum(dim=1).min() >= 1, "every caption has a target"
        assert (out["labels"][hidden] == caption[hidden]).all()
        assert (out["input_ids"][hidden] == MASK).all()
        assert (out["input_ids"][~hidden] == caption[~hidden]).all(), "the MLM mask is undone"
        assert out["images"] is batch["images"]
        rates.append(hidden[0].sum().item() / 11)
        if hidden[0, 11]:
            assert out["labels"][0, 11] == 3  # [SEP] can be a target: the model learns to stop
    # A rate per caption, uniform in (0, 1]: some captions nearly whole, some nearly all hidden.
    assert min(rates) < 0.25 and max(rates) > 0.75


# ----------------------------------------------------------------------------- the module's list


def content_batch() -> dict[str, torch.Tensor]:
    """colour_batch (colours.py) with its colour word marked content: photo p's captions use word
    10 + p and no other content word."""
    batch = colour_batch(captions_per_photo=2, each_photo_once=True)
    content = torch.zeros_like(batch["attention_mask"])
    content[:, 2] = True
    return batch | {"content_mask": content}


def module_of(*objectives, **net) -> MaskedLMModule:
    config = tiny_config()
    for key, value in net.items():
        setattr(config, key, value)
    return MaskedLMModule(net=config, vocab_size=30, objectives=list(objectives)).eval()


def test_the_step_runs_the_tower_once_and_sums_each_weight_times_its_loss():
    """Two objectives whose losses are written out here by hand: the step's loss is
    0.7 · (masked-word cross-entropy) + 2.5 · (word-detection cross-entropy)."""
    torch.manual_seed(0)
    module = module_of(MaskedLM(weight=0.7), WordDetection(weight=2.5))
    net, head = module.net, module.word_head
    batch = content_batch()
    sizes = []
    net.image_tower.register_forward_hook(lambda _, args, out: sizes.append(len(args[0])))
    loss, parts = training_step(module, batch, MASK)
    assert sizes == [4], "one tower pass over the batch's 4 photos, whatever the objectives"
    with torch.no_grad():
        # Masked words: each caption with its own copy of its photo, log-softmax at the targets.
        photos = net.image_features(batch["images"][batch[IMAGE_INDEX]])
        logits = net(batch["input_ids"], batch["attention_mask"], photos)  # (B, T, V)
        targets = (batch["labels"] != IGNORE_INDEX).nonzero().tolist()
        mlm = -sum(logits[b, t].log_softmax(-1)[batch["labels"][b, t]] for b, t in targets)
        mlm = mlm / len(targets)
        # Word detection: photo p's captions name word 10 + p only, so its target is one-hot.
        words = head(net.image_features(batch["images"])).log_softmax(-1)  # (P, V)
        detection = -sum(words[p, 10 + p] for p in range(4)) / 4
    assert set(parts) == {"train/loss", "train/word_loss"}
    assert parts["train/loss"].item() == pytest.approx(mlm.item(), rel=1e-5)
    assert parts["train/word_loss"].item() == pytest.approx(detection.item(), rel=1e-5)
    assert loss.item() == pytest.approx(0.7 * mlm.item() + 2.5 * detection.item(), rel=1e-5)


def test_a_claimed_batch_is_skipped_by_masked_lm_and_trained_to_write():
    """CaptionWriting(probability=1) claims every batch: MaskedLM gives no loss, and the loss is
    the seq2seq one on the re-masked batch (a word sees only the words to its left)."""
    writing = CaptionWriting(probability=1.0, weight=0.5)
    module = module_of(MaskedLM(), writing)
    net = module.net
    torch.manual_seed(0)
    with torch.no_grad():  # large random weights: what a word sees shows in its logits
        for param in net.parameters():
            if param.ndim > 1:
                param.normal_(0.0, 0.3)
    batch = content_batch()
    torch.manual_seed(3)
    loss, parts = training_step(module, batch, MASK)
    assert list(parts) == ["train/generation_loss"]
    torch.manual_seed(3)
    torch.rand(())  # the claim's draw
    remasked = seq2seq_batch(batch, MASK)  # the same re-masking as the step's
    tower = net.image_features(batch["images"])
    with torch.no_grad():
        photos = net.image_features(batch["images"][batch[IMAGE_INDEX]])
        targets = remasked["labels"] != IGNORE_INDEX
        logits = net(remasked["input_ids"], remasked["attention_mask"], photos,
                     mode="seq2seq")[targets]
        expected = F.cross_entropy(logits, remasked["labels"][targets])
        bidirectional = masked_lm_loss(net, remasked, tower)
    assert parts["train/generation_loss"].item() == pytest.approx(expected.item(), rel=1e-5)
    assert abs(bidirectional.item() - expected.item()) > 1e-4, "the mask mode matters"
    assert loss.item() == pytest.approx(0.5 * expected.item(), rel=1e-5)
    # The objectives themselves: MaskedLM leaves a claimed batch, CaptionWriting an unclaimed.
    claimed = TrainingStep(batch, tower, MASK, claimed_by=writing)
    assert MaskedLM()(net, claimed) is None
    assert writing(net, TrainingStep(batch, tower, MASK)) is None


def test_caption_writing_at_zero_draws_no_random_number():
    writing = CaptionWriting(probability=0.0)
    state = torch.get_rng_state()
    assert not any(writing.claims_batch() for _ in range(5))
    assert torch.equal(torch.get_rng_state(), state)
    # Nor does a whole step with it (MaskedLM draws nothing; eval: no dropout).
    module = module_of(MaskedLM(), writing)
    state = torch.get_rng_state()
    _, parts = training_step(module, content_batch(), MASK)
    assert list(parts) == ["train/loss"] and not module.writes_captions
    assert torch.equal(torch.get_rng_state(), state)
    assert module_of(MaskedLM(), CaptionWriting(probability=0.3)).writes_captions
    with pytest.raises(ValueError, match=r"probability 1.5 .* \[0, 1\]"):
        CaptionWriting(probability=1.5)
    with pytest.raises(ValueError, match="weight -1"):
        MaskedLM(weight=-1)


def test_an_objective_listed_twice_is_refused():
    listed = r"lists one objective twice \(MaskedLM, WordDetection, MaskedLM\)"
    with pytest.raises(ValueError, match=listed):
        module_of(MaskedLM(), WordDetection(), MaskedLM(weight=2.0))


def test_the_plain_model_is_masked_lm_alone():
    module = MaskedLMModule()
    assert [type(o) for o in module.objectives] == [MaskedLM]
    assert module.objectives[0].weight == 1.0 and module.heads == {}
    assert module.hparams.objectives == [
        {"class_path": "vitbert.lit.objectives.MaskedLM", "init_args": {"weight": 1.0}}]
    assert not module.writes_captions and module.net.itc is None


def _plain(value) -> bool:
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_plain(v) for v in value)
    return value is None or isinstance(value, str | int | float | bool)


def test_the_saved_objectives_are_plain_and_rebuild_the_same_list():
    """hparams["objectives"]: each ``{"class_path", "init_args"}`` of plain values (a checkpoint
    loads with weights_only=True); a module built from the hparams, as a checkpoint load builds
    it, has the same objectives, in order, with the same settings."""
    module = module_of(MaskedLM(weight=0.5), CaptionWriting(probability=0.2, weight=2.0),
                       WordDetection(weight=3.0), Contrastive(weight=0.1), itc_dim=8)
    saved = module.hparams["objectives"]
    assert _plain(saved) and all(set(o) == {"class_path", "init_args"} for o in saved)
    assert saved[1] == {"class_path": "vitbert.lit.objectives.CaptionWriting",
                        "init_args": {"probability": 0.2, "weight": 2.0}}
    buffer = io.BytesIO()
    torch.save(dict(module.hparams), buffer)
    buffer.seek(0)
    hparams = torch.load(buffer, weights_only=True)
    rebuilt = MaskedLMModule(**hparams)
    assert [type(o) for o in rebuilt.objectives] == [type(o) for o in module.objectives]
    assert [o.settings() for o in rebuilt.objectives] == [o.settings() for o in
                                                          module.objectives]
    assert rebuilt.hparams["objectives"] == saved
    assert rebuilt.heads.keys() == module.heads.keys() == {"word_head"}
    rebuilt.load_state_dict(module.state_dict(), strict=True)  # the same weights, heads included


def test_contrastive_refuses_a_net_without_its_heads_in_one_line():
    with pytest.raises(ValueError) as refused:
        module_of(MaskedLM(), Contrastive())
    message = str(refused.value)
    assert "\n" not in message and "--model.net.itc_dim" in message


def test_the_loss_is_the_drawn_objectives_bit_for_bit():
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
        tower = net.image_features(batch["images"])
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
