"""The neighbour lookup: manual attention math, starts silent, keeps the model's invariants."""

import math

import pytest
import torch

from vitbert.models import VitBert
from vitbert.models.lookup import NeighbourLookup


def noisy(module: torch.nn.Module) -> torch.nn.Module:
    """Every weight random and large, the zero output projection included: a lookup that acts."""
    torch.manual_seed(1)
    with torch.no_grad():
        for param in module.parameters():
            param.normal_(0.0, 0.5)
    return module


@pytest.fixture
def looking(tiny_config):
    torch.manual_seed(0)
    return noisy(VitBert(tiny_config(neighbour_lookup_heads=2))).eval()


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
