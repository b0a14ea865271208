"""The neighbour lookup: manual attention math, starts silent, keeps the model's invariants."""

import math

import pytest
import torch
from vitbert.models.lookup import NeighbourLookup, ReadSharing

from vitbert.models import ImageTowerConfig, VitBert, VitBertConfig


def noisy(module: torch.nn.Module) -> torch.nn.Module:
    """Every weight random and large, the zero output projection included: a lookup that acts."""
    torch.manual_seed(1)
    with torch.no_grad():
        for param in module.parameters():
            param.normal_(0.0, 0.5)
    return module


def split_config(tiny_config, shared: bool = False):
    """A tower that keeps hue apart (chroma_dim), so the lookup finds by one and reads the other;
    ``shared``: the tower's places too, a lookup that says where it looked, and words that hear
    the reads near them."""
    image = ImageTowerConfig(kind="conv_stem", image_size=16, patch_size=8, dim=32, depth=1,
                             num_heads=2, stem_hidden_dim=8, chroma_dim=8, chroma_place=shared)
    return tiny_config(image=image, neighbour_lookup_heads=2, lookup_share_window=2 * shared,
                       lookup_place=shared)


@pytest.fixture(params=["whole_tokens", "hue_and_form", "shared_reads"])
def looking(tiny_config, request):
    torch.manual_seed(0)
    config = (tiny_config(neighbour_lookup_heads=2) if request.param == "whole_tokens"
              else split_config(tiny_config, shared=request.param == "shared_reads"))
    return noisy(VitBert(config)).eval()


def test_lookup_equals_the_attention_written_out():
    lookup = noisy(NeighbourLookup(dim=6, num_heads=2))
    words, image = torch.randn(2, 4, 6), torch.randn(2, 5, 6)
    keep = torch.tensor([[True, True, False, True, True], [True] * 5])
    out = lookup(words, image, keep)
    for b in range(2):
        for t in range(4):
            left = words[b, t - 1] if t > 0 else torch.zeros(6)
            right = words[b, t + 1] if t < 3 else torch.zeros(6)
            q = lookup.query.weight @ torch.cat((left, right)) + lookup.query.bias  # (6,)
            kv = image[b] @ lookup.key_value.weight.T + lookup.key_value.bias  # (5, 12)
            k, v = kv[:, :6], kv[:, 6:]
            heads = []
            for h in range(2):
                part = slice(3 * h, 3 * h + 3)
                score = k[:, part] @ q[part] / math.sqrt(3)  # (5,)
                score = score.masked_fill(~keep[b], float("-inf"))
                heads.append(score.softmax(0) @ v[:, part])
            expected = lookup.out.weight @ torch.cat(heads) + lookup.out.bias
            torch.testing.assert_close(out[b, t], expected, atol=1e-5, rtol=1e-5)


def test_the_split_lookup_finds_by_hue_reads_form_and_back():
    """Tokens of 10 channels, the last 4 the hue: head 0's keys come from the hue and its values
    from the form, head 1 the other way round; the query reads the neighbours and the word's own
    hidden state."""
    lookup = noisy(NeighbourLookup(dim=6, num_heads=2, image_dim=10, hue_dim=4))
    words, image, hidden = torch.randn(1, 3, 6), torch.randn(1, 5, 10), torch.randn(1, 3, 6)
    form, hue = image[0, :, :6], image[0, :, 6:]
    out = lookup(words, image, hidden=hidden)
    hue_key, hue_value = (hue @ lookup.hue.weight.T + lookup.hue.bias).split(3, dim=1)
    form_key, form_value = (form @ lookup.form.weight.T + lookup.form.bias).split(3, dim=1)
    for t in range(3):
        left = words[0, t - 1] if t > 0 else torch.zeros(6)
        right = words[0, t + 1] if t < 2 else torch.zeros(6)
        q = lookup.query.weight @ torch.cat((left, right)) + lookup.query.bias  # (6,)
        q = q + lookup.context.weight @ hidden[0, t] + lookup.context.bias  # and its own state
        by_hue = (hue_key @ q[:3] / math.sqrt(3)).softmax(0) @ form_value  # (3,)
        by_form = (form_key @ q[3:] / math.sqrt(3)).softmax(0) @ hue_value
        expected = lookup.out.weight @ torch.cat((by_hue, by_form)) + lookup.out.bias
        torch.testing.assert_close(out[0, t], expected, atol=1e-5, rtol=1e-5)


