"""The shapes levers in the network (vitbert.shapes.model, plugged in by BindingLevers): the
hue-apart tower (PatchChroma, patch_places), the neighbour lookup and its read sharing (manual
attention math, start silent, keep the model's invariants), and the BindingReader inside VitBert.
"""

import math

import pytest
import torch

from vitbert.models import ImageTowerConfig, VitBertConfig, build_network
from vitbert.shapes import BindingLevers
from vitbert.shapes.model import (
    BindingReader,
    HueFormViT,
    NeighbourLookup,
    ReadSharing,
    patch_places,
)


def noisy(module: torch.nn.Module) -> torch.nn.Module:
    """Every weight random and large, the zero output projection included: a lookup that acts."""
    torch.manual_seed(1)
    with torch.no_grad():
        for param in module.parameters():
            param.normal_(0.0, 0.5)
    return module


def whole_tokens(heads: int = 2) -> BindingLevers:
    """The neighbour lookup alone, reading the projected image tokens whole (no hue-apart tower,
    no places, no read sharing)."""
    return BindingLevers(hue_dim=0, places=False, lookup_heads=heads, share_window=0,
                         lookup_place=False)


def split_config(tiny_config, shared: bool = False, share_window: int = 2):
    """A tower that keeps hue apart (hue_dim), so the lookup finds by one and reads the other;
    ``shared``: the tower's places too, a lookup that says where it looked, and words that hear
    the reads near them (``share_window`` pieces away)."""
    image = ImageTowerConfig(kind="conv_stem", image_size=16, patch_size=8, dim=32, depth=1,
                             num_heads=2, stem_hidden_dim=8)
    levers = BindingLevers(hue_dim=8, places=shared, lookup_heads=2,
                           share_window=share_window * shared, lookup_place=shared)
    return tiny_config(image=image, extension=levers)


@pytest.fixture(params=["whole_tokens", "hue_and_form", "shared_reads"])
def looking(tiny_config, request):
    torch.manual_seed(0)
    config = (tiny_config(extension=whole_tokens()) if request.param == "whole_tokens"
              else split_config(tiny_config, shared=request.param == "shared_reads"))
    return noisy(build_network(config)).eval()


# ----------------------------------------------------------------------------- the tower


def hue_tower(places: bool = False, depth: int = 2) -> torch.nn.Module:
    """The tower BindingLevers builds: 16×16 pictures, 4×4 patches, 32 channels, the last 8 the
    hue; global attention. Eval: BatchNorm's running statistics, pictures read one by one."""
    config = ImageTowerConfig(kind="conv_stem", image_size=16, patch_size=4, dim=32, depth=depth,
                              num_heads=2, attention_radius=None)
    tower = BindingLevers(hue_dim=8, places=places, lookup_place=places).image_tower(config)
    assert isinstance(tower, HueFormViT)
    return tower.eval()


def test_the_hue_apart_tower_codes_form_alike_in_every_hue():
    """Exchanging the colour channels keeps every pixel's luminance: the form channels (all but
    the last hue_dim) come out the same, and only the hue channels tell the pictures apart."""
    tower = hue_tower()
    images = torch.randn(2, 3, 16, 16)
    rehued = images[:, [2, 0, 1]]
    with torch.no_grad():
        tokens, tokens_rehued = tower(images)[1], tower(rehued)[1]  # (2, 16, 32) each
    torch.testing.assert_close(tokens_rehued[..., :24], tokens[..., :24])
    assert not torch.allclose(tokens_rehued[..., 24:], tokens[..., 24:], atol=1e-3)


