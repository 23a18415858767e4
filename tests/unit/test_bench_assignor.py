"""The assignor benchmark at a toy size: it runs, checks the incremental join against the full computation, prints
its table and writes its rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from zkcoord.bench.assignor import balance, main


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
        ("homogeneous", "coordinator (KIP-848)"),
        ("homogeneous", "coordinator, full"),
        ("homogeneous", "leave (incremental)"),
        ("heterogeneous", "full"),
    }
    assert rows["homogeneous", "incremental"]["moved"] == 120 // 40  # the joiner's share, P // N
    assert all(r["median_ms"] >= 0 for r in rows.values())
    printed = capsys.readouterr().out
    assert "Kafka (Java, JMH avgt)" in printed
    assert "Balance (issue 16): 20 members on 100 topics of 4 partitions" in printed
    assert all(r["balanced"] for r in document["balance"] if r["how"] != "range")


def test_bad_sizes_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--members", "1"]) == 2
    assert capsys.readouterr().err.startswith("Error: ")


def test_the_balance_rows_measure_issue_16s_case_through_the_coordinators_own_target() -> None:
    """20 members on 100 topics of 4 partitions: per-member totals differ by at most one under the uniform assignor
    (from scratch, after a join, thread-level); KIP-848's server-side range balances per topic only (4 of 20)."""
    rows = {r["how"]: r for r in balance()}
    assert set(rows) == {"uniform", "range", "uniform, m019 joins 19", "threads (incremental protocol)"}
    for how in ("uniform", "uniform, m019 joins 19", "threads (incremental protocol)"):
        row = rows[how]
        assert row["balanced"] and row["spread"] <= 1 and row["totals_min"] == row["totals_max"] == 20, row
        assert row["partitions"] == 400 and row["members"] == 20 and row["topics"] == 100
    assert not rows["range"]["balanced"] and (rows["range"]["totals_min"], rows["range"]["totals_max"]) == (0, 100)
    # Smaller shapes too: 7 members on 3 topics of 4 (12 partitions): 1 or 2 each.
    small = {r["how"]: r for r in balance(7, 3, 4)}
    assert small["uniform"]["spread"] <= 1 and small["uniform, m006 joins 6"]["spread"] <= 1
