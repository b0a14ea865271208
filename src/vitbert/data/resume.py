"""A training loader that can stop mid-epoch and carry on exactly where it stopped.

Exact resume needs three things from the data side, and a plain ``DataLoader(shuffle=True)`` has
none of them:

* **the order**: :class:`EpochShuffle` draws the epoch's permutation from ``(seed, epoch)`` alone
  (like ``DistributedSampler``), so a restarted process rebuilds the very same order;
* **the position**: :class:`ResumableLoader` counts the batches it handed out this epoch and
  exposes them through ``state_dict`` / ``load_state_dict``, which Lightning saves into the
  checkpoint and restores before training goes on (``trainer.fit(ckpt_path=...)``); the sampler
  then starts at that batch instead of re-reading the epoch;
* **the masks**: every index the sampler yields carries its ``mask_key`` ``(seed, epoch)``, which
  :class:`~vitbert.data.masking.MLMCollator` seeds that example's mask with, so a mask depends on
  (seed, epoch, example) only, not on a worker's RNG or on which examples share its batch.

Lightning fetches without prefetching when the loader has a length, so the count saved at a
batch's end is exactly the number of batches trained on. Under DDP Lightning wraps the sampler
in a ``DistributedSamplerWrapper``, which forwards ``set_epoch``; order and masks stay exact,
and the skip is applied to each process's own shard. An order grouped by photo
(``EpochShuffle(groups=...)``) is laid out for that wrapper's round-robin deal, so each process
still meets a photo's captions together.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, Sampler

MASK_KEY = "mask_key"  # item field: (shuffle seed, epoch), read by MLMCollator


class EpochShuffle(Sampler[tuple[int, int, int]]):
    """A random order that is a function of ``(seed, epoch)`` alone.

    Yields ``(index, seed, epoch)`` so the dataset (:class:`EpochTagged`) can hand the collator
    the key its masks are drawn from.

    With ``groups`` ((size,) a group id per index, e.g. the photo of each caption) the *groups*
    are shuffled and each group's indices come out consecutively, in dataset order: a batch of
    Flickr30k's captions then holds about B / 5 photos, which the collator stacks once each and
    the model runs its image tower on once each (``MLMCollator``, ``VitBert``'s image_index).
    With ``lengths`` ((size,) e.g. each caption's words) and ``batch_size`` each batch holds
    captions of about one length (:func:`by_length`): a batch is padded to its longest caption,
    and random batches of Flickr captions are padded to twice their mean length. Every index
    still comes once per epoch. Under DDP see :meth:`__iter__`.
    """

    def __init__(self, size: int, seed: int, groups: Sequence[int] | None = None,
                 lengths: Sequence[int] | None = None, batch_size: int = 1) -> None:
        if groups is not None and lengths is not None:
            raise ValueError("keep a photo's captions together or group captions by length, "
                             "not both (data.group_by_photo, data.group_by_length)")
        self.size, self.seed = size, seed
        self.lengths, self.batch_size = lengths, batch_size
        self.epoch = 0
        self.groups: list[list[int]] | None = None  # the indices of each group, in dataset order
        if groups is not None:
            if len(groups) != size:
                raise ValueError(f"groups has {len(groups)} entries for {size} indices")
            members: dict[int, list[int]] = {}
            for index, group in enumerate(groups):
                members.setdefault(int(group), []).append(index)
            self.groups = list(members.values())

    def set_epoch(self, epoch: int) -> None:
        """Called by Lightning at the start of every epoch."""
        self.epoch = epoch

    def __iter__(self) -> Iterator[tuple[int, int, int]]:
        """The epoch's order. Grouped and under DDP (Lightning's ``DistributedSamplerWrapper``
        deals this order out round-robin: rank r takes positions r, r + W, ...), the grouped
        order is cut into W consecutive shares and interleaved, so that the deal hands each rank
        one share whole and its batches keep a photo's captions together (:func:`interleave`).
        (With ``Trainer(use_distributed_sampler=False)`` every rank reads this whole interleaved
        order: each caption still comes once per rank, but a photo's captions lie W apart.)"""
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        if self.groups is None:
            order = torch.randperm(self.size, generator=generator).tolist()
            if self.lengths is not None:
                order = by_length(order, self.lengths, self.batch_size * _world_size(),
                                  generator)
        else:
            shuffled = torch.randperm(len(self.groups), generator=generator).tolist()
            order = interleave([i for g in shuffled for i in self.groups[g]], _world_size())
        for index in order:
            yield index, self.seed, self.epoch

    def __len__(self) -> int:
        return self.size


def by_length(order: list[int], lengths: Sequence[int], batch: int,
              generator: torch.Generator, window: int = 50) -> list[int]:
    """A random ``order`` regrouped into batches of about one length (Hugging Face's
    ``group_by_length``): each window of ``window`` batches is sorted by length and cut into
    batches of ``batch`` indices, every full batch of the epoch is shuffled, and the indices of
    the windows' partial batches come last, so the loader's batches stay aligned with them.
    Under DDP ``batch`` is the batch size times the processes: the round-robin deal gives each
    process its share of every one."""
    full: list[list[int]] = []
    rest: list[int] = []
    for start in range(0, len(order), batch * window):
        chunk = sorted(order[start:start + batch * window], key=lambda i: lengths[i])
        for first in range(0, len(chunk), batch):
            piece = chunk[first:first + batch]
            if len(piece) == batch:
                full.append(piece)
            else:
                rest.extend(piece)
    shuffled = torch.randperm(len(full), generator=generator).tolist()
    return [i for b in shuffled for i in full[b]] + rest


def _world_size() -> int:
    """Processes that share the epoch (DDP), 1 outside torch.distributed."""
    distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
    return torch.distributed.get_world_size() if distributed else 1


def interleave(order: list[int], ranks: int) -> list[int]:
    """``order`` rearranged so that a round-robin deal to ``ranks`` processes (position p to
    rank p % ranks, as ``DistributedSampler(shuffle=False)`` deals, padding the deal with the
    first ``pad`` positions again) gives rank r the r-th consecutive share of ``order``.

    With n = len(order), m = ceil(n / ranks) and pad = m·ranks - n, the first ranks - pad shares
    hold m entries and the others m - 1 (the deal gives those one padding entry each, a repeat,
    as DistributedSampler does for any order).
    """
    n = len(order)
    if ranks <= 1 or n == 0:
        return list(order)
    m = -(-n // ranks)  # ceil
    full = ranks - (m * ranks - n)  # shares of m entries; the rest hold m - 1
    starts = [r * m - max(0, r - full) for r in range(ranks + 1)]
    shares = [order[starts[r] : starts[r + 1]] for r in range(ranks)]
    return [share[k] for k in range(m) for share in shares if k < len(share)]


class _SkipFirst(Sampler):
    """``sampler`` without its first ``n`` items (indices only: no example is loaded)."""

    def __init__(self, sampler: Sampler, n: int) -> None:
        self.sampler, self.n = sampler, n

    def __iter__(self) -> Iterator[Any]:
        return itertools.islice(iter(self.sampler), self.n, None)

    def __len__(self) -> int:
        return len(self.sampler)  # type: ignore[arg-type]


class EpochTagged(Dataset):
    """``dataset[index]`` plus its ``mask_key``, for the ``(index, seed, epoch)`` its ``order``
    (an :class:`EpochShuffle`) yields.

    It keeps the order for the loader: Lightning rebuilds a loader under DDP with its own sampler
    around ours, and hands the rebuilt one this same dataset. Worker processes get it without
    the order, which they never read."""

    def __init__(self, dataset: Dataset, order: EpochShuffle | None = None) -> None:
        self.dataset = dataset
        self.order = order

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def __getitem__(self, key: tuple[int, int, int]) -> dict[str, Any]:
        index, seed, epoch = key
        return {**self.dataset[index], MASK_KEY: (seed, epoch)}

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "order": None}


class ResumableLoader(DataLoader):
    """A ``DataLoader`` over an :class:`EpochShuffle` that remembers its position in the epoch.

    ``state_dict()`` is ``{"seed", "epoch", "batches"}``: the batches handed out in the current
    epoch, counting any skipped on a resume, so a second kill in the same epoch resumes right too.
    On ``load_state_dict`` the next iteration skips that many batches' indices (of this process,
    after any DDP sharding) without loading their examples.
    """

    _batches = 0  # handed out in the current epoch (a checkpoint may come before the first)
    _skip = 0  # to skip at the next iteration, set by load_state_dict

    def state_dict(self) -> dict[str, int]:
        sampler = self._epoch_shuffle
        return {"seed": sampler.seed, "epoch": sampler.epoch, "batches": self._batches}

    def load_state_dict(self, state: dict[str, int]) -> None:
        sampler = self._epoch_shuffle
        sampler.seed, sampler.epoch, batches = state["seed"], state["epoch"], state["batches"]
        if batches >= len(self):  # saved at an epoch's end: the next one starts afresh
            sampler.epoch, batches = sampler.epoch + 1, 0
        self._skip = self._batches = batches

    def __iter__(self) -> Iterator[Any]:
        # A generator: nothing below runs before the first batch is asked for, which Lightning
        # does after set_epoch (it calls iter() before).
        skip, self._skip = self._skip, 0
        self._batches = skip
        # The skip applies to this process's own indices, after any DDP sharding.
        batch_sampler = self.batch_sampler
        own_indices = batch_sampler.sampler  # type: ignore[union-attr]
        if skip:
            batch_sampler.sampler = _SkipFirst(own_indices, skip * self.batch_size)  # type: ignore
        try:
            for batch in super().__iter__():
                self._batches += 1
                yield batch
        finally:
            batch_sampler.sampler = own_indices  # type: ignore[union-attr]

    @property
    def _epoch_shuffle(self) -> EpochShuffle:
        sampler = self.sampler
        if not isinstance(sampler, EpochShuffle):  # DDP: Lightning's sampler wraps ours
            sampler = getattr(self.dataset, "order", None)
        if not isinstance(sampler, EpochShuffle):
            raise TypeError("ResumableLoader needs an EpochShuffle sampler")
        return sampler


def resumable_loader(dataset: Dataset, seed: int | None = None,
                     groups: Sequence[int] | None = None, lengths: Sequence[int] | None = None,
                     **loader_args: Any) -> DataLoader:
    """A shuffling training loader that resumes exactly; ``loader_args`` go to ``DataLoader``
    (not ``shuffle`` or ``sampler``). ``seed`` defaults to a draw from torch's global RNG, so
    ``seed_everything`` sets the order; the checkpoint stores it. ``groups``: keep each group's
    indices together; ``lengths``: batches of about one length (:class:`EpochShuffle`)."""
    if seed is None:
        seed = int(torch.randint(0, 2**62, ()).item())
    sampler = EpochShuffle(len(dataset), seed, groups,  # type: ignore[arg-type]
                           lengths, loader_args.get("batch_size", 1))
    # The loader's own generator: creating an iterator then draws no number from the global RNG,
    # which the model's dropout reads and the checkpoint restores (vitbert.lit.resume).
    generator = torch.Generator().manual_seed(seed)
    return ResumableLoader(EpochTagged(dataset, sampler), sampler=sampler, generator=generator,
                           **loader_args)


def eval_loader(dataset: Dataset, **loader_args: Any) -> DataLoader:
    """A loader in dataset order with its own generator: starting it (a validation in the middle
    of an epoch) draws nothing from the global RNG, so the training that follows does not depend
    on whether the run was resumed in between."""
    return DataLoader(dataset, generator=torch.Generator(), **loader_args)
