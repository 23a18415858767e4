"""The rebalance benchmark's report and plots with three protocols side by side (the ``incremental`` one among
them), on a hand-made result document."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from zkcoord.analysis.bench_report import load_bench, render_bench, table
from zkcoord.bench.rebalance.measures import comparison
from zkcoord.bench.rebalance.report import format_report

# --- the report and the plots, three protocols ---------------------------------------------------------------------


def _stats(p50: float) -> dict[str, float]:
    return {"n": 1, "p50": p50, "p95": p50, "max": p50, "mean": p50}


def _document() -> dict[str, Any]:
    protocols = ["coordinator", "incremental", "zk-client"]
    latency = {"coordinator": 500.0, "incremental": 120.0, "zk-client": 1500.0}
    summary, changes = [], []
    for protocol in protocols:
        coordinated = protocol != "zk-client"
        for kind in ("join", "leave"):
            steps = {"requested": 1.0, "started": 5.0, "completed": latency[protocol]} if coordinated else {}
            summary.append(
                {
                    "protocol": protocol,
                    "kind": kind,
                    "consumers": 4,
                    "partitions": 16,
                    "groups": 1,
                    "trials": 1,
                    "changes": 1,
                    "completed": 1,
                    "latency_ms": _stats(latency[protocol]),
                    "stw_ms": _stats(10),
                    "gap_ms": _stats(20),
                    "zk_requests_per_rebalance": 100.0,
                    "zk_reads_per_rebalance": 60.0,
                    "zk_writes_per_rebalance": 40.0,
                    "conflicts": 0,
                    "retries": 0,
                    "aborted": 0,
                    "failures": 0,
                    "x_floor_watch": latency[protocol],
                    "cpu_ms_p50": {"broker": 1.0, "workers": 2.0},
                    "from_command_ms_p50": latency[protocol] + 5,
                    "breakdown_ms_p50": steps,
                    "commanded_p50": (2.0 if protocol == "incremental" else 5.0) if coordinated else None,
                    "moved_partitions_p50": 3.0 if coordinated else None,
                    "stopped_partitions_p50": (3.0 if protocol == "incremental" else 16.0) if coordinated else None,
                }
            )
            change = {"protocol": protocol, "kind": kind, "completed": True, "latency_ms": latency[protocol]}
            changes.append({**change, "stw_ms": 10, "gap_ms": 20})
    return {
        "schema": 1,
        "benchmark": "rebalance",
        "meta": {"when": "now", "cpus": 2},
        "config": {
            "protocols": protocols,
            "groups": 1,
            "consumers": 4,
            "partitions": 16,
            "trials": 1,
            "workers": 1,
            "session_timeout_s": 4.0,
            "legacy_backoff_s": 0.2,
            "legacy_max_retries": 4,
        },
        "floor": {"quiet": {"samples": 5, "write_ms": {"p50": 1.2}, "watch_ms": {"p50": 1.3}}},
        "protocols": [
            {"protocol": p, "formed": True, "form_s": 1.0, "formation": {"attempts": 1}, "floor_loaded": None}
            | {"error": None}
            for p in protocols
        ],
        "summary": summary,
        "comparison": comparison(summary),
        "changes": changes,
    }


def test_report_shows_the_incremental_rows_and_ratios() -> None:
    text = format_report(_document())
    lines = text.splitlines()
    assert sum(1 for line in lines if line.startswith("incremental ")) == 2  # join and leave in the table
    assert "join: the zk-client p50 is 12.5x the incremental's." in text
    assert "join: the coordinator p50 is 4.2x the incremental's." in text
    assert "incremental: when each step happened, p50 ms after the trigger" in text
    section = lines[next(i for i, line in enumerate(lines) if line.startswith("Per change, p50: members")) :]
    commanded = next(line for line in section if line.strip().startswith("incremental join"))
    assert commanded.split()[2:] == ["2", "3", "3"]  # commanded, moved, stopped


def test_analyze_plots_three_protocols_side_by_side(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    path.write_text(json.dumps(_document()))
    doc = load_bench(path)
    page = render_bench(doc, tmp_path / "plots")
    assert page.exists()
    for name in ("latency", "stw", "requests", "steps"):
        assert (tmp_path / "plots" / f"bench-{name}.png").stat().st_size > 1000
    rows = table(doc).splitlines()[1:]
    assert [row.split()[0] for row in rows] == [p for p in doc["config"]["protocols"] for _ in range(2)]
