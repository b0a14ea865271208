"""The word pointer: patches in the tower's order, the by-hand attention sum, the next-word
re-share after a key word only, the word lookup, its config, and its loss: it learns to read the
shape of the object a colour names, for colour-shape pairs it never saw together too."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from vitbert.data.features import FEATURES_KEY
from vitbert.data.masking import IGNORE_INDEX
from vitbert.data.tokenizer import train_wordpiece
from vitbert.lit.module import MaskedLMModule
from vitbert.lit.objectives import pointer_loss, pointer_tower_loss, training_loss
from vitbert.models import PointerConfig, VitBert, VitBertConfig
from vitbert.models.pointer import MISSING, Grounding, WordPointer, patch_pixels

COLOURS = ("red", "green", "blue")
SHAPES = ("circle", "square", "triangle")
PIXELS = torch.tensor([(230, 20, 20), (20, 200, 20), (20, 20, 230)], dtype=torch.uint8)
CLS, SEP, AND = 1, 2, 11
KEY_IDS, VALUE_IDS = torch.tensor([5, 6, 7]), torch.tensor([8, 9, 10])


def make_pointer(image_dim: int = 8, image_size: int = 16, grid: int = 4,
                 **config) -> WordPointer:
    pointer = WordPointer(PointerConfig(COLOURS, SHAPES, dim=16, hidden_dim=32, **config),
                          image_dim, image_size, grid)
    pointer.key_ids.copy_(KEY_IDS)
    pointer.value_ids.copy_(VALUE_IDS)
    return pointer


def test_patch_pixels_are_the_patches_in_the_towers_row_major_order():
    images = torch.zeros(2, 3, 16, 16, dtype=torch.uint8)
    for row in range(4):
        for col in range(4):
            images[:, :, 4 * row:4 * row + 4, 4 * col:4 * col + 4] = 10 * row + col
    images[1, 2] = 255  # the second photo's blue channel
    patches = patch_pixels(images, side=4)  # (2, 16, 48)
    assert patches.shape == (2, 16, 48)
    expected = torch.arange(16).div(4, rounding_mode="floor") * 10 + torch.arange(16) % 4
    assert torch.allclose(patches[0] * 255, expected[:, None].float().expand(16, 48))
    assert (patches[1, :, 32:] == 1.0).all()  # channel-major within a patch: blue last
    assert torch.equal(patch_pixels(images.float() / 255, side=4), patches)  # floats read as is


def test_the_pointer_is_the_attention_weighted_mixture_of_the_patches_word_probabilities():
    torch.manual_seed(0)
    pointer = make_pointer()
    key_index = torch.tensor([0, 2, 1])
    keys = torch.randn(3, 16, 16)
    values = torch.randn(3, 16, 3).log_softmax(-1)
    got = pointer(key_index, keys, values)  # (3, 3)
    query = pointer.query.weight[key_index]  # (3, 16)
    alpha = torch.softmax((keys @ query[:, :, None]).squeeze(-1) / math.sqrt(16), dim=-1)
    by_hand = torch.log((alpha[:, :, None] * values.exp()).sum(dim=1))
    assert torch.allclose(got, by_hand, atol=1e-5)
    assert torch.allclose(got.exp().sum(-1), torch.ones(3), atol=1e-5)  # a distribution


def test_after_a_key_word_the_text_says_whether_a_value_word_comes_and_the_pointer_which():
    torch.manual_seed(0)
    pointer = make_pointer(key_presence=False)  # the key words' share: the next test
    pointer.value_ids[2] = MISSING  # "triangle" is no piece of this vocabulary
    log_probs = torch.randn(4, 20).log_softmax(-1)  # (R, V) the text head's
    last = torch.tensor([5, 11, 7, 8])  # red, "and", blue, circle: rows 0 and 2 follow a key
    grounding = Grounding(torch.randn(4, 16, 16), torch.randn(4, 16, 3).log_softmax(-1),
                          torch.zeros(4, 16))
    out = pointer.next_word(log_probs, torch.stack((torch.full((4,), CLS), last), 1), grounding)
    assert torch.equal(out[[1, 3]], log_probs[[1, 3]])  # no key word before: untouched
    others = torch.ones(20, dtype=torch.bool)
    others[[8, 9]] = False
    assert torch.equal(out[[0, 2]][:, others], log_probs[[0, 2]][:, others])
    # The text's mass on the value words stays theirs, shared as the pointer says.
    present = pointer(torch.tensor([0, 2]), grounding.keys[[0, 2]],
                      grounding.values[[0, 2]])[:, :2].log_softmax(-1)  # circle, square
    mass = log_probs[[0, 2]][:, [8, 9]].logsumexp(-1, keepdim=True)
    assert torch.allclose(out[[0, 2]][:, [8, 9]], mass + present, atol=1e-6)
    assert torch.allclose(out.exp().sum(-1), torch.ones(4), atol=1e-5)


def test_key_words_are_shared_by_what_is_not_named_yet_and_nothing_else_changes():
    """p(colour) ∝ p_text(colour) · σ(presence) · the share of its evidence uncovered, within
    the text's mass on the colours; the presence is the log-mean-exp of the patches' scores, the
    evidence their exp, by hand; a missing colour is left out."""
    torch.manual_seed(0)
    pointer = make_pointer()
    pointer.key_ids[1] = MISSING  # "green" is no piece of this vocabulary
    log_probs = torch.randn(3, 20).log_softmax(-1)
    grounding = Grounding(torch.randn(3, 16, 16), torch.randn(3, 16, 3).log_softmax(-1),
                          torch.rand(3, 16) * 0.5)
    written = torch.tensor([[CLS, AND]] * 3)  # no key word last: the values are untouched
    out = pointer.next_word(log_probs, written, grounding)
    others = torch.ones(20, dtype=torch.bool)
    others[[5, 7]] = False  # red, blue
    assert torch.equal(out[:, others], log_probs[:, others])
    scores = torch.einsum("kd,rnd->rkn", pointer.query.weight, grounding.keys) / 4.0  # √16
    evidence = scores.exp()  # (3, K, N)
    seen = torch.sigmoid(evidence.mean(-1).log())  # in the photo
    left = (evidence * (1 - grounding.covered)[:, None, :]).sum(-1) / evidence.sum(-1)
    unnamed = (seen * left)[:, [0, 2]]  # (3, 2) red, blue
    share = log_probs[:, [5, 7]].exp() * unnamed
    mass = log_probs[:, [5, 7]].exp().sum(-1, keepdim=True)
    assert torch.allclose(out[:, [5, 7]].exp(), mass * share / share.sum(-1, keepdim=True),
                          atol=1e-6)


def two_blue_objects(pointer: WordPointer) -> Grounding:
    """Two photos of a 4×4 grid: a blue triangle at patches 0 and 1, a blue square at patch 15;
    circles read everywhere else."""
    keys = torch.zeros(2, 16, 16)
    keys[:, [0, 1, 15]] = 5.0 * pointer.query.weight[2].detach()  # blue patches
    values = torch.full((2, 16, 3), -9.0)
    values[:, :, 0] = 0.0  # circles
    values[:, :2, 0], values[:, :2, 2] = -9.0, 0.0  # the triangle
    values[:, 15, 0], values[:, 15, 1] = -9.0, 0.0  # the square
    return Grounding(keys, values.log_softmax(-1), torch.zeros(2, 16))


def test_an_object_is_named_once_two_of_one_colour_get_their_own_shapes():
    """Two blue objects: "blue" points at both; once "blue triangle" is written, the triangle's
    window of patches is covered and the next "blue" reads the other one, in each beam's own
    order."""
    pointer = make_pointer(key_presence=False, object_radius=1)
    grounding = two_blue_objects(pointer)
    text = torch.zeros(2, 20).log_softmax(-1)  # (R, V): no view; 3 / 20 on the value words
    blue, triangle, square = 7, 10, 9
    first = pointer.next_word(text, torch.tensor([[CLS, blue]] * 2), grounding)
    assert first[:, triangle].exp().min() > 0.03 and first[:, square].exp().min() > 0.03
    # Row 0 wrote "blue triangle", row 1 "blue square"; then each writes "and blue".
    written = torch.tensor([[CLS, blue, triangle], [CLS, blue, square]])
    pointer.next_word(text, written, grounding)
    window = {0: [0, 1, 2, 4, 5, 6], 1: [10, 11, 14, 15]}  # 3×3 around each patch read
    for row, patches in window.items():
        assert grounding.covered[row, patches].min() > 0.99
        rest = torch.ones(16, dtype=torch.bool)
        rest[patches] = False
        assert grounding.covered[row, rest].max() < 0.01
    written = torch.cat((written, torch.tensor([[AND, blue]] * 2)), dim=1)
    second = pointer.next_word(text, written, grounding)
    assert second[0, square].exp() > 0.14 and second[1, triangle].exp() > 0.14  # 0.15: all
    # Beams that survive take their coverage along.
    swapped = grounding.select(torch.tensor([1, 0]))
    assert torch.equal(swapped.covered, grounding.covered.flip(0))
    assert torch.equal(swapped.keys, grounding.keys.flip(0))


def test_a_colour_is_not_named_again_for_an_object_already_named():
    """A blue triangle and a red square; the text head prefers "blue" 9:1 over "red". Before
    anything is named blue keeps its lead; once the blue object is named, red takes it, though
    the text head still says blue."""
    pointer = make_pointer()
    with torch.no_grad():  # query k reads key dimension k: a patch's scores are its keys' first 3
        pointer.query.weight.zero_()
        pointer.query.weight[:, :3] = 4.0 * torch.eye(3)  # / √16
    grounding = two_blue_objects(pointer)
    grounding.keys = torch.zeros(2, 16, 16)
    grounding.keys[:, :, :3] = -8.0  # no colour here
    grounding.keys[:, [0, 1], 2] = grounding.keys[:, 15, 0] = 8.0  # blue triangle, red square
    seen = pointer.presence(grounding.keys).sigmoid()
    assert (seen[:, [0, 2]] > 0.99).all() and (seen[:, 1] < 0.01).all()  # red, blue; no green
    text = torch.full((2, 20), -30.0)
    text[:, 7], text[:, 5] = math.log(0.9), math.log(0.1)  # blue, red
    text = text.log_softmax(-1)
    red, blue, triangle = 5, 7, 10
    first = pointer.next_word(text, torch.tensor([[CLS, AND]] * 2), grounding)
    assert torch.allclose(first[:, blue].exp(), torch.tensor(0.9), atol=0.01)
    pointer.next_word(text, torch.tensor([[CLS, blue, triangle]] * 2), grounding)  # named
    second = pointer.next_word(text, torch.tensor([[CLS, blue, triangle, AND]] * 2), grounding)
    assert (second[:, red].exp() > 0.99).all()  # blue's only object is covered: red is seen


def test_bind_looks_the_words_up_and_names_those_the_vocabulary_lacks():
    tokenizer = train_wordpiece(["a red circle and a green square"] * 3, vocab_size=100,
                                min_frequency=1)
    pointer = make_pointer()
    assert pointer.bind(tokenizer) == ["blue", "triangle"]
    vocab = tokenizer.get_vocab()
    assert pointer.key_ids.tolist() == [vocab["red"], vocab["green"], MISSING]
    assert pointer.value_ids.tolist() == [vocab["circle"], vocab["square"], MISSING]


def test_the_config_turns_the_pointer_on_and_old_models_load_without_one(tiny_config):
    config = tiny_config(pointer=PointerConfig(COLOURS, SHAPES))
    net = VitBert(config)
    assert net.pointer is not None and net.pointer.patch_side == 8  # 16 px, a 2×2 grid
    assert VitBertConfig.from_dict(config.to_dict()) == config
    stored = config.to_dict()
    del stored["pointer"]["key_presence"]  # a pointer not trained for it
    assert not VitBertConfig.from_dict(stored).pointer.key_presence
    del stored["pointer"]  # written before the pointer existed
    assert not VitBertConfig.from_dict(stored).pointer.enabled
    assert VitBert(tiny_config()).pointer is None  # off unless it has words
    with pytest.raises(ValueError, match="image_tokens='patches'"):
        VitBertConfig(image_tokens="pooled", pointer=PointerConfig(COLOURS, SHAPES))


def two_object_batch(count: int, generator: torch.Generator, held_out=()):
    """``count`` 16×16 photos of two objects of different colours in two of the 4×4 patches,
    each caption "[CLS] c1 s1 and c2 s2 [SEP]". The tower's tokens are stand-ins that know the
    shape and not the colour: one-hot shape (8 wide) at an object's patch, zero elsewhere; the
    pixels know the colour and not the shape. Colour-shape pairs in ``held_out`` never occur.
    Returns the batch, and each photo's objects as (patch, colour, shape) rows (count, 2, 3)."""
    images = torch.full((count, 3, 16, 16), 128, dtype=torch.uint8)
    tokens = torch.zeros(count, 16, 8)
    captions, objects = [], []
    for b in range(count):
        patches = torch.randperm(16, generator=generator)[:2]
        colours = torch.randperm(3, generator=generator)[:2]
        shapes = torch.randint(3, (2,), generator=generator)
        while any((int(c), int(s)) in held_out for c, s in zip(colours, shapes, strict=True)):
            shapes = torch.randint(3, (2,), generator=generator)
        row = [CLS]
        for i, (p, c, s) in enumerate(zip(patches, colours, shapes, strict=True)):
            y, x = divmod(int(p), 4)
            images[b, :, 4 * y:4 * y + 4, 4 * x:4 * x + 4] = PIXELS[c][:, None, None]
            tokens[b, p, s] = 1.0
            row += ([AND] if i else []) + [int(KEY_IDS[c]), int(VALUE_IDS[s])]
        captions.append([*row, SEP])
        objects.append([[int(p), int(c), int(s)] for p, c, s in zip(patches, colours, shapes,
                                                                      strict=True)])
    input_ids = torch.tensor(captions)
    batch = {"input_ids": input_ids, "labels": torch.full_like(input_ids, IGNORE_INDEX),
             "attention_mask": torch.ones_like(input_ids, dtype=torch.bool),
             "content_mask": input_ids >= 5, FEATURES_KEY: tokens}
    return batch, images, torch.tensor(objects)


