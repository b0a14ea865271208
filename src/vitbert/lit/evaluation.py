"""Figures a callback computes over a split's pictures, beside the per-batch metrics.

Captions (here), retrieval (:mod:`vitbert.lit.retrieval`) and a data set's own evaluations
each need a whole split at once (every caption of a picture, every picture against every
caption), so they run when an epoch ends rather than per batch: at each
validation on a fixed sample of ``num_images`` pictures (never during the sanity check; in
``fit``, every ``every_n_epochs``-th epoch and the last), at test on every picture.
:class:`SplitEvaluation` owns that schedule; a subclass owns its figures. Each is off (0 images)
unless a config asks for it.

:class:`CaptionEvaluation` writes a caption for each image of the split (greedy, beam search, or
Mask-Predict: ``method``), scores them against *all* references of each image, and logs
``{stage}/bleu4`` and ``{stage}/cider``. The control, suffixed ``_text``, is the caption written
from no image at all. A model with contrastive heads that learnt to write also writes, per image,
``rerank_samples`` sampled captions beside it and keeps the one the reranker prefers
(:mod:`vitbert.decoding.rerank`), suffixed ``_reranked``. Under DDP each process writes the
captions of every ``world_size``-th image and they are gathered, so every process scores the
whole sample, and the work is shared. Left to right (greedy, beam) it runs only for a model that
learnt to write (a ``CaptionWriting`` objective); Mask-Predict reads any masked-language model.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import lightning as L
import numpy as np
import torch
from lightning.pytorch.trainer.states import TrainerFn

from vitbert.decoding import (
    CaptionTokens,
    Generated,
    beam_search,
    greedy,
    mask_predict,
    sample_and_rerank,
)
from vitbert.lit.metrics import CaptionMetrics


class SplitEvaluation(L.Callback):
    """Log ``{stage}/{prefix}{name}`` for each figure :meth:`figures` returns, at the end of each
    validation (``num_images`` pictures) and test (all of them); ``num_images`` 0 turns it off.
    In ``fit``, ``every_n_epochs`` > 1 skips the validations in between (the fit's last epoch is
    always measured): for figures that cost much of an epoch's time."""

    prefix = ""

    def __init__(self, num_images: int, every_n_epochs: int = 1) -> None:
        if every_n_epochs < 1:
            raise ValueError(f"every_n_epochs={every_n_epochs}: use 1 (every validation) or more")
        self.num_images = num_images
        self.every_n_epochs = every_n_epochs

    def figures(self, trainer: L.Trainer, pl_module: L.LightningModule, dataset: Any,
                limit: int | None) -> dict[str, float] | None:
        """The figures over ``dataset``'s first ``limit`` pictures (None: all), or None when this
        model has nothing to measure here."""
        raise NotImplementedError

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not trainer.sanity_checking and self.due(trainer):
            self._log(trainer, pl_module, "val", self.num_images)

    def due(self, trainer: L.Trainer) -> bool:
        """Whether this validation is measured: always outside ``fit``; in it, at the end of every
        ``every_n_epochs``-th epoch and at the fit's last validation (no other comes before
        ``max_epochs`` at the trainer's ``check_val_every_n_epoch``, or ``max_steps`` is
        reached)."""
        if trainer.state.fn != TrainerFn.FITTING:
            return True
        epochs = trainer.current_epoch + 1
        next_validation = epochs + (trainer.check_val_every_n_epoch or 1)
        last = ((trainer.max_epochs is not None and 0 < trainer.max_epochs < next_validation)
                or 0 < trainer.max_steps <= trainer.global_step)
        return last or epochs % self.every_n_epochs == 0

    def on_test_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._log(trainer, pl_module, "test", None)

    @torch.no_grad()
    def _log(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str,
             limit: int | None) -> None:
        datamodule = getattr(trainer, "datamodule", None)
        if not self.num_images or datamodule is None or pl_module.tokenizer is None:
            return
        dataset = datamodule.dataset(getattr(datamodule, f"{stage}_split", stage))
        figures = self.figures(trainer, pl_module, dataset, limit)
        if figures:
            # Every process holds the same figures (each reads the whole sample, or gathers
            # what the others wrote): averaging them changes nothing and tells Lightning so.
            pl_module.log_dict({f"{stage}/{self.prefix}{name}": value
                                for name, value in figures.items()}, sync_dist=True)


def images_and_references(dataset, limit: int | None = None, seed: int = 0):
    """(image rows, first caption index of each, all captions of each) of a caption dataset.

    A caption dataset has one item per caption; images are its distinct ``rows``. With ``limit``
    a fixed random sample of that many images (the same at every validation).
    """
    by_row: dict[int, list[int]] = {}
    for index, row in enumerate(dataset.rows.tolist()):
        by_row.setdefault(row, []).append(index)
    rows = list(by_row)
    if limit is not None and limit < len(rows):
        pick = np.random.default_rng(seed).choice(len(rows), size=limit, replace=False)
        rows = [rows[i] for i in sorted(pick)]
    firsts = [by_row[r][0] for r in rows]
    references = [[dataset.captions[i] for i in by_row[r]] for r in rows]
    return rows, firsts, references


Writer = Callable[..., list[Generated]]  # (net, tokens, images or None) → a caption per image


