"""atomic_write / atomic_open: the target is the old file or the whole new one, never a part."""

from __future__ import annotations

import pytest

from vitbert.data.files import atomic_open, atomic_write


def test_atomic_write_round_trip_text_and_bytes(tmp_path):
    p = tmp_path / "sub" / "a.json"
    assert atomic_write(p, "héllo") == p
    assert p.read_text(encoding="utf-8") == "héllo"
    atomic_write(p, b"\x00\x01")
    assert p.read_bytes() == b"\x00\x01"
    assert sorted(x.name for x in p.parent.iterdir()) == ["a.json"]  # no temporary left


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    p = tmp_path / "out.jsonl"
    p.write_text("old\n")
    with pytest.raises(RuntimeError), atomic_open(p) as fh:
        fh.write("half of the new")
        assert p.read_text() == "old\n"  # nothing visible while writing
        raise RuntimeError("interrupted")
    assert p.read_text() == "old\n"
    assert [x.name for x in tmp_path.iterdir()] == ["out.jsonl"]


def test_atomic_open_refuses_to_append(tmp_path):
    with pytest.raises(ValueError, match="mode"), atomic_open(tmp_path / "x", "a"):
        pass