def pointer_accuracy(pointer: WordPointer, images, tokens, objects) -> float:
    """How often the pointer names the shape of the object of each colour in the photo."""
    with torch.no_grad():
        grounding = pointer.read(images, tokens)
        photo = torch.arange(len(images)).repeat_interleave(2)
        colour, shape = objects[:, :, 1].flatten(), objects[:, :, 2].flatten()
        guess = pointer(colour, grounding.keys[photo], grounding.values[photo]).argmax(-1)
    return (guess == shape).float().mean().item()


def presence_accuracy(pointer: WordPointer, images, objects) -> float:
    """How often the pointer tells each colour's presence in the photo right, and surely (its
    probability within 0.01 of 0 or 1: decoding multiplies the text head's by it)."""
    with torch.no_grad():
        seen = pointer.presence(pointer.read(images, torch.zeros(len(images), 16, 8)).keys)
    truth = torch.zeros_like(seen)
    truth[torch.arange(len(images))[:, None], objects[:, :, 1]] = 1.0
    return ((seen.sigmoid() - truth).abs() < 0.01).float().mean().item()


def test_the_pointer_loss_teaches_the_shape_of_the_object_a_colour_names_in_new_pairs_too():
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    held_out = {(0, 2), (1, 0), (2, 1)}  # no red triangle, green circle, blue square
    pointer = make_pointer()
    test_batch, test_images, test_objects = two_object_batch(300, generator)
    new = torch.tensor([[(int(c), int(s)) in held_out for _, c, s in photo]
                        for photo in test_objects.tolist()])
    before = pointer_accuracy(pointer, test_images, test_batch[FEATURES_KEY], test_objects)
    seen_before = presence_accuracy(pointer, test_images, test_objects)
    optimizer = torch.optim.Adam(pointer.parameters(), lr=1e-2)
    for _ in range(250):
        batch, images, _ = two_object_batch(32, generator, held_out)
        loss = pointer_loss(pointer, batch, images)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    after = pointer_accuracy(pointer, test_images, test_batch[FEATURES_KEY], test_objects)
    # The objects of the held-out pairs alone.
    keep = new.any(-1)
    held = pointer_accuracy(pointer, test_images[keep], test_batch[FEATURES_KEY][keep],
                            test_objects[keep])
    assert before < 0.6 < 0.95 < after
    assert held > 0.9  # the keys read colour, the values shape: any pair binds
    # Which colours a photo has (two of the three), from the same keys and queries.
    assert seen_before < 0.5 < 0.99 < presence_accuracy(pointer, test_images, test_objects)


