"""The Spark reader (``zkcoord.analysis.load.classify``) and the reference reader
(``zkcoord.runtime.journal.read_journal``) skip the same lines for the same reason, line by line, wrong JSON types
included; a run with lines of the wrong type is not given a PASS it did not earn; and the Spark verdict agrees with
the single-process one (``zkcoord.bench.analyze_python``) on runs judged on processed records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from pyspark.sql import SparkSession

from tests.spark.journals import (
    PROCESSED_EXPECTED,
    VIOLATION_DUPLICATE,
    VIOLATION_LOST,
    A,
    B,
    C,
    clean_run,
    finish,
)
from tests.spark.region_journals import DOUBLE_ROWS
from zkcoord.analysis import Verdict
from zkcoord.analysis.assemble import EXAMPLES, RANGE_EXAMPLE
from zkcoord.analysis.load import classify
from zkcoord.bench.analyze_python import python_analysis
from zkcoord.cli.analyze_cmd import analyze
from zkcoord.runtime.journal import ReadStats, read_journal

pytestmark = pytest.mark.spark

_BASE = {"v": 1, "ts": 1, "mono": 1, "seq": 1, "role": "r", "pid": 1, "ev": "produce.batch", "topic": "t",
         "partition": 0, "first": 0, "last": 9, "count": 10}  # fmt: skip


def _with(**fields: object) -> str:
    return json.dumps({**_BASE, **fields})


def _without(key: str) -> str:
    return json.dumps({k: v for k, v in _BASE.items() if k != key})


#: (line, the reference reader's verdict: None for a usable line, else its skip reason)
LINES: list[tuple[str, str | None]] = [
    (_with(), None),
    (_with(ts="1"), "malformed"),
    (_with(ts=1.5), "malformed"),
    (_with(ts=1.0), "malformed"),
    (_with(ts=True), "malformed"),
    (_with(ts=2**63), "malformed"),
    (_with(ts=-(2**63)), None),
    (_with(ts=None), "malformed"),
    (_with(seq="1"), "malformed"),
    (_with(pid=[1]), "malformed"),
    (_with(first="0"), "malformed"),
    (_with(last=1e308), "malformed"),
    (_with(offset="5"), "malformed"),
    (_with(partition=True), "malformed"),
    (_with(role=5), "malformed"),
    (_with(ev=5), "malformed"),
    (_with(topic=["t"]), "malformed"),
    (_with(group={"g": 1}), "malformed"),
    (_with(at_ms="x"), "malformed"),
    (_with(at_ms=1), None),
    (_with(at_ms=1.5), None),
    (_with(latency_ms=10**400), "malformed"),
    (_with(broker=5), None),  # text: any JSON value
    (_with(members=[1, 2]), None),
    (_with(partitions=[0, 1]), None),
    (_with(partitions="x"), "malformed"),
    (_with(subscription={"t": 1}), None),
    (_with(subscription={"t": "1"}), "malformed"),
    (_with(subscription={"t": None}), "malformed"),
    (_with(subscription=[1]), "malformed"),
    (_with(subscription=None), None),
    (_with(auto_commit=False), None),
    (_with(auto_commit=True), None),
    (_with(auto_commit="false"), "malformed"),
    (_with(auto_commit=0), "malformed"),
    (_with(auto_commit=[True]), "malformed"),
    (_with(unknown_field={"anything": [1.5, "x"]}), None),
    (_with()[:-1] + ', "ts": 2}', "malformed"),  # a duplicate key
    (_with()[:-1] + ', "at_ms": NaN}', "malformed"),
    (_with()[:-1] + ', "at_ms": -Infinity}', "malformed"),
    (_with(v="1"), "newer_schema"),
    (_with(v=2), "newer_schema"),
    (_with(v=1.0), "newer_schema"),
    (_with(v=True), "newer_schema"),
    (_with(v=2, ts="x"), "newer_schema"),  # a newer schema may type its fields otherwise: not judged by these rules
    (_with(v=None), "malformed"),
    (_without("v"), "malformed"),
    (_without("ev"), "malformed"),
    ("{oops", "malformed"),
    ("[1]", "malformed"),
    ('"text"', "malformed"),
]


def _reference(line: str, tmp_path: Path, i: int) -> str | None:
    journal = tmp_path / f"line{i}"
    journal.mkdir()
    (journal / "r.1.jsonl").write_text(line + "\n")
    stats = ReadStats()
    if list(read_journal(journal, stats)):
        return None
    return next(k for k in ("truncated", "malformed", "newer_schema") if getattr(stats, k))


def test_both_readers_skip_the_same_lines_for_the_same_reason(spark: SparkSession, tmp_path: Path) -> None:
    frame = spark.createDataFrame([("run", line, False, i) for i, (line, _) in enumerate(LINES)],
                                  "run string, value string, torn boolean, i int")  # fmt: skip
    classified = classify(frame)
    # classify keeps no line number: rows come back in input order from a local DataFrame without a shuffle
    spark_reasons = [row["skip"] for row in classified.select("skip").collect()]
    assert len(spark_reasons) == len(LINES)
    mismatches = []
    for i, ((line, expected), got_spark) in enumerate(zip(LINES, spark_reasons, strict=True)):
        got_ref = _reference(line, tmp_path, i)
        # incomplete and unknown_event are the Spark reader's own finer reasons for lines the reference yields
        spark_as_ref = None if got_spark in ("incomplete", "unknown_event") else got_spark
        if not (got_ref == expected == spark_as_ref):
            mismatches.append((line, expected, got_ref, got_spark))
    assert not mismatches


def _mistype_batches(run_dir: Path) -> int:
    """Give every ``produce.batch`` line of partition 1 a wrong type (as a damaged or hand-edited journal would);
    return how many lines were changed."""
    changed = 0
    breakers = [("ts", "1100"), ("first", "0"), ("last", 1e308), ("partition", True), ("seq", 1.5)]
    for path in sorted((run_dir / "journal").glob("*.jsonl")):
        out = []
        for line in path.read_text().splitlines():
            obj = json.loads(line)
            if obj["ev"] == "produce.batch" and obj["partition"] == 1:
                key, value = breakers[changed % len(breakers)]
                obj[key] = value
                changed += 1
            out.append(json.dumps(obj))
        path.write_text("\n".join(out) + "\n")
    return changed


def test_a_run_with_mistyped_lines_is_inconclusive_not_pass(spark: SparkSession, tmp_path: Path) -> None:
    run = tmp_path / "mistyped"
    finish(clean_run(run))
    changed = _mistype_batches(run)
    assert changed >= 1
    out = tmp_path / "out"
    result = CliRunner().invoke(analyze, [str(run), "--out", str(out), "--no-report", "-q"])
    assert result.exit_code == 1, result.output
    assert "verdict: INCONCLUSIVE" in result.output
    # the produced side of partition 1 is unreadable, so nothing is missing there: every property counts 0, and
    # still no property and no run is shown as PASS
    assert "PASS" not in result.output
    assert result.output.splitlines()[0].split()[-1] == "mistyped"
    saved = json.loads((out / "verdict.json").read_text())
    stats = ReadStats()
    list(read_journal(run / "journal", stats))
    read = saved["runs"][0]["read"]
    assert read["malformed"] == stats.malformed == read["unusable"] == changed
    assert all(p["count"] == 0 for p in saved["runs"][0]["properties"].values())
    assert (saved["ok"], saved["status"], saved["runs"][0]["status"]) == (False, "INCONCLUSIVE", "INCONCLUSIVE")


def test_both_verdicts_agree_on_runs_with_processed_records(processed_runs_verdict: tuple[Path, Verdict]) -> None:
    """The Spark verdict and the single-process reference (:func:`python_analysis`) count the same violations of
    every property, and name the same missing and duplicated ranges with the same deliveries, intervals, commands
    and commits involved, and the same ranges committed unprocessed (S3-risk, with the same commits judged), on runs
    judged on processed records."""
    base, verdict = processed_runs_verdict
    for name, expected in PROCESSED_EXPECTED.items():
        ref = python_analysis(base / name / "journal")
        spark_run = verdict.run(name)
        assert {p.key: p.count for p in spark_run.properties} == ref.counts == expected, name
        assert spark_run.property("S3").details["examples"] == ref.lost, name
        assert spark_run.property("S4").details["examples"] == ref.duplicated, name
        assert [{k: e[k] for k in RANGE_EXAMPLE} for e in ref.lost] == ref.missing[:EXAMPLES], name
        risk = spark_run.property("S3-risk").details
        assert (risk["examples"], risk["commits_judged"]) == (ref.at_risk, ref.commits_judged), name


def test_both_readers_name_the_same_violations_in_the_same_detail(analysed_runs: tuple[Path, Verdict]) -> None:
    """Each violation the report lists comes from the verdict's examples; the reference reader finds the same rows:
    S1's deposed writes (broker process, command, its epoch against the elected one, generation), S2's overlapping
    pairs (the interval of each side, its generation and the start-fetcher that granted it) and deliveries outside
    ownership, S3's lost and S4's duplicated ranges (the deliveries around and of them, each with its interval,
    generation and granting command, and the commit past a gap), and S5's stale commands (name, epoch and generation
    against those already applied)."""
    base, verdict = analysed_runs
    for name in ("clean", "violations"):
        ref = python_analysis(base / name / "journal")
        run = verdict.run(name)
        s1, s2, s5 = (run.property(k).details for k in ("S1", "S2", "S5"))
        assert s1["examples"] == ref.deposed, name
        assert s2["examples"] == ref.overlaps, name
        assert s2["outside_examples"] == ref.outside, name
        assert s5["examples"] == ref.stale, name
        assert run.property("S3").details["examples"] == ref.lost, name
        assert run.property("S4").details["examples"] == ref.duplicated, name
    bad = verdict.run("violations")
    [pair] = bad.property("S2").details["examples"]
    # A was given t-0 by generation 2's start (epoch 1) and C fetched it at 1580 without one: the grant is null
    assert (pair["consumer_a"], pair["consumer_b"], pair["command_a"], pair["epoch_a"]) == (A, C, "cmd-1-2", 1)
    assert (pair["start_b"], pair["command_b"], pair["epoch_b"]) == (1580, None, None)
    assert bad.property("S3").details["examples"] == [VIOLATION_LOST]
    assert bad.property("S4").details["examples"] == [VIOLATION_DUPLICATE]
    assert [(s["consumer"], s["name"], s["seen_epoch"]) for s in bad.property("S5").details["examples"]] == [
        (A, "cmd-1-2", 2),
        (B, "cmd-1-3", 1),
    ]


def test_both_readers_find_the_same_s8_rows(processed_runs_verdict: tuple[Path, Verdict]) -> None:
    """S8 (exactly-once state of a consistent region): the Spark verdict and the reference list the same rows (key,
    checkpoint, expected and found count and sum) and the same numbers; a run without a region shows S8 as n/a."""
    base, verdict = processed_runs_verdict
    for name in ("region", "region-double", "complete"):
        ref = python_analysis(base / name / "journal")
        s8 = verdict.run(name).property("S8")
        assert s8.details["examples"] == ref.region_state, name
        assert {k: s8.details[k] for k in ref.region_summary} == ref.region_summary, name
    assert verdict.run("region-double").property("S8").details["examples"] == DOUBLE_ROWS
    assert verdict.run("region").cell(verdict.run("region").property("S8")) == "0 PASS"
    assert verdict.run("complete").cell(verdict.run("complete").property("S8")) == "n/a"
    table = verdict.table()
    assert "S8 exactly-once state" in table
    assert verdict.run_ok("region") and not verdict.run_ok("region-double")
