"""The fractal data module: the cached set and the one rendered on the fly are the same pixels,
and the held-out instances are not the training ones."""

import torch

from vitbert.pretraining.datamodule import FractalDataModule

COMMON = {"num_classes": 3, "train_instances": 2, "val_instances": 2, "image_size": 16,
          "prepare_workers": 0, "num_workers": 0, "random_crop_scale": 1.0}


def ready(tmp_path, **settings) -> FractalDataModule:
    data = FractalDataModule(root=str(tmp_path), **COMMON, **settings)
    data.prepare_data()
    data.setup("fit")
    return data


def test_rendered_on_the_fly_equals_the_cached_set(tmp_path):
    cached, on_the_fly = ready(tmp_path), ready(tmp_path, cache=False)
    assert cached.path.suffix == ".npy" and on_the_fly.path.suffix == ".npz"
    for a, b in ((cached.train_set, on_the_fly.train_set), (cached.val_set, on_the_fly.val_set)):
        assert len(a) == len(b) == 6
        for i in range(len(a)):
            (image, label), (again, same_label) = a[i], b[i]
            assert image.shape == (3, 16, 16) and image.dtype == torch.uint8
            assert label == same_label == i // 2
            assert torch.equal(image, again)


def test_held_out_instances_are_new_renderings(tmp_path):
    data = ready(tmp_path)
    train = [data.train_set[i][0] for i in range(len(data.train_set))]
    for image, _ in (data.val_set[i] for i in range(len(data.val_set))):
        assert not any(torch.equal(image, seen) for seen in train)


def test_a_finished_set_is_read_not_rendered_again(tmp_path):
    first = ready(tmp_path)
    stamp = first.path.stat().st_mtime_ns
    ready(tmp_path)
    assert first.path.stat().st_mtime_ns == stamp
    other = ready(tmp_path, seed=1)  # another setting that changes the pixels: a file of its own
    assert other.path != first.path