def test_the_pointer_tower_loss_reads_the_tokens_where_the_colour_points_with_that_held_fixed():
    torch.manual_seed(0)
    pointer = make_pointer()
    batch, images, _ = two_object_batch(5, torch.Generator().manual_seed(2))
    tokens = torch.randn(5, 16, 8, requires_grad=True)
    loss = pointer_tower_loss(pointer, {**batch, FEATURES_KEY: tokens}, images)
    # By hand: every "colour shape" pair, -log Σ_n α_n softmax(W t_n + b)[shape].
    keys = pointer.key(patch_pixels(images, 4))  # (5, 16, d)
    by_hand = []
    for b, caption in enumerate(batch["input_ids"].tolist()):
        for colour, shape in ((caption[1], caption[2]), (caption[4], caption[5])):
            query = pointer.query.weight[KEY_IDS.tolist().index(colour)]
            alpha = torch.softmax(keys[b] @ query / math.sqrt(16), dim=-1)  # (16,)
            p = pointer.value.classifier(tokens[b]).softmax(-1)[:, VALUE_IDS.tolist().index(shape)]
            by_hand.append(-torch.log((alpha * p).sum()))
    assert torch.allclose(loss, torch.stack(by_hand).mean(), atol=1e-5)
    loss.backward()
    assert tokens.grad.abs().sum() > 0 and pointer.value.classifier.weight.grad.abs().sum() > 0
    # Where the colour points is held fixed: the loss cannot be met by pointing elsewhere.
    assert pointer.query.weight.grad is None
    assert all(p.grad is None for p in pointer.key.parameters())


