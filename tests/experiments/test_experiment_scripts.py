"""Seconds-long smoke runs of each entry point: tiny data, one epoch, outputs well-formed."""

import json
import runpy
import sys
from pathlib import Path

import matplotlib.image
import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts" / "experiments"
TINY = ["--epochs", "1", "--seeds", "1", "--threads", "1", "--train-size", "96",
        "--test-size", "64"]


def _run(name: str, out: Path, monkeypatch, capsys) -> tuple[dict, str]:
    monkeypatch.setattr(sys, "argv", [f"{name}.py", *TINY, "--out", str(out)])
    runpy.run_path(str(SCRIPTS / f"{name}.py"), run_name="__main__")
    printed = capsys.readouterr().out
    return json.loads((out / f"{name}.json").read_text()), printed


def _assert_png(path: Path) -> None:
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    image = matplotlib.image.imread(path)
    assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100


def _assert_rows(rows: list[dict], n: int) -> None:
    assert len(rows) == n
    for row in rows:
        assert row["seeds"] == [0] and len(row["test_acc"]) == 1
        assert 0.0 <= row["mean"] <= 1.0 and row["mean"] == row["test_acc"][0]


def test_position_smoke(tmp_path, monkeypatch, capsys):
    result, printed = _run("position", tmp_path, monkeypatch, capsys)
    _assert_rows(result["rows"], 7)
    assert [r["key"] for r in result["rows"]] == [
        "cnn_pool_end", "cnn_pool_early", "none", "learned", "bias", "bias_10x", "rope2d"]
    assert result["rows"][5]["lr_mult"] == {"bias.table": 10.0}
    assert "+ 2D RoPE" in printed and "mean" in printed
    for name in ("position.png", "position_bias_stats.png"):
        _assert_png(tmp_path / name)


def test_heads_smoke(tmp_path, monkeypatch, capsys):
    result, printed = _run("heads", tmp_path, monkeypatch, capsys)
    _assert_rows(result["rows"], 4)
    assert [r["num_heads"] for r in result["rows"]] == [1, 2, 4, 8]
    assert "8 heads" in printed
    _assert_png(tmp_path / "heads.png")


def test_scale_smoke(tmp_path, monkeypatch, capsys):
    result, printed = _run("scale", tmp_path, monkeypatch, capsys)
    assert [g["d"] for g in result["gates"]] == [1, 4, 16, 64, 256]
    _assert_rows(result["rows"], 2)
    assert [r["key"] for r in result["rows"]] == ["unscaled", "scaled"]
    assert "q·k/√d" in printed
    _assert_png(tmp_path / "scale.png")


@pytest.mark.parametrize("name", ["position", "heads", "scale"])
def test_help(name, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", [f"{name}.py", "--help"])
    with pytest.raises(SystemExit) as exit_:
        runpy.run_path(str(SCRIPTS / f"{name}.py"), run_name="__main__")
    assert exit_.value.code == 0
    text = capsys.readouterr().out
    assert all(opt in text for opt in ("--epochs", "--seeds", "--out"))
