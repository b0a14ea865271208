"""The resumable training loader on its own: a loader rebuilt from a mid-epoch state hands out
exactly the batches (indices and mask keys) the uninterrupted one would have, also after a second
interruption in the same epoch and from a state saved at an epoch's end."""

from __future__ import annotations

import pytest
from lightning.fabric.utilities.distributed import DistributedSamplerWrapper
from torch.utils.data import Dataset

from vitbert.data import resume
from vitbert.data.resume import MASK_KEY, EpochShuffle, resumable_loader


class Numbers(Dataset):
    def __len__(self) -> int:
        return 50

    def __getitem__(self, i: int) -> dict:
        return {"index": i}


def _loader():
    return resumable_loader(Numbers(), seed=7, batch_size=8,
                            collate_fn=lambda items: [(it["index"], it[MASK_KEY]) for it in items])


def _epoch(loader, epoch: int, stop: int | None = None) -> list:
    loader.sampler.set_epoch(epoch)
    batches = []
    for batch in loader:
        batches.append(batch)
        if len(batches) == stop:
            break
    return batches


def test_resumes_mid_epoch_twice_and_after_an_epoch_end():
    reference = _loader()
    epochs = [_epoch(reference, e) for e in range(2)]
    assert epochs[0] != epochs[1]  # a new order and new mask keys every epoch
    assert epochs[1][0][0][1] == (7, 1)  # (seed, epoch)

    first = _loader()
    done = _epoch(first, 1, stop=3)
    second = _loader()
    second.load_state_dict(first.state_dict())
    done += _epoch(second, 1, stop=2)  # interrupted again in the same epoch
    third = _loader()
    third.load_state_dict(second.state_dict())
    assert third.state_dict()["batches"] == 5
    done += _epoch(third, 1)
    assert done == epochs[1]

    after_end = _loader()
    after_end.load_state_dict(reference.state_dict())  # saved once epoch 1 was finished
    assert _epoch(after_end, 2) == _epoch(reference, 2)



def test_a_loader_rebuilt_around_lightnings_ddp_sampler_keeps_its_position():
    """Under DDP Lightning rebuilds the loader with its DistributedSamplerWrapper around ours and
    the same dataset: the position is saved and restored through the order the dataset keeps
    (no private attribute of Lightning's wrapper read), and workers get the dataset without it."""
    import pickle

    from vitbert.data.resume import ResumableLoader

    def rebuilt(loader):  # what Lightning does: our loader's class, its dataset, a wrapped sampler
        wrapper = DistributedSamplerWrapper(loader.sampler, num_replicas=2, rank=0, shuffle=False)
        return ResumableLoader(loader.dataset, sampler=wrapper, batch_size=8,
                               collate_fn=loader.collate_fn)

    first = rebuilt(_loader())
    first.sampler.set_epoch(1)  # forwarded to ours
    batches = iter(first)
    next(batches), next(batches)
    assert first.state_dict() == {"seed": 7, "epoch": 1, "batches": 2}
    again = rebuilt(_loader())
    again.load_state_dict(first.state_dict())
    assert again.dataset.order.epoch == 1 and again.state_dict()["batches"] == 2
    assert list(again) == list(batches)  # the rest of rank 0's epoch, as uninterrupted
    copied = pickle.loads(pickle.dumps(again.dataset))
    assert copied.order is None and copied[(3, 7, 1)] == {"index": 3, MASK_KEY: (7, 1)}

# ------------------------------------------------------------------------------------------------
# Grouped by photo (data.group_by_photo): 50 captions of 13 photos, 1 to 5 captions each


PHOTOS = [p for p in range(13) for _ in range(1 + p % 5)][:50]  # photo of each caption
PHOTOS += [13] * (50 - len(PHOTOS))


def _grouped_loader():
    return resumable_loader(Numbers(), seed=7, groups=PHOTOS, batch_size=8,
                            collate_fn=lambda items: [(it["index"], it[MASK_KEY]) for it in items])


def _runs(order: list[int]) -> list[int]:
    """The photos of ``order`` in the order met, one entry per run of consecutive captions."""
    return [PHOTOS[i] for n, i in enumerate(order) if n == 0 or PHOTOS[order[n - 1]] != PHOTOS[i]]