def test_the_lookup_says_where_it_looked_the_attention_written_out():
    """With ``place`` the last two image channels are the patch's column and row: each head's
    attention-weighted mean of them, projected, joins the read; the rest is the read without."""
    lookup = noisy(NeighbourLookup(dim=6, num_heads=2, image_dim=10, hue_dim=4, place=True))
    words, image, hidden = torch.randn(1, 3, 6), torch.randn(1, 5, 10), torch.randn(1, 3, 6)
    keep = torch.tensor([[True, False, True, True, True]])
    form, hue, places = image[0, :, :6], image[0, :, 6:], image[0, :, -2:]
    out = lookup(words, image, keep, hidden=hidden)
    hue_key, hue_value = (hue @ lookup.hue.weight.T + lookup.hue.bias).split(3, dim=1)
    form_key, form_value = (form @ lookup.form.weight.T + lookup.form.bias).split(3, dim=1)
    for t in range(3):
        left = words[0, t - 1] if t > 0 else torch.zeros(6)
        right = words[0, t + 1] if t < 2 else torch.zeros(6)
        q = lookup.query.weight @ torch.cat((left, right)) + lookup.query.bias
        q = q + lookup.context.weight @ hidden[0, t] + lookup.context.bias
        by_hue = (hue_key @ q[:3] / math.sqrt(3)).masked_fill(~keep[0], -math.inf).softmax(0)
        by_form = (form_key @ q[3:] / math.sqrt(3)).masked_fill(~keep[0], -math.inf).softmax(0)
        read = torch.cat((by_hue @ form_value, by_form @ hue_value))  # (6,)
        looked = torch.cat((by_hue @ places, by_form @ places))  # (4,): each head's column, row
        expected = (lookup.out.weight @ read + lookup.out.bias) + lookup.place.weight @ looked
        torch.testing.assert_close(out[0, t], expected, atol=1e-5, rtol=1e-5)


def test_the_place_needs_the_towers_places():
    with pytest.raises(ValueError, match="it needs hue_dim"):
        NeighbourLookup(dim=6, num_heads=2, place=True)
    with pytest.raises(ValueError, match=r"neighbour_lookup_heads .* image\.chroma_place: true"):
        VitBertConfig(image=ImageTowerConfig(kind="conv_stem", chroma_dim=8),
                      neighbour_lookup_heads=2, lookup_place=True)


def test_the_split_lookup_reads_the_tower_alike_from_pixels_cache_or_index(tiny_config, batch):
    """The lookup reads the tower's tokens: from the pixels, from the frozen tower's cache, and
    gathered per caption by image_index (the photo once for several captions), the same."""
    input_ids, attention_mask, images, _ = batch
    torch.manual_seed(0)
    net = noisy(VitBert(split_config(tiny_config))).eval()
    with torch.no_grad():
        from_pixels = net(input_ids, attention_mask, images)
        cached = net(input_ids, attention_mask, image_features=net.tower_tokens(images).half())
        indexed = net(input_ids, attention_mask, images[1:], image_index=torch.tensor([0, 0]))
        one_photo = net(input_ids, attention_mask, images[1:].expand(2, -1, -1, -1))
    torch.testing.assert_close(cached, from_pixels, atol=0.05, rtol=0.01)  # fp16 cache
    torch.testing.assert_close(indexed, one_photo, atol=1e-5, rtol=1e-5)


def test_an_odd_number_of_heads_does_not_halve_into_hue_and_form():
    with pytest.raises(ValueError, match="use an even number"):
        NeighbourLookup(dim=6, num_heads=3, image_dim=10, hue_dim=4)
    with pytest.raises(ValueError, match="pass hidden="):
        NeighbourLookup(dim=6, num_heads=2, image_dim=10, hue_dim=4)(torch.randn(1, 3, 6),
                                                                     torch.randn(1, 5, 10))


