"""The fractal classes as a Lightning data module: rendered once into a cached file, or on the fly.

Small images (``cache: true``, the CPU recipe): ``prepare_data`` searches the classes and renders
every instance in parallel worker processes, with a progress bar, into one uint8 array
``(classes, instances, S, S, 3)`` under ``root``; the file's name holds every setting that changes
its pixels, so another size or seed gets a file of its own and a finished file is never rendered
again. Large ones (``cache: false``, FractalDB-1k at 224², 150 GB as pixels): ``prepare_data``
searches the classes only, and the data loader's workers render each instance when it is read,
the same pixels every time (:func:`~vitbert.pretraining.fractals.render` is a function of its
seed).

Instances ``0 … train_instances − 1`` of each class train; the next ``val_instances`` are held
out, so validation accuracy says how well the tower tells a *system* apart on renderings it
never saw (other parameter weights, poses, zooms and colours).
"""

from __future__ import annotations

import os
from functools import partial
from multiprocessing import get_context
from pathlib import Path

import lightning as L
import numpy as np
import torch
from lightning.pytorch.utilities import rank_zero_info
from torch.utils.data import DataLoader, Dataset
from torchvision.transforms import v2
from tqdm.auto import tqdm

from vitbert.data.cache import DataError
from vitbert.data.files import atomic_open
from vitbert.pretraining.fractals import IFS, find_class, render


def render_class(class_index: int, seed: int, image_size: int, instances: int, min_fill: float
                 ) -> np.ndarray:
    """Every instance of class ``class_index``: (instances, S, S, 3) uint8."""
    ifs = find_class(seed, class_index, min_fill)
    return np.stack([render(ifs, image_size, (seed, class_index, instance))
                     for instance in range(instances)])


class FractalImages(Dataset):
    """``instances`` renderings of each of ``num_classes`` classes as ((3, S, S) uint8, class)
    pairs, class-major, with an optional augmentation on the uint8 tensor; a subclass says where
    the pixels of (class, instance) come from."""

    def __init__(self, num_classes: int, instances: int,
                 transform: v2.Transform | None = None) -> None:
        self.num_classes, self.instances, self.transform = num_classes, instances, transform

    def pixels(self, label: int, instance: int) -> np.ndarray:
        """(S, S, 3) uint8, writable."""
        raise NotImplementedError

    def __len__(self) -> int:
        return self.num_classes * self.instances

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        label, instance = divmod(index, self.instances)
        image = torch.from_numpy(self.pixels(label, instance)).permute(2, 0, 1)  # (3, S, S)
        return (self.transform(image) if self.transform else image), label


class CachedFractals(FractalImages):
    """The rendered set ``images`` (C, I, S, S, 3), read from its (memory-mapped) file."""

    def __init__(self, images: np.ndarray, transform: v2.Transform | None = None) -> None:
        super().__init__(images.shape[0], images.shape[1], transform)
        self.images = images

    def pixels(self, label: int, instance: int) -> np.ndarray:
        return np.array(self.images[label, instance])  # a copy: the mapped file is read-only


class RenderedFractals(FractalImages):
    """Instances ``first … first + instances − 1`` of each of ``classes``, rendered when read."""

    def __init__(self, classes: list[IFS], image_size: int, seed: int, first: int, instances: int,
                 transform: v2.Transform | None = None) -> None:
        super().__init__(len(classes), instances, transform)
        self.classes, self.image_size, self.seed, self.first = classes, image_size, seed, first

    def pixels(self, label: int, instance: int) -> np.ndarray:
        return render(self.classes[label], self.image_size,
                      (self.seed, label, self.first + instance))