def test_the_hue_channels_are_blind_to_where_in_the_patch_a_pixel_is():
    """A form is an arrangement of pixels; the hue channels (PatchChroma) must not see one.
    Turning every 4×4 patch by 180° in place leaves them unchanged, while the form channels
    change."""
    tower = hue_tower()
    images = torch.randn(1, 3, 16, 16)
    patches = images.unflatten(2, (4, 4)).unflatten(4, (4, 4))  # (1, 3, 4, 4, 4, 4)
    turned = patches.flip(3, 5).flatten(4, 5).flatten(2, 3)  # (1, 3, 16, 16)
    with torch.no_grad():
        tokens, tokens_turned = tower(images)[1], tower(turned)[1]
    torch.testing.assert_close(tokens_turned[..., 24:], tokens[..., 24:])
    assert not torch.allclose(tokens_turned[..., :24], tokens[..., :24], atol=1e-3)


def test_with_places_the_last_two_channels_say_where_each_patch_is():
    """Column then row, -1 at the left and top edge and 1 at the right and bottom, on the grid
    of the input at hand (a larger picture, a finer grid); the hue beside them is still read."""
    tower = hue_tower(places=True, depth=1)
    columns = {16: [-1, -1 / 3, 1 / 3, 1], 24: [-1, -0.6, -0.2, 0.2, 0.6, 1]}
    for size, expected_column in columns.items():
        images = torch.randn(2, 3, size, size)
        with torch.no_grad():
            tokens = tower(images)[1]  # (2, N, 32)
        side = len(expected_column)
        place = tokens[..., -2:].unflatten(1, (side, side))  # (2, rows, cols, 2)
        column = torch.tensor(expected_column)
        torch.testing.assert_close(place[..., 0], column.expand(2, side, side))
        torch.testing.assert_close(place[..., 1], column[:, None].expand(2, side, side))
    rehued = images[:, [2, 0, 1]]
    with torch.no_grad():
        assert not torch.allclose(tower(rehued)[1][..., 24:30], tokens[..., 24:30], atol=1e-3)


def test_patch_places_of_a_grid_that_is_not_square():
    """(B, C, rows, cols) → (B, 2, rows, cols): the column in channel 0, the row in channel 1;
    a grid one cell wide sits at 0."""
    places = patch_places(torch.zeros(2, 5, 2, 3))
    assert places.shape == (2, 2, 2, 3)
    torch.testing.assert_close(places[:, 0], torch.tensor([-1.0, 0.0, 1.0]).expand(2, 2, 3))
    torch.testing.assert_close(places[:, 1], torch.tensor([[-1.0], [1.0]]).expand(2, 2, 3))
    torch.testing.assert_close(patch_places(torch.zeros(1, 1, 1, 3))[0, 1], torch.zeros(1, 3))


def test_the_hue_apart_tower_needs_the_conv_stem_and_room_in_the_token():
    with pytest.raises(ValueError, match=r"hue_dim 8\) is a conv_stem tower .* \(it is vit, 32\)"):
        build_network(VitBertConfig(image=ImageTowerConfig(kind="vit", dim=32),
                              extension=BindingLevers(hue_dim=8)))
    with pytest.raises(ValueError, match=r"more than 128 channels.*\(it is conv_stem, 128\)"):
        BindingLevers(hue_dim=128).image_tower(ImageTowerConfig(kind="conv_stem", dim=128))
    with pytest.raises(ValueError, match=r"hue_dim=2: use 0 \(off\), or with places at least 3"):
        BindingLevers(hue_dim=2, places=True)
    with pytest.raises(ValueError, match=r"hue_dim=-1"):
        BindingLevers(hue_dim=-1, places=False)
    # hue_dim 0: the core's tower, whatever its kind
    assert BindingLevers(hue_dim=0, places=False, lookup_place=False).image_tower(
        ImageTowerConfig(kind="vit")) is None


