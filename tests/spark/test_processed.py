"""S3 and S4 judged on what the application processed (``records.processed``) for the groups that journal it, on
what ``poll()`` handed out (``records.consumed``) for the others; a ``consumer.poll_timeout`` allows the duplicates
of the member's uncommitted tail, as a crash does; S3-risk counts what consumers with auto-commit off committed
before their application processed it.  One analysis of seven crafted runs serves the module."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from tests.spark.journals import (
    AT_RISK,
    DUPLICATE_WITHOUT_TIMEOUT,
    GAP_LOST,
    PROCESSED_EXPECTED,
    PROCESSED_GAP,
    A,
    B,
    H,
    delivery,
)
from zkcoord.analysis import Verdict
from zkcoord.analysis.assemble import RANGE_EXAMPLE

pytestmark = pytest.mark.spark


def test_a_record_consumed_and_committed_but_never_processed_is_missing(
    processed_runs_verdict: tuple[Path, Verdict],
) -> None:
    gap = processed_runs_verdict[1].run("gap")
    assert {p.key: p.count for p in gap.properties} == PROCESSED_EXPECTED["gap"]
    s3 = gap.property("S3").details
    # who was involved: A's application finished ..74 and nothing after, and A committed 100 past the gap
    assert s3["examples"] == [GAP_LOST]
    assert (GAP_LOST["first"], GAP_LOST["last"]) == PROCESSED_GAP
    assert (s3["judged_on"], s3["consumed_distinct"], s3["processed_distinct"]) == ("processed", 200, 175)
    assert gap.status == "FAIL" and gap.judged_on == "processed"


def test_every_record_processed_passes_on_processed(processed_runs_verdict: tuple[Path, Verdict]) -> None:
    complete = processed_runs_verdict[1].run("complete")
    assert complete.status == "PASS"
    assert complete.property("S3").details["processed_distinct"] == 200
    assert (complete.judged_on, complete.property("S4").details["judged_on"]) == ("processed", "processed")


def test_each_group_is_judged_on_its_own_records(processed_runs_verdict: tuple[Path, Verdict]) -> None:
    """Group g journals processed records (complete), group h only consumed ones (t-1 90..99 never handed out)."""
    mixed = processed_runs_verdict[1].run("mixed")
    assert {p.key: p.count for p in mixed.properties} == PROCESSED_EXPECTED["mixed"]
    s3 = mixed.property("S3").details
    [lost] = s3["examples"]
    assert {k: lost[k] for k in RANGE_EXAMPLE} == {
        "group": "h", "topic": "t", "partition": 1, "first": 90, "last": 99, "count": 10, "judged_on": "consumed"
    }  # fmt: skip
    assert (lost["before"], lost["after"], lost["commit"]) == (delivery(H, 1300, 0, 89, (1250, 1310)), None, None)
    assert (s3["groups_on_processed"], s3["groups_on_consumed"]) == (1, 1)
    assert mixed.judged_on == "processed+consumed"


def test_a_duplicate_after_a_poll_timeout_is_allowed(processed_runs_verdict: tuple[Path, Verdict]) -> None:
    verdict = processed_runs_verdict[1]
    timeout, control = verdict.run("timeout").property("S4"), verdict.run("no-timeout").property("S4")
    assert (timeout.count, timeout.details["duplicate_offsets"], timeout.details["after_crash"]) == (0, 30, 30)
    # the same run without the poll timeout: the member left nothing uncommitted, so the 30 are clean duplicates,
    # listed with who delivered them: A's application first, B's after it took the partition over
    assert (control.count, control.details["after_crash"]) == (30, 0)
    assert control.details["examples"] == [DUPLICATE_WITHOUT_TIMEOUT]
    assert verdict.run("timeout").status == "PASS"


def test_the_tables_say_what_was_judged(processed_runs_verdict: tuple[Path, Verdict], spark: SparkSession) -> None:
    out = processed_runs_verdict[0] / "out" / "tables"
    rows = spark.read.parquet(str(out / "consumption")).where("run = 'mixed'").collect()
    got = {(r["group"], r["partition"]): (r["judged_on"], r["processed_distinct"], r["missing_offsets"]) for r in rows}
    assert got == {
        ("g", 0): ("processed", 100, 0),
        ("g", 1): ("processed", 100, 0),
        ("h", 0): ("consumed", 0, 0),
        ("h", 1): ("consumed", 0, 10),
    }
    dups = spark.read.parquet(str(out / "duplicate_ranges")).where("run = 'timeout'").collect()
    assert [(r["first"], r["last"], r["after_crash"], r["judged_on"]) for r in dups] == [(50, 79, True, "processed")]
    table = processed_runs_verdict[1].table()
    judged = next(line for line in table.splitlines() if line.startswith("S3, S4 judged on"))
    labels = judged.split()[-len(PROCESSED_EXPECTED) :]
    assert labels[:7] == ["processed", "processed", "processed+consumed", *["processed"] * 4]
    assert labels == [processed_runs_verdict[1].run(name).judged_on for name in PROCESSED_EXPECTED]


def test_a_commit_ahead_of_the_application_is_at_risk_though_nothing_is_lost(
    processed_runs_verdict: tuple[Path, Verdict],
) -> None:
    """S3-risk counts the cause, not the effect: every record of the run is processed (S3 0), but two commits by
    consumers with auto-commit off were ahead of their application, and the run fails on them."""
    run = processed_runs_verdict[1].run("at-risk")
    assert {p.key: p.count for p in run.properties} == PROCESSED_EXPECTED["at-risk"]
    risk = run.property("S3-risk")
    assert risk.details["examples"] == AT_RISK
    assert (risk.details["ranges"], risk.details["consumers"], risk.details["commits_judged"]) == (2, 2, 6)
    assert run.status == "FAIL"
    table = processed_runs_verdict[1].table()
    row = next(line for line in table.splitlines() if line.startswith("S3-risk"))
    assert "70 FAIL" in row
    assert f"S3 at risk in at-risk: 70 offsets committed unprocessed, first: g t-0 30..49 by consumer {A}" in table


def test_commits_that_follow_the_work_or_the_auto_commit_contract_are_not_at_risk(
    processed_runs_verdict: tuple[Path, Verdict],
) -> None:
    """The same commits with auto-commit on (the contract: what poll() returned), commits written before the field
    existed (``gap``: its loss is S3's), and commits of a group that journals no processed records (``h`` of
    ``mixed``) are not judged; commits of finished work (``complete``) are judged and pass."""
    verdict = processed_runs_verdict[1]
    for name in ("auto-commit", "gap", "mixed", "complete"):
        risk = verdict.run(name).property("S3-risk")
        assert (risk.count, risk.details["examples"]) == (0, []), name
    assert verdict.run("auto-commit").status == "PASS"
    assert verdict.run("auto-commit").property("S3-risk").details["commits_judged"] == 0
    assert verdict.run("gap").property("S3-risk").details["commits_judged"] == 0


def test_the_ranges_committed_unprocessed_are_a_table(
    processed_runs_verdict: tuple[Path, Verdict], spark: SparkSession
) -> None:
    out = processed_runs_verdict[0] / "out" / "tables"
    rows = spark.read.parquet(str(out / "committed_unprocessed")).where("run = 'at-risk'").collect()
    got = sorted((r["consumer"], r["partition"], r["first"], r["last"]) for r in rows)
    assert got == [(A, 0, 30, 49), (B, 1, 50, 99)]
