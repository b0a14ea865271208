"""`prepare_data.py shards --from` on every layout of `layout_copies` (issue 54): the photos the
folder source caches are the ones streamed, in the same splits, with the same captions; missing
photos are named in skipped.json; photos the split leaves out are counted, not written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import load_script
from layout_copies import WRITERS, write
from litdata import StreamingDataset

from vitbert.data.cache import SPLITS


@pytest.mark.parametrize("kind", list(WRITERS))
def test_shards_from_every_layout(tmp_path, kind, capsys):
    copy = write(kind, tmp_path / kind)
    out = tmp_path / "shards"
    summary = load_script("prepare_data").main([
        "shards", "--from", str(copy.root), "--out", str(out), "--workers", "0",
        "--min-frequency", "1", "--max-bad-fraction", "0.5"])
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["format"] == copy.fmt
    for split in SPLITS:
        expected = {f: caps for f, (s, caps) in copy.photos.items() if s == split}
        samples = StreamingDataset(str(out / split)) if (out / split).exists() else []
        streamed = {s["key"]: s["captions"].split("\n") for s in samples}
        assert streamed == expected, split
        assert summary["splits"][split] == len(expected)
    skipped = json.loads((out / "skipped.json").read_text())["photos"]
    assert sorted(s["key"] for s in skipped) == sorted(copy.missing)
    assert {s["why"] for s in skipped} == {"missing file"}
    assert summary["unlisted"] == len(copy.unlisted)
    assert Path(summary["settings"]["source"]).parent.is_relative_to(copy.root.resolve())