def test_a_new_lookup_changes_nothing_and_an_old_checkpoint_loads_into_it(tiny_config, batch):
    input_ids, attention_mask, images, _ = batch
    torch.manual_seed(0)
    plain = VitBert(tiny_config()).eval()
    with_lookup = VitBert(tiny_config(neighbour_lookup_heads=2)).eval()
    missing, unexpected = with_lookup.load_state_dict(plain.state_dict(), strict=False)
    assert missing and all(key.startswith("lookup.") for key in missing) and not unexpected
    with torch.no_grad():
        torch.testing.assert_close(with_lookup(input_ids, attention_mask, images),
                                   plain(input_ids, attention_mask, images))


def test_with_the_lookup_no_image_still_equals_the_image_blocked(looking, batch):
    input_ids, attention_mask, images, _ = batch
    blocked = torch.zeros(2, looking.num_image_tokens, dtype=torch.bool)
    with torch.no_grad():
        seen = looking(input_ids, attention_mask, images)
        without = looking(input_ids, attention_mask)
        hidden = looking(input_ids, attention_mask, images, image_mask=blocked)
    torch.testing.assert_close(hidden, without, atol=1e-5, rtol=1e-5)
    assert (seen - without).abs().max() > 1e-3  # the lookup does read the photo


def test_under_the_seq2seq_mask_no_word_reads_a_word_to_its_right(looking, batch):
    input_ids, attention_mask, images, _ = batch
    changed = input_ids.clone()
    changed[:, 4] = (changed[:, 4] + 1 - 5) % 45 + 5  # another ordinary piece at place 4
    with torch.no_grad():
        a = looking(input_ids, attention_mask, images, attention_mode="seq2seq")
        b = looking(changed, attention_mask, images, attention_mode="seq2seq")
        c = looking(input_ids, attention_mask, images)
        d = looking(changed, attention_mask, images)
    torch.testing.assert_close(a[:, :4], b[:, :4])  # places 0-3 never see place 4
    assert (c[:, 3] - d[:, 3]).abs().max() > 1e-3  # bidirectionally the right neighbour counts


def test_the_lookup_trains_under_bf16_autocast(looking, batch):
    input_ids, attention_mask, images, target_mask = batch
    looking.train()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = looking(input_ids, attention_mask, images, target_mask=target_mask)
    logits.float().sum().backward()
    assert torch.isfinite(logits.float()).all()
    assert looking.lookup.query.weight.grad.abs().sum() > 0


def test_read_sharing_is_the_convolution_written_out_and_causal_when_writing():
    """What a word hears: for each offset k in [-w, w], the read k pieces away (zero past either
    end) times a matrix of its own for that offset; writing leaves out k > 0."""
    sharing = noisy(ReadSharing(dim=3, window=2))
    reads = torch.randn(1, 5, 3)
    weight = sharing.mix.weight  # (3, 3, 5): out channel, in channel, tap j = offset j - 2
    for causal in (False, True):
        out = sharing(reads, causal=causal)
        for t in range(5):
            expected = torch.zeros(3)
            for k in range(-2, 3 if not causal else 1):
                if 0 <= t + k < 5:
                    expected += weight[:, :, k + 2] @ reads[0, t + k]
            torch.testing.assert_close(out[0, t], expected, atol=1e-5, rtol=1e-5)


def test_new_read_sharing_changes_nothing_and_a_checkpoint_without_it_loads(tiny_config, batch):
    input_ids, attention_mask, images, _ = batch
    torch.manual_seed(0)
    without = noisy(VitBert(split_config(tiny_config))).eval()
    config = split_config(tiny_config)
    with_sharing = VitBert(VitBertConfig.from_dict({**config.to_dict(),
                                                    "lookup_share_window": 3})).eval()
    missing, unexpected = with_sharing.load_state_dict(without.state_dict(), strict=False)
    assert missing == ["read_sharing.mix.weight"] and not unexpected
    with torch.no_grad():
        torch.testing.assert_close(with_sharing(input_ids, attention_mask, images),
                                   without(input_ids, attention_mask, images))


def test_read_sharing_needs_the_lookup():
    with pytest.raises(ValueError, match="with neighbour_lookup_heads"):
        VitBertConfig(lookup_share_window=2)
