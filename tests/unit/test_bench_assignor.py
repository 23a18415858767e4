"""The assignor benchmark at a toy size: it runs, checks the incremental join against the full computation, prints
its table and writes its rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from zkcoord.bench.assignor import main


def test_a_small_run_writes_every_row(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "assignor.json"
    assert main(["--members", "40", "--ratio", "3", "--topics", "4", "--repeats", "2", "--out", str(out)]) == 0
    document = json.loads(out.read_text())
    assert document["benchmark"] == "assignor" and document["schema"] == 1
    rows = {(r["case"], r["how"]): r for r in document["rows"]}
    assert set(rows) == {
        ("homogeneous", "incremental"),
        ("homogeneous", "full"),
        ("homogeneous", "threads"),
        ("homogeneous", "leave (incremental)"),
        ("heterogeneous", "full"),
    }
    assert rows["homogeneous", "incremental"]["moved"] == 120 // 40  # the joiner's share, P // N
    assert all(r["median_ms"] >= 0 for r in rows.values())
    assert "Kafka (Java, JMH avgt)" in capsys.readouterr().out


def test_bad_sizes_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--members", "1"]) == 2
    assert capsys.readouterr().err.startswith("Error: ")
