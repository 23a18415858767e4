"""One way to run every benchmark: ``zkcoord bench <name>`` for each, its presets, its errors, its JSON.

Real ``python -m zkcoord`` processes (tests/cli.py); the partlog benchmark runs for real at its smallest size (well
under a second) and its document goes through ``zkcoord analyze --bench``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli import run_cli
from zkcoord.bench.common import NAMES, PRESETS, SIZES


@pytest.mark.parametrize("name", [*NAMES, "all"])
def test_every_benchmark_has_a_command_with_a_size(name: str) -> None:
    out = run_cli("bench", name, "--help", timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"Usage: zkcoord bench {name} [OPTIONS]"), out.stdout
    assert "--size [small|medium|large]" in out.stdout, out.stdout


def test_every_benchmark_has_every_size_with_the_same_options() -> None:
    assert set(PRESETS) == set(NAMES)
    for name, by_size in PRESETS.items():
        assert tuple(by_size) == SIZES, name
        assert len({frozenset(options) for options in by_size.values()}) == 1, name


def test_partlog_at_the_smallest_size_writes_a_document_the_report_reads(tmp_path: Path) -> None:
    out = tmp_path / "results" / "partlog.json"
    scratch = tmp_path / "not" / "yet"  # a --dir that does not exist is created
    run = run_cli("bench", "partlog", "--size", "small", "--out", str(out), "--dir", str(scratch), timeout=120)
    assert run.returncode == 0, run.stderr
    assert scratch.is_dir()
    doc = json.loads(out.read_text())
    assert doc["schema"] == 1 and doc["benchmark"] == "partlog"
    assert doc["meta"]["records"] == PRESETS["partlog"]["small"]["records"]
    operations = {row["operation"] for row in doc["rows"]}
    assert {"append_batch(100)", "read_batches (CRC checked)", "plain read, 1 MiB chunks"} <= operations
    assert all(row["mb_per_s"] > 0 for row in doc["rows"])

    report = run_cli("analyze", "--bench", str(out), "--out", str(tmp_path / "plots"), timeout=120)
    assert report.returncode == 0, report.stderr
    assert "append_batch(100)" in report.stdout
    assert "bench-throughput.png" in (tmp_path / "plots" / "bench.html").read_text()
    assert (tmp_path / "plots" / "bench-throughput.png").stat().st_size > 1000


def test_assignor_join_writes_a_document_the_report_reads(tmp_path: Path) -> None:
    out = tmp_path / "assignor.json"
    run = run_cli(
        "bench", "assignor", "--size", "small", "--members", "200", "--topics", "10,20", "--repeats", "2",
        "--out", str(out), timeout=120,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    doc = json.loads(out.read_text())
    assert doc["benchmark"] == "assignor" and doc["kafka_anchor_ms"] == 1.98
    rows = {(r["case"], r["how"], r["topics"]): r for r in doc["rows"]}
    assert {t for _, _, t in rows} == {10, 20}
    join = rows[("homogeneous", "incremental", 10)]
    assert join["members"] == 200 and join["moved"] == 200 * 10 // 200  # the joiner gets floor(P/N): 10
    assert all(r["median_ms"] > 0 for r in doc["rows"])
    report = run_cli("analyze", "--bench", str(out), "--out", str(tmp_path / "plots"), timeout=120)
    assert report.returncode == 0, report.stderr
    assert "1.98 ms" in report.stdout and (tmp_path / "plots" / "bench-assignor.png").stat().st_size > 1000


@pytest.mark.parametrize(
    ("args", "status", "expect"),
    [
        (["assignor", "--members", "100000", "--ratio", "1000"], 1, "over 10 000 000 partitions"),
        (["scale", "--groups", "10", "--consumers", "15"], 1, "--consumers must be a positive multiple of --groups"),
        (["consumer", "--consumers", "0,x"], 2, "expected comma-separated positive integers"),
        (["partlog", "--records", "5"], 2, "--records"),
        (["partlog", "--size", "huge"], 2, "--size"),
        (["partlog", "--dir", "/dev/null/scratch"], 2, "cannot create /dev/null/scratch"),
        (["all", "--only", "partlog", "--skip", "partlog"], 1, "leave no benchmark to run"),
    ],
)
def test_bad_input_to_a_benchmark_is_one_error_line(args: list[str], status: int, expect: str) -> None:
    out = run_cli("bench", *args, timeout=60)
    assert out.returncode == status, out.stdout + out.stderr
    assert "Traceback" not in out.stderr, out.stderr
    errors = [line for line in out.stderr.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1 and expect in errors[0], out.stderr
    if status == 1:  # the project's own errors: that line and nothing else
        assert out.stderr.strip() == errors[0], out.stderr


def test_analyze_refuses_a_benchmark_document_without_its_fields(tmp_path: Path) -> None:
    bad = tmp_path / "partlog.json"
    bad.write_text('{"schema": 1, "benchmark": "partlog", "meta": {}}')
    out = run_cli("analyze", "--bench", str(bad), timeout=60)
    assert out.returncode == 1, out.stdout
    assert out.stderr.strip() == f"Error: {bad}: field 'rows' is missing", out.stderr
