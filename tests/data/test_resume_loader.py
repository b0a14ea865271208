"""The resumable training loader on its own: a loader rebuilt from a mid-epoch state hands out
exactly the batches (indices and mask keys) the uninterrupted one would have, also after a second
interruption in the same epoch and from a state saved at an epoch's end."""

from __future__ import annotations

from torch.utils.data import Dataset

from vitbert.data.resume import MASK_KEY, resumable_loader


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