def test_the_pointer_tower_loss_teaches_the_tokens_of_the_object_a_colour_names_its_shape():
    """The tower's side: tokens that know no shape (zeros, as a tower that put the shapes
    elsewhere) learn to name each object's shape at the object's own patch, and the patches
    where no colour points barely move."""
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    pointer = make_pointer()
    optimizer = torch.optim.Adam(pointer.parameters(), lr=1e-2)
    for _ in range(150):  # first the pointer learns where each colour is
        batch, images, _ = two_object_batch(32, generator)
        optimizer.zero_grad()
        pointer_loss(pointer, batch, images).backward()
        optimizer.step()
    pointer.requires_grad_(False)
    batch, images, objects = two_object_batch(32, generator)
    tokens = torch.zeros(32, 16, 8, requires_grad=True)  # (P, N, D_img): the tower's output

    def shape_at_objects() -> float:
        with torch.no_grad():
            read = pointer.value.classifier(tokens).argmax(-1)  # (P, N) the shape each patch says
        at = read[torch.arange(32)[:, None], objects[:, :, 0]]  # (P, 2) at each object's patch
        return (at == objects[:, :, 2]).float().mean().item()

    before = shape_at_objects()
    optimizer = torch.optim.Adam([tokens], lr=0.1)
    for _ in range(60):
        optimizer.zero_grad()
        pointer_tower_loss(pointer, {**batch, FEATURES_KEY: tokens}, images).backward()
        optimizer.step()
    assert before < 0.5 < 0.95 < shape_at_objects()
    moved = tokens.detach().norm(dim=-1)  # (P, N) how far each patch's token moved from 0
    at_object = torch.zeros(32, 16, dtype=torch.bool)
    at_object[torch.arange(32)[:, None], objects[:, :, 0]] = True
    assert moved[~at_object].mean() < 0.1 * moved[at_object].mean()


