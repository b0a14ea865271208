"""Several processes, one cache: two processes that start together on a missing shapes cache
(as DDP ranks do: each builds its data module before any process group exists) build the
pictures and train the tokenizer once; the other waits and reads what the first wrote.

Each child counts the calls to the two builders (``vitbert.shapes.data.generate``, once per
split, and ``tokenizer.train_wordpiece``) and prints the counts; both start from a shared gate
file so they really race. Without the lock both children build (measured: 6 calls to generate,
not 3).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

CHILD = """
import json, sys, time
from pathlib import Path
from vitbert.data import tokenizer
from vitbert.data.datamodule import CaptionDataModule
from vitbert.shapes import ShapesSource
from vitbert.shapes import data as shapes

counts = {"generate": 0, "train_wordpiece": 0}
def counted(name, fn):
    def call(*args, **kwargs):
        counts[name] += 1
        return fn(*args, **kwargs)
    return call
shapes.generate = counted("generate", shapes.generate)
tokenizer.train_wordpiece = counted("train_wordpiece", tokenizer.train_wordpiece)

root, gate = sys.argv[1], Path(sys.argv[2])
while not gate.exists():
    time.sleep(0.01)
source = ShapesSource(root=root, num_train=512, num_val=64, num_test=64)
dm = CaptionDataModule(source=source, num_workers=0)
vocab = dm.num_tokens  # builds the pictures, then the tokenizer
print(json.dumps({**counts, "vocab": vocab}))
"""


def test_two_processes_build_the_cache_and_tokenizer_once(tmp_path):
    gate, root = tmp_path / "go", tmp_path / "shapes"
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "OMP_NUM_THREADS": "1"}
    children = [subprocess.Popen([sys.executable, "-c", CHILD, str(root), str(gate)], env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for _ in range(2)]
    time.sleep(1.0)  # both are importing; the gate lets them go together
    gate.touch()
    results = []
    for child in children:
        out, err = child.communicate(timeout=300)
        assert child.returncode == 0, err[-2000:]
        results.append(json.loads(out.strip().splitlines()[-1]))

    assert sum(r["generate"] for r in results) == 3  # train, val, test: one build
    assert sum(r["train_wordpiece"] for r in results) == 1
    assert results[0]["vocab"] == results[1]["vocab"]  # both read the same tokenizer