def caption_writer(method: str = "greedy", num_beams: int = 3) -> Writer:
    """How captions are written: ``greedy``, ``beam`` (the best of ``num_beams``) or
    ``mask-predict`` (:mod:`vitbert.decoding.generate`)."""
    if method == "beam":
        return lambda net, tokens, images: [found[0] for found in
                                            beam_search(net, tokens, images, num_beams)]
    return {"greedy": greedy, "mask-predict": mask_predict}[method]


class CaptionEvaluation(SplitEvaluation):
    """Captions written and scored at the end of each validation and test epoch (see module doc).

    Args:
        num_images: images sampled per validation (the test uses every image of its split);
            0 turns it off.
        batch_size: images captioned at once.
        rerank_samples: captions sampled per image beside the written one, for the reranked
            figures (a model with contrastive heads that learnt to write); 0 leaves them out.
        every_n_epochs: in ``fit``, written at every n-th epoch's validation and the last one
            (:class:`vitbert.lit.evaluation.SplitEvaluation`).
        method: ``greedy`` or ``beam`` (left to right: a model trained with ``CaptionWriting``),
            or ``mask-predict`` (any masked-language model).
        num_beams: beams of ``beam``.
    """

    def __init__(self, num_images: int = 0, batch_size: int = 100, rerank_samples: int = 15,
                 every_n_epochs: int = 1,
                 method: Literal["greedy", "beam", "mask-predict"] = "greedy",
                 num_beams: int = 3) -> None:
        super().__init__(num_images, every_n_epochs)
        if rerank_samples < 0 or num_beams < 1:
            raise ValueError(f"captions.rerank_samples {rerank_samples}, num_beams {num_beams}: "
                             f"use 0 or more samples (0: off) and 1 or more beams")
        self.batch_size = batch_size
        self.rerank_samples = rerank_samples
        self.method, self.num_beams = method, num_beams

    def figures(self, trainer, pl_module, dataset, limit: int | None) -> dict[str, float] | None:
        writes = getattr(pl_module, "writes_captions", False)
        if not writes and self.method != "mask-predict":
            return None
        return caption_figures(pl_module.net, pl_module.tokenizer, dataset, limit,
                               self.batch_size, (trainer.global_rank, trainer.world_size),
                               self.rerank_samples if writes else 0,
                               caption_writer(self.method, self.num_beams))


def write_captions(net, tokenizer, dataset, limit: int | None = None, batch_size: int = 100,
                   share: tuple[int, int] = (0, 1), rerank_samples: int = 0,
                   write: Writer = greedy
                   ) -> tuple[list[str], str, list[list[str]], list[str] | None]:
    """Captions of a split's images (a fixed sample of ``limit``) written by ``write``
    (:func:`caption_writer`), the one caption written from no image (the control: with no image
    every caption is the same sentence), each image's references, and with ``rerank_samples``
    (a model with contrastive heads) the reranked captions, else None. ``share`` is (rank, world
    size): with several processes (DDP) this one writes the captions of images ``rank``,
    ``rank + world size``, … and every process returns them all, in order."""
    rank, world_size = share
    tokens = CaptionTokens.from_tokenizer(tokenizer)
    device = next(net.parameters()).device
    _, firsts, references = images_and_references(dataset, limit)
    mine = firsts[rank::world_size]
    rerank = rerank_samples > 0 and net.has_itc
    was_training = net.training
    net.eval()
    captions, reranked = [], []

    def text(pieces: list[int]) -> str:
        return tokenizer.decode(pieces, skip_special_tokens=True)

    for start in range(0, len(mine), batch_size):
        pixels = torch.stack([dataset[i]["image"] for i in mine[start:start + batch_size]])
        pixels = pixels.to(device)
        written = write(net, tokens, pixels)
        captions += [text(g.token_ids) for g in written]
        if rerank:
            found = sample_and_rerank(net, tokens, pixels, rerank_samples, seed=start,
                                      greedy_captions=written)
            reranked += [text(best.token_ids) for best, *_ in found]
    text_only = text(write(net, tokens, None)[0].token_ids)
    net.train(was_training)
    return (gather_in_order(captions, world_size), text_only, references,
            gather_in_order(reranked, world_size) if rerank else None)


def gather_in_order(mine: list, world_size: int) -> list:
    """Every process's share of a list dealt round-robin (process r holds items r, r + W, …),
    put back in the original order on every process."""
    if world_size == 1:
        return mine
    shares: list[list] = [[] for _ in range(world_size)]
    torch.distributed.all_gather_object(shares, mine)
    return [share[i] for i in range(len(shares[0])) for share in shares if i < len(share)]


def caption_figures(net, tokenizer, dataset, limit: int | None = None, batch_size: int = 100,
                    share: tuple[int, int] = (0, 1), rerank_samples: int = 0,
                    write: Writer = greedy) -> dict[str, float]:
    """BLEU-4 and CIDEr-D of the captions ``write`` writes, with the image and without, and of
    the reranked ones where the model can rerank (``share``: the images shared among DDP
    processes; :func:`write_captions`)."""
    captions, text_only, references, reranked = write_captions(
        net, tokenizer, dataset, limit, batch_size, share, rerank_samples, write)
    sets = [("", captions), ("_text", [text_only] * len(captions))]
    if reranked is not None:
        sets.append(("_reranked", reranked))
    figures = {}
    for suffix, written in sets:
        metrics = CaptionMetrics()
        metrics.update(written, references)
        figures |= {f"{name}{suffix}": value for name, value in metrics.compute().items()}
    return figures
