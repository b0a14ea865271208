"""The demo page under test: its functions in-process, and scripts/demo.py running as a server.

Everything reads the session's tiny trained checkpoint (``trained``, tests/conftest.py). The server
is the real script in a subprocess, started once for the client and browser tests, with its own
TMPDIR (so every upload must land there) and an empty working folder (so nothing may land there).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

pytest.importorskip("gradio", reason="the demo extra is not installed: pip install -e '.[demo]'")

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "demo.py"
START_TIMEOUT_S = 240  # importing torch and gradio on a busy 2-core CPU


@pytest.fixture(scope="session")
def demo_fill_mask(trained):
    from vitbert import FillMask

    return FillMask.from_checkpoint(trained.ckpt, device="cpu")


@dataclass
class Server:
    url: str
    tmp: Path  # the server's TMPDIR: its upload folder is made inside
    cwd: Path  # its working folder, empty at start
    process: subprocess.Popen
    log: Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def demo_server(trained, tmp_path_factory):
    yield from start_server(trained.ckpt, tmp_path_factory.mktemp("demo_server"))


def start_server(ckpt: Path, root: Path, *extra: str):
    """scripts/demo.py serving ``ckpt`` (and ``extra`` arguments) until the generator resumes:
    yields its :class:`Server`, then stops it and checks its upload folder went with it."""
    import vitbert

    tmp, cwd = root / "tmp", root / "cwd"
    tmp.mkdir()
    cwd.mkdir()
    port = free_port()
    env = {**os.environ, "TMPDIR": str(tmp), "PYTHONPATH": str(Path(vitbert.__file__).parents[1]),
           "GRADIO_ANALYTICS_ENABLED": "False"}
    env.pop("GRADIO_TEMP_DIR", None)
    log = root / "server.log"
    with open(log, "w") as out:
        process = subprocess.Popen(
            [sys.executable, str(SCRIPT), "--ckpt", str(ckpt), "--port", str(port),
             "--device", "cpu", *extra], cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        if process.poll() is not None:
            pytest.fail(f"scripts/demo.py exited with {process.returncode}:\n{log.read_text()}")
        try:
            urllib.request.urlopen(url, timeout=5).close()
            break
        except OSError:
            if time.monotonic() > deadline:
                process.kill()
                pytest.fail(f"scripts/demo.py not up after {START_TIMEOUT_S} s:\n"
                            f"{log.read_text()}")
            time.sleep(1)
    yield Server(url, tmp, cwd, process, log)
    process.terminate()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        pytest.fail("scripts/demo.py did not stop within 30 s of SIGTERM")
    assert not list(tmp.glob("vitbert-demo-*")), "the upload folder outlived the server"


# "Find the photo": a model that can search, and a folder to search.
COLOURS = {"red": (220, 30, 30), "green": (30, 200, 30), "blue": (30, 30, 220)}


@pytest.fixture(scope="module")
def itc_export(trained, tmp_path_factory):
    """The session's model with contrastive heads added (fresh weights: the tests compare the
    page with the Retriever, not with a truth), exported."""
    import torch

    from vitbert.io import TOKENIZER_FILE, load_model, write_exported
    from vitbert.models import VitBert

    model, _ = load_model(trained.exported)
    config = model.config
    config.itc_dim = 16
    torch.manual_seed(1)
    net = VitBert(config)
    net.load_state_dict(model.state_dict(), strict=False)  # all but the new heads
    folder = tmp_path_factory.mktemp("itc") / "exported"
    tokenizer = (trained.exported / TOKENIZER_FILE).read_text()
    return write_exported(net, folder, tokenizer)


@pytest.fixture(scope="module")
def photo_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("search") / "photos"
    folder.mkdir()
    for name, rgb in COLOURS.items():
        Image.fromarray(np.full((48, 64, 3), rgb, np.uint8)).save(folder / f"{name}.png")
    (folder / "broken.jpg").write_bytes(b"no photo")
    return folder


@pytest.fixture(scope="module")
def search_server(itc_export, photo_folder, tmp_path_factory):
    yield from start_server(itc_export, tmp_path_factory.mktemp("search_server"), "--images",
                            str(photo_folder))
