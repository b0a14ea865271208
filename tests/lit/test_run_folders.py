"""One folder per run: a second run, fine-tuned from the first, never touches the first's files.

Runs go through ``scripts/train.py``'s CLI with its default checkpoint settings (no
``--checkpoint.dirpath``), in a temporary working folder, as a user's would in the clone.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from helpers import TINY_MODEL
from tiny_run import tiny_shapes

from vitbert.cli import main
from vitbert.run.checkpoints import point_latest_at

LATEST_CKPT = Path("runs/latest/checkpoints/last.ckpt")


def fit(tmp: Path, *extra: str) -> None:
    main(["fit", *TINY_MODEL, *tiny_shapes(tmp / "shapes", num_train=128), "--trainer.max_steps",
          "2", "--trainer.limit_val_batches", "1", "--trainer.enable_progress_bar", "false",
          "--examples.num_examples", "0", "--captions.num_images", "0",
          *extra])


def digests(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def newest_line(caplog) -> str:
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("newest")]
    caplog.clear()
    return lines[-1]


def test_a_fine_tune_from_the_first_run_leaves_it_byte_identical(tmp_path, monkeypatch, caplog):
    monkeypatch.chdir(tmp_path)
    fit(tmp_path)
    first = tmp_path / "runs" / "version_0"
    assert (first / "checkpoints" / "last.ckpt").is_file()
    assert (first / "config.yaml").is_file() and (first / "metrics.csv").is_file()
    assert LATEST_CKPT.resolve() == (first / "checkpoints" / "last.ckpt").resolve()
    assert newest_line(caplog) == ("newest checkpoint: runs/version_0/checkpoints/last.ckpt "
                                   "(also runs/latest/checkpoints/last.ckpt)")
    before = digests(first)

    fit(tmp_path, "--model.init_from", str(LATEST_CKPT))  # the README's fine-tune, as written
    second = tmp_path / "runs" / "version_1"
    assert digests(first) == before  # not one file of the first run changed, none added
    assert (second / "checkpoints" / "last.ckpt").is_file()
    assert LATEST_CKPT.resolve() == (second / "checkpoints" / "last.ckpt").resolve()
    assert newest_line(caplog).startswith("newest checkpoint: runs/version_1/checkpoints/last.ckpt")
    assert not (tmp_path / "checkpoints").exists()  # the old shared folder is gone


def test_a_chosen_checkpoint_folder_gets_no_latest_link(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    fit(tmp_path, "--checkpoint.dirpath", "mine")
    assert (tmp_path / "mine" / "last.ckpt").is_file()
    assert not (tmp_path / "runs" / "latest").exists()


def test_latest_is_replaced_in_one_step_and_never_its_target(tmp_path):
    for name in ("version_0", "version_1"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "kept.txt").write_text(name)
    point_latest_at(tmp_path / "version_0")
    link = point_latest_at(tmp_path / "version_1")
    assert link.is_symlink() and link.readlink() == Path("version_1")  # relative: the folder moves
    assert (tmp_path / "version_0" / "kept.txt").read_text() == "version_0"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest", "version_0", "version_1"]


@pytest.mark.parametrize("blocker", ["folder", "file"])
def test_a_latest_that_is_not_a_link_is_the_users_and_stays(tmp_path, blocker):
    (tmp_path / "version_0").mkdir()
    latest = tmp_path / "latest"
    if blocker == "folder":
        latest.mkdir()
        (latest / "notes.txt").write_text("mine")
    else:
        latest.write_text("mine")
    with pytest.raises(FileExistsError, match="not a link made by a run"):
        point_latest_at(tmp_path / "version_0")
    assert (latest / "notes.txt" if blocker == "folder" else latest).read_text() == "mine"
    assert not latest.is_symlink()
