"""``zkcoord analyze`` through click's CliRunner: the exit code says whether a property was violated."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from pyspark.sql import SparkSession

from tests.spark.journals import EXPECTED, clean_run, finish, violations_run
from zkcoord.cli.analyze_cmd import analyze

pytestmark = pytest.mark.spark


def test_clean_run_exits_zero_and_prints_the_table(spark: SparkSession, tmp_path: Path) -> None:
    finish(clean_run(tmp_path / "clean"))
    result = CliRunner().invoke(analyze, [str(tmp_path / "clean"), "--no-report", "-q"])
    assert result.exit_code == 0, result.output
    assert "S2 no double ownership" in result.output
    assert "verdict: PASS" in result.output
    assert (tmp_path / "clean" / "analysis" / "verdict.json").is_file()


def test_no_journal_is_one_clear_line(tmp_path: Path) -> None:
    (tmp_path / "nothing").mkdir()
    result = CliRunner().invoke(analyze, [str(tmp_path / "nothing"), "-q"])
    assert result.exit_code == 1
    nothing = tmp_path / "nothing"
    expected = f"{nothing}/journal/*.jsonl, {nothing}/*.jsonl or {nothing}/RUN/journal/*.jsonl"
    assert result.output.strip().splitlines() == [f"Error: no journal in {nothing}: expected {expected}"]


def test_a_demos_run_directory_is_analysed_run_by_run(spark: SparkSession, tmp_path: Path) -> None:
    """``zkcoord demo`` prints ``run directory: runs/<stamp>``, which holds ``safe/`` and ``unsafe/``: ``zkcoord
    analyze`` on it judges each run inside it, and writes where the demo does (``runs/<stamp>/analysis``).  A run
    with violations makes the exit status 1, with the JSON verdict on stdout and, with --no-report, no report."""
    base = tmp_path / "20250101-120000"
    finish(clean_run(base / "safe"))
    violations_run(base / "unsafe")
    (base / "analysis").mkdir()  # a previous analysis's output is not a run
    result = CliRunner().invoke(analyze, [str(base), "--json", "--no-report", "-q"])
    assert result.exit_code == 1, result.output
    verdict = json.loads(result.stdout)
    assert [(r["run"], r["status"]) for r in verdict["runs"]] == [("safe", "PASS"), ("unsafe", "FAIL")]
    assert {k: v["count"] for k, v in verdict["runs"][1]["properties"].items()} == EXPECTED
    assert (base / "analysis" / "verdict.json").is_file()
    assert not (base / "analysis" / "report.html").exists()