def test_the_binding_levers_refuse_settings_that_do_not_fit_together():
    with pytest.raises(ValueError, match="lookup_heads and share_window count heads"):
        BindingLevers(lookup_heads=-1)
    with pytest.raises(ValueError, match="lookup_heads and share_window count heads"):
        BindingLevers(share_window=-1)
    with pytest.raises(ValueError, match=r"share_window=2 shares what the lookup reads: set "
                                         r"lookup_heads"):
        BindingLevers(lookup_heads=0, share_window=2, lookup_place=False)
    with pytest.raises(ValueError, match=r"lookup_place reads the patch places .* places: true"):
        BindingLevers(places=False)  # lookup_place is on by default
    with pytest.raises(ValueError, match=r"lookup_place reads the patch places"):
        BindingLevers(lookup_heads=0, share_window=0)


# ----------------------------------------------------------------------------- the lookup


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
    with pytest.raises(ValueError, match=r"lookup_place reads the patch places .* places: true"):
        BindingLevers(hue_dim=8, places=False, lookup_heads=2, share_window=0, lookup_place=True)


def test_the_split_lookup_reads_the_tower_alike_from_pixels_cache_or_index(tiny_config, batch):
    """The lookup reads the tower's tokens: from the pixels, from the frozen tower's cache, and
    gathered per caption by the photos' index (the photo once for several captions), the same."""
    input_ids, attention_mask, images, _ = batch
    torch.manual_seed(0)
    net = noisy(build_network(split_config(tiny_config))).eval()
    with torch.no_grad():
        from_pixels = net(input_ids, attention_mask, net.image_features(images))
        cached = net(input_ids, attention_mask, net.image_features(images).half())
        indexed = net(input_ids, attention_mask, net.image_features(images[1:]),
                      torch.tensor([0, 0]))
        one_photo = net(input_ids, attention_mask,
                        net.image_features(images[1:].expand(2, -1, -1, -1)))
    torch.testing.assert_close(cached, from_pixels, atol=0.05, rtol=0.01)  # fp16 cache
    torch.testing.assert_close(indexed, one_photo, atol=1e-5, rtol=1e-5)
    assert (indexed - from_pixels).abs().max() > 1e-3  # another photo: another reading


def test_an_odd_number_of_heads_does_not_halve_into_hue_and_form():
    with pytest.raises(ValueError, match="use an even number"):
        NeighbourLookup(dim=6, num_heads=3, image_dim=10, hue_dim=4)
    with pytest.raises(ValueError, match="pass hidden="):
        NeighbourLookup(dim=6, num_heads=2, image_dim=10, hue_dim=4)(torch.randn(1, 3, 6),
                                                                     torch.randn(1, 5, 10))


def test_a_new_lookup_changes_nothing_and_an_old_checkpoint_loads_into_it(tiny_config, batch):
    input_ids, attention_mask, images, _ = batch
    torch.manual_seed(0)
    plain = build_network(tiny_config()).eval()
    with_lookup = build_network(tiny_config(extension=whole_tokens())).eval()
    missing, unexpected = with_lookup.load_state_dict(plain.state_dict(), strict=False)
    assert missing and all(key.startswith("reader.lookup.") for key in missing) and not unexpected
    with torch.no_grad():
        torch.testing.assert_close(with_lookup(input_ids, attention_mask,
                                               plain.image_features(images)),
                                   plain(input_ids, attention_mask, plain.image_features(images)))


def test_with_the_lookup_no_image_still_equals_the_image_blocked(looking, batch):
    input_ids, attention_mask, images, _ = batch
    blocked = torch.zeros(2, looking.num_image_tokens, dtype=torch.bool)
    with torch.no_grad():
        seen = looking(input_ids, attention_mask, looking.image_features(images))
        without = looking(input_ids, attention_mask)
        hidden = looking(input_ids, attention_mask, looking.image_features(images),
                         image_visible=blocked)
    torch.testing.assert_close(hidden, without, atol=1e-5, rtol=1e-5)
    assert (seen - without).abs().max() > 1e-3  # the lookup does read the photo