def test_the_pointer_loss_moves_the_pointer_alone_and_joins_the_training_loss(tiny_config):
    torch.manual_seed(0)
    net = VitBert(tiny_config(pointer=PointerConfig(COLOURS, SHAPES)))
    net.pointer.key_ids.copy_(KEY_IDS)
    net.pointer.value_ids.copy_(VALUE_IDS)
    batch, images, _ = two_object_batch(6, torch.Generator().manual_seed(1))
    batch.pop(FEATURES_KEY)
    images = F.interpolate(images.float(), size=16).to(torch.uint8)  # the tiny tower's 16 px
    batch["images"] = images
    batch["labels"][:, 2] = batch["input_ids"][:, 2]  # the first shape: the MLM's one target
    batch["input_ids"][:, 2] = 4
    loss, parts = training_loss(net, batch, 0.0, mask_token_id=4)
    assert set(parts) == {"train/loss", "train/pointer_loss"}
    assert torch.allclose(loss, parts["train/loss"] + parts["train/pointer_loss"])
    net.zero_grad()
    parts["train/pointer_loss"].backward()
    grads = {name: p.grad for name, p in net.named_parameters()}
    assert all(grads[name] is None for name in grads if not name.startswith("pointer."))
    assert all(grads[name] is not None and grads[name].abs().sum() > 0
               for name in grads if name.startswith("pointer."))
    # Its tower side, weighted, joins the loss too and reaches the tower.
    loss, parts = training_loss(net, batch, 0.0, mask_token_id=4, pointer_tower_weight=0.5)
    assert set(parts) == {"train/loss", "train/pointer_loss", "train/pointer_tower_loss"}
    assert torch.allclose(loss, parts["train/loss"] + parts["train/pointer_loss"]
                          + 0.5 * parts["train/pointer_tower_loss"])
    net.zero_grad()
    parts["train/pointer_tower_loss"].backward()
    tower = [p.grad for p in net.image_tower.parameters()]
    assert any(g is not None and g.abs().sum() > 0 for g in tower)
    assert net.pointer.query.weight.grad is None


def test_the_module_binds_the_words_to_its_tokenizer_and_refuses_a_frozen_tower():
    config = VitBertConfig(pointer=PointerConfig(COLOURS, SHAPES))
    with pytest.raises(ValueError, match="frozen tower's feature cache"):
        MaskedLMModule(net=config, freeze_image_tower=True)
    module = MaskedLMModule(net=config)
    module.tokenizer = train_wordpiece(["a red circle and a blue triangle"] * 3, vocab_size=100,
                                       min_frequency=1)
    with pytest.warns(UserWarning, match="green, square are not words"):
        module.setup("validate")
    vocab = module.tokenizer.get_vocab()
    assert module.net.pointer.key_ids.tolist() == [vocab["red"], MISSING, vocab["blue"]]
    assert module.net.pointer.value_ids.tolist() == [vocab["circle"], MISSING, vocab["triangle"]]
