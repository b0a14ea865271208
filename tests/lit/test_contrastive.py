"""The contrastive objective: the loss against a reference written out pair by pair, a photo's
own captions never its negatives, one tower pass, the heads the network's own (``itc_dim``), and
a model that learns to find the photo."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from colours import MASK, colour_batch, tiny_config
from steps import training_step

from vitbert.lit.contrastive import Contrastive, contrastive_loss, distinct_photos
from vitbert.lit.module import MaskedLMModule
from vitbert.lit.objectives import MaskedLM, TrainingStep, image_features, original_caption
from vitbert.models import VitBert


def reference_loss(texts, images, caption_image, temperature):
    """The loss written out pair by pair: for each caption b and its photo k, text → image is
    its photo against every other photo; image → text is the pair against the captions of the
    *other* photos only."""
    s = (texts @ images.T / temperature).tolist()  # (B, K)
    B, K = len(texts), len(images)
    t2i, i2t = [], []
    for b in range(B):
        k = int(caption_image[b])
        t2i.append(-s[b][k] + math.log(sum(math.exp(s[b][j]) for j in range(K))))
        negatives = [s[c][k] for c in range(B) if int(caption_image[c]) != k]
        i2t.append(-s[b][k] + math.log(math.exp(s[b][k]) + sum(math.exp(x) for x in negatives)))
    return (sum(t2i) / B + sum(i2t) / B) / 2


def random_units(n, dim=6):
    return F.normalize(torch.randn(n, dim, dtype=torch.float64), dim=-1)


def test_the_loss_matches_the_pair_by_pair_reference_with_repeated_photos():
    torch.manual_seed(0)
    caption_image = torch.tensor([0, 0, 1, 2, 2, 2, 1, 3])  # uneven, shuffled repeats
    texts, images = random_units(8), random_units(4)
    temperature = torch.tensor(0.2, dtype=torch.float64)
    loss = contrastive_loss(texts, images, caption_image, temperature)
    assert loss.item() == pytest.approx(reference_loss(texts, images, caption_image, 0.2),
                                        rel=1e-5)


def test_a_photos_other_captions_are_not_its_negatives():
    """The naive B × B loss (every caption against every caption's copy of a photo) counts a
    sibling caption's copy of the caption's own photo as a negative; this loss does not: a
    photo's captions moving towards each other (and it) cannot raise the loss."""
    caption_image = torch.tensor([0, 0, 1, 1])
    images = torch.eye(2, 4, dtype=torch.float64)
    texts = images[caption_image]  # every caption exactly on its photo
    temperature = torch.tensor(0.1, dtype=torch.float64)
    loss = contrastive_loss(texts, images, caption_image, temperature)
    # Perfect separation, tiny, not log 2 (a sibling as rival): text → image, the other photo;
    # image → text, the other photo's two captions.
    expected = (math.log1p(math.exp(-10)) + math.log1p(2 * math.exp(-10))) / 2
    assert loss.item() == pytest.approx(expected, rel=1e-2)  # fp32 (the loss casts)
    copies = images[caption_image]  # (B, E): a copy of the photo per caption, as B × B would
    naive = F.cross_entropy(texts @ copies.T / temperature, torch.arange(4))
    assert naive.item() > math.log(2) - 1e-6  # the naive loss calls the sibling a rival


def test_one_photo_in_the_batch_contrasts_nothing():
    texts = random_units(3).requires_grad_()
    loss = contrastive_loss(texts, random_units(1), torch.zeros(3, dtype=torch.long),
                            torch.tensor(0.07))
    loss.backward()
    assert loss.item() == 0.0 and torch.isfinite(texts.grad).all()


@pytest.mark.parametrize("each_photo_once", [False, True])
def test_distinct_photos_whether_carried_once_or_per_caption(each_photo_once):
    batch = colour_batch(captions_per_photo=3, each_photo_once=each_photo_once)
    rows, slot = distinct_photos(batch)
    assert len(rows) == 4
    shown = batch["images"][rows]  # (K, 3, S, S): photo k is the one of slot k's captions
    torch.testing.assert_close(shown[slot], batch["images"][batch.get("image_index",
                                                                      torch.arange(12))])


def test_the_same_loss_whether_photos_come_once_or_per_caption():
    torch.manual_seed(0)
    net = VitBert(_itc_config()).eval()
    losses = []
    for each_photo_once in (False, True):
        batch = colour_batch(each_photo_once=each_photo_once)
        losses.append(itc_loss(net, batch))
    torch.testing.assert_close(losses[0], losses[1])


def itc_loss(net, batch):
    """The contrastive objective's loss on ``batch``, its tower run once."""
    return Contrastive()(net, TrainingStep(batch, image_features(net, batch), MASK))


def _itc_config(dim: int = 16):
    config = tiny_config()
    config.itc_dim = dim
    return config


def test_the_step_adds_it_over_one_tower_pass_and_every_part_gets_a_gradient():
    torch.manual_seed(0)
    module = MaskedLMModule(net=_itc_config(), vocab_size=30,
                            objectives=[MaskedLM(), Contrastive(weight=0.5)])
    net = module.net
    batch = colour_batch(each_photo_once=True)
    sizes = []
    net.image_tower.register_forward_hook(lambda _, args, out: sizes.append(len(args[0])))
    loss, parts = training_step(module, batch, MASK)
    assert sizes == [4], "the contrastive loss reads the tower's output, no second pass"
    assert set(parts) == {"train/loss", "train/itc_loss"}
    torch.testing.assert_close(loss, parts["train/loss"] + 0.5 * parts["train/itc_loss"])
    # The loss itself, from the heads' vectors: the captions unmasked, the photos from pixels.
    texts = net.embed_texts(original_caption(batch), batch["attention_mask"])
    reference = reference_loss(texts.double(), net.embed_images(batch["images"]).double(),
                               batch["image_index"], net.itc.temperature.item())
    assert parts["train/itc_loss"].item() == pytest.approx(reference, rel=1e-4)
    parts["train/itc_loss"].backward()
    for name in ("itc.image_proj.weight", "itc.text_proj.weight", "itc.log_temperature",
                 "image_tower.patch_embed.proj.weight", "text.embeddings.word.weight"):
        grad = dict(net.named_parameters())[name].grad
        assert grad is not None and grad.abs().sum() > 0, name


def test_it_learns_to_find_the_photo_and_the_temperature_moves():
    """Trained until every caption ranks its photo first and every photo its captions first
    (chance: 1 in 4), within a step budget several times what any machine has needed."""
    torch.manual_seed(0)
    net = VitBert(_itc_config())
    batch = colour_batch(captions_per_photo=2, each_photo_once=True)
    caption = original_caption(batch)
    optimizer = torch.optim.AdamW(net.parameters(), lr=1e-3)
    start = net.itc.log_temperature.item()
    for _ in range(400):
        loss = itc_loss(net, batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        with torch.no_grad():
            scores = net.embed_texts(caption, batch["attention_mask"]) @ net.embed_images(
                batch["images"]).T  # (B, 4)
        text_to_image = (scores.argmax(dim=1) == batch["image_index"]).all()
        image_to_text = (batch["image_index"][scores.argmax(dim=0)] == torch.arange(4)).all()
        if text_to_image and image_to_text and loss.item() < 0.5:
            break
    assert text_to_image and image_to_text and loss.item() < 0.5, loss.item()
    assert net.itc.log_temperature.item() != start, "the temperature is learned"


def test_the_objective_trains_the_networks_heads_at_the_width_set():
    """The heads are the network's (``net.itc_dim``, set by the user: nothing derives it);
    the objective builds nothing of its own and refuses a network without them (test_objectives
    checks the message)."""
    module = MaskedLMModule(net=_itc_config(24), vocab_size=30,
                            objectives=[MaskedLM(), Contrastive()])
    assert module.net.config.itc_dim == 24 and module.hparams.net["itc_dim"] == 24
    assert module.net.itc.image_proj.out_features == 24 and module.heads == {}
    assert MaskedLMModule(net=_itc_config(24), vocab_size=30).net.itc is not None
    with pytest.raises(ValueError, match="itc_dim"):
        MaskedLMModule(net=tiny_config(), vocab_size=30, objectives=[Contrastive()])