class FractalDataModule(L.LightningDataModule):
    """FractalDB-style classes, rendered at the tower's image size.

    Args:
        root: folder of the rendered files (git-ignored ``data/``).
        num_classes: systems to tell apart (FractalDB-1k: 1,000).
        train_instances: renderings of each class to train on (OFDB: one can be enough with
            augmentation; more costs only rendering time).
        val_instances: further renderings of each class held out for validation.
        image_size: side in pixels; linked from the model's tower.
        seed: the class search and every rendering derive from it.
        min_fill: FractalDB's filling-rate threshold (0.2).
        random_crop_scale: training crops keep at least this share of the picture, then a
            mirror at random (no caption here to falsify); 1 = no augmentation.
        cache: render every instance once into a file (small images); false: search the classes
            once and render each instance in the data loader's workers when it is read.
        batch_size: images a step.
        num_workers: data-loader worker processes.
        prepare_workers: processes that render the set once (0 = in this process).
    """

    def __init__(self, root: str = "data/fractals", num_classes: int = 1000,
                 train_instances: int = 16, val_instances: int = 2, image_size: int = 32,
                 seed: int = 0, min_fill: float = 0.2, random_crop_scale: float = 0.5,
                 batch_size: int = 256, num_workers: int = 1, prepare_workers: int = 2,
                 cache: bool = True) -> None:
        super().__init__()
        if num_classes < 2 or train_instances < 1 or val_instances < 0:
            raise DataError(f"data.num_classes={num_classes}, train_instances={train_instances}, "
                             f"val_instances={val_instances}: need 2 or more classes, 1 or more "
                             f"training instances and 0 or more held-out ones")
        self.save_hyperparameters()
        self.train_set: Dataset | None = None
        self.val_set: Dataset | None = None

    @property
    def num_classes(self) -> int:
        """The classifier's width (linked to ``model.num_classes``)."""
        return self.hparams.num_classes

    @property
    def path(self) -> Path:
        """The rendered set (or, uncached, the classes); its name holds every setting that
        changes its pixels."""
        hp = self.hparams
        if not hp.cache:
            return Path(hp.root) / (f"fractal-classes-seed{hp.seed}-{hp.num_classes}"
                                    f"-fill{hp.min_fill:g}.npz")
        instances = hp.train_instances + hp.val_instances
        return Path(hp.root) / (f"fractals-seed{hp.seed}-{hp.num_classes}x{instances}"
                                f"-{hp.image_size}px-fill{hp.min_fill:g}.npy")

    def prepare_data(self) -> None:
        if self.path.is_file():
            return
        hp = self.hparams
        job = (partial(find_class, hp.seed, min_fill=hp.min_fill) if not hp.cache else
               partial(render_class, seed=hp.seed, image_size=hp.image_size,
                       instances=hp.train_instances + hp.val_instances, min_fill=hp.min_fill))
        bar = partial(tqdm, total=hp.num_classes, unit="class",
                      desc="fractal classes" + (f" {hp.image_size}px" if hp.cache else ""))
        if hp.prepare_workers > 0:
            with get_context("spawn").Pool(hp.prepare_workers) as pool:
                made = list(bar(pool.imap(job, range(hp.num_classes), chunksize=8)))
        else:
            made = [job(k) for k in bar(range(hp.num_classes))]
        with atomic_open(self.path, "wb") as file:  # a reader never finds half a file
            if hp.cache:
                np.save(file, np.stack(made))
            else:  # one (maps, probabilities) pair per class
                np.savez(file, **{f"{k}_{part}": getattr(ifs, part)
                                  for k, ifs in enumerate(made)
                                  for part in ("maps", "probabilities")})
        rank_zero_info(f"fractals: {self.path} ({hp.num_classes} classes, "
                       f"{os.path.getsize(self.path) / 2**20:.0f} MiB)")

    def setup(self, stage: str) -> None:
        hp = self.hparams
        crop = None
        if hp.random_crop_scale < 1:
            crop = v2.Compose([v2.RandomResizedCrop(hp.image_size, scale=(hp.random_crop_scale, 1),
                                                    antialias=True),
                               v2.RandomHorizontalFlip()])
        if not hp.cache:
            with np.load(self.path) as stored:
                classes = [IFS(stored[f"{k}_maps"], stored[f"{k}_probabilities"])
                           for k in range(hp.num_classes)]
            render_set = partial(RenderedFractals, classes, hp.image_size, hp.seed)
            self.train_set = render_set(0, hp.train_instances, crop)
            self.val_set = render_set(hp.train_instances, hp.val_instances)
            return
        images = np.load(self.path, mmap_mode="r")
        self.train_set = CachedFractals(images[:, :hp.train_instances], crop)
        self.val_set = CachedFractals(images[:, hp.train_instances:])

    def _loader(self, dataset: Dataset, shuffle: bool) -> DataLoader:
        return DataLoader(dataset, batch_size=self.hparams.batch_size, shuffle=shuffle,
                          num_workers=self.hparams.num_workers, drop_last=shuffle,
                          persistent_workers=self.hparams.num_workers > 0)

    def train_dataloader(self) -> DataLoader:
        return self._loader(self.train_set, shuffle=True)

    def val_dataloader(self) -> DataLoader | list:
        if not self.hparams.val_instances:
            return []
        return self._loader(self.val_set, shuffle=False)