def test_under_the_seq2seq_mask_no_word_reads_a_word_to_its_right(looking, batch):
    input_ids, attention_mask, images, _ = batch
    features = looking.image_features(images)
    changed = input_ids.clone()
    changed[:, 4] = (changed[:, 4] + 1 - 5) % 45 + 5  # another ordinary piece at place 4
    with torch.no_grad():
        a = looking(input_ids, attention_mask, features, mode="seq2seq")
        b = looking(changed, attention_mask, features, mode="seq2seq")
        c = looking(input_ids, attention_mask, features)
        d = looking(changed, attention_mask, features)
    torch.testing.assert_close(a[:, :4], b[:, :4])  # places 0-3 never see place 4
    assert (c[:, 3] - d[:, 3]).abs().max() > 1e-3  # bidirectionally the right neighbour counts


def test_the_lookup_trains_under_bf16_autocast(looking, batch):
    input_ids, attention_mask, images, target_mask = batch
    looking.train()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = looking(input_ids, attention_mask, looking.image_features(images),
                         target_mask=target_mask)
    logits.float().sum().backward()
    assert torch.isfinite(logits.float()).all()
    assert looking.reader.lookup.query.weight.grad.abs().sum() > 0


# ----------------------------------------------------------------------------- read sharing


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
    """The extension as a config stores it (``to_dict``: class_path and init_args), with a
    window: the network rebuilt from that dict has the sharing, which starts silent."""
    input_ids, attention_mask, images, _ = batch
    torch.manual_seed(0)
    without = noisy(build_network(split_config(tiny_config))).eval()
    stored = split_config(tiny_config).to_dict()
    assert stored["extension"]["class_path"] == "vitbert.shapes.model.BindingLevers"
    stored["extension"]["init_args"]["share_window"] = 3
    with_sharing = build_network(VitBertConfig.from_dict(stored)).eval()
    assert with_sharing.reader.sharing.window == 3
    missing, unexpected = with_sharing.load_state_dict(without.state_dict(), strict=False)
    assert missing == ["reader.sharing.mix.weight"] and not unexpected
    with torch.no_grad():
        torch.testing.assert_close(with_sharing(input_ids, attention_mask,
                                                without.image_features(images)),
                                   without(input_ids, attention_mask,
                                           without.image_features(images)))


def test_read_sharing_needs_the_lookup():
    with pytest.raises(ValueError, match=r"share_window=2 shares what the lookup reads"):
        BindingLevers(hue_dim=8, places=True, lookup_heads=0, share_window=2, lookup_place=False)


# ----------------------------------------------------------------------------- the reader


@pytest.mark.parametrize("mode", ["bidirectional", "seq2seq"])
def test_the_reader_adds_the_reads_to_the_encoders_word_rows(tiny_config, batch, mode):
    """Inside VitBert the BindingReader takes the encoder's word rows and adds what the lookup
    read for each word (from the input embeddings' neighbours, the tower's own tokens of the
    caption's photo, the visible ones) and what the words near it read, written out."""
    input_ids, attention_mask, images, _ = batch
    torch.manual_seed(0)
    net = noisy(build_network(split_config(tiny_config, shared=True))).eval()
    reader = net.reader
    assert isinstance(reader, BindingReader)
    index = torch.tensor([1, 0])
    visible = torch.tensor([[True, False, True, True], [True] * 4])
    features = net.image_features(images)
    with torch.no_grad():
        rows, _ = net.encode(input_ids, attention_mask, features, index, visible, mode=mode)
        net.reader = None  # the encoder's own rows, before the reader
        hidden, _ = net.encode(input_ids, attention_mask, features, index, visible, mode=mode)
        net.reader = reader
        causal = mode == "seq2seq"
        reads = reader.lookup(net.text.embeddings(input_ids), features[index], visible,
                              right_context=not causal, hidden=hidden)
        expected = hidden + reads + reader.sharing(reads, causal=causal)
    torch.testing.assert_close(rows, expected, atol=1e-5, rtol=1e-5)
    assert (rows - hidden).abs().max() > 1e-3  # the reader does change the rows