def test_grouped_order_keeps_a_photos_captions_together_and_depends_on_seed_and_epoch():
    def order(seed: int, epoch: int) -> list[int]:
        sampler = EpochShuffle(50, seed, PHOTOS)
        sampler.set_epoch(epoch)
        return [index for index, *_ in sampler]

    first = order(7, 0)
    assert sorted(first) == list(range(50))  # every caption once
    runs = _runs(first)
    assert sorted(runs) == sorted(set(PHOTOS))  # each photo's captions in one run
    assert first == order(7, 0)  # a function of (seed, epoch) alone
    assert runs != _runs(order(7, 1)) and runs != _runs(order(8, 0))
    # One caption per picture: grouping changes nothing (the shapes data keep their order).
    assert [i for i, *_ in EpochShuffle(50, 7, range(50))] == [i for i, *_ in EpochShuffle(50, 7)]


def _resumes_mid_epoch(make_loader, epoch: int) -> list:
    """Asserts that a loader stopped after three batches and resumed from its state gives the
    epoch an uninterrupted one gives; returns that epoch's batches."""
    reference = _epoch(make_loader(), epoch)
    first = make_loader()
    done = _epoch(first, epoch, stop=3)
    again = make_loader()
    again.load_state_dict(first.state_dict())
    assert done + _epoch(again, epoch) == reference
    return reference


def test_grouped_loader_resumes_mid_epoch():
    reference = _resumes_mid_epoch(_grouped_loader, 1)
    indices = [i for batch in reference for i, _ in batch]
    assert sorted(indices) == list(range(50)) and len(_runs(indices)) == len(set(PHOTOS))


@pytest.mark.parametrize("ranks", [2, 3, 4])
def test_under_ddp_each_rank_gets_whole_photos(ranks, monkeypatch):
    """Lightning's DistributedSamplerWrapper deals the order out round-robin; the grouped order
    is interleaved for it, so each rank reads one consecutive share of the photo-grouped order."""
    sampler = EpochShuffle(50, 7, PHOTOS)
    grouped = [index for index, *_ in sampler]  # one process
    monkeypatch.setattr(resume, "_world_size", lambda: ranks)
    shares = []
    for rank in range(ranks):
        wrapper = DistributedSamplerWrapper(sampler, num_replicas=ranks, rank=rank, shuffle=False)
        shares.append([index for index, *_ in wrapper])
    m = -(-50 // ranks)  # what each rank reads, the deal's padding included
    full = ranks - (m * ranks - 50)  # ranks that read no padding; the others one repeat each
    real = [share if rank < full else share[:-1] for rank, share in enumerate(shares)]
    assert [i for share in real for i in share] == grouped  # consecutive shares of the order


def test_length_grouped_order_pads_little_and_depends_on_seed_and_epoch():
    """Every index once an epoch; a batch's lengths close together (a random batch of these
    lengths spans nearly all of them); the order a function of (seed, epoch)."""
    import random

    lengths = [random.Random(i).randint(5, 40) for i in range(1000)]
    batch = 16

    def order(seed: int, epoch: int) -> list[int]:
        sampler = EpochShuffle(len(lengths), seed, lengths=lengths, batch_size=batch)
        sampler.set_epoch(epoch)
        return [index for index, _, _ in sampler]

    first = order(3, 0)
    assert sorted(first) == list(range(1000))
    assert first == order(3, 0) and first != order(3, 1) and first != order(4, 0)
    batches = [first[k:k + batch] for k in range(0, 1000 // batch * batch, batch)]
    spans = [max(lengths[i] for i in b) - min(lengths[i] for i in b) for b in batches]
    assert sum(spans) / len(spans) < 3  # random batches: about 30
    starts = [min(lengths[i] for i in b) for b in batches]
    assert starts != sorted(starts)  # the batches themselves come in a shuffled order


def test_length_grouped_loader_resumes_mid_epoch():
    lengths = [i % 13 for i in range(50)]

    def loader():
        return resumable_loader(Numbers(), seed=7, lengths=lengths, batch_size=8,
                                collate_fn=lambda items: [it["index"] for it in items])

    whole = _resumes_mid_epoch(loader, 0)
    assert sorted(i for batch in whole for i in batch) == list(range(50))


def test_photos_and_lengths_are_not_grouped_together():
    with pytest.raises(ValueError, match=r"group_by_photo, data\.group_by_length"):
        EpochShuffle(4, 0, groups=[0, 0, 1, 1], lengths=[1, 2, 3, 4])
