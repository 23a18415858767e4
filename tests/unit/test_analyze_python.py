"""The single-process reference verdict (``zkcoord.bench.analyze_python``) on crafted journals: S3 and S4 judged on
``records.processed`` for the groups that journal it, on ``records.consumed`` for the others, and a
``consumer.poll_timeout`` allowing the duplicates of the member's uncommitted tail; S3-risk counting what a consumer
with auto-commit off committed before its application processed it.  (The Spark verdict is checked
on the same journals in ``tests/spark/test_processed.py``, and against this one in
``tests/spark/test_reader_agreement.py``.)"""

from __future__ import annotations

import json
from pathlib import Path

from tests.spark.journals import (
    AT_RISK,
    DAMAGE,
    DUPLICATE_WITHOUT_TIMEOUT,
    EXPECTED,
    GAP_LOST,
    PROCESSED_EXPECTED,
    PROCESSED_GAP,
    VIOLATION_DUPLICATE,
    VIOLATION_LOST,
    H,
    at_risk_run,
    clean_run,
    damaged_run,
    delivery,
    finish,
    mixed_groups_run,
    poll_timeout_run,
    processed_run,
    violations_run,
)
from zkcoord.bench.analyze_python import python_analysis


def test_a_record_consumed_and_committed_but_never_processed_is_missing(tmp_path: Path) -> None:
    processed_run(tmp_path, gap=True)
    found = python_analysis(tmp_path / "journal")
    assert found.counts == PROCESSED_EXPECTED["gap"]
    first, last = PROCESSED_GAP
    assert found.missing == [
        {
            "group": "g",
            "topic": "t",
            "partition": 0,
            "first": first,
            "last": last,
            "count": 25,
            "judged_on": "processed",
        }
    ]


def test_every_record_processed_passes(tmp_path: Path) -> None:
    processed_run(tmp_path)
    found = python_analysis(tmp_path / "journal")
    assert found.counts == PROCESSED_EXPECTED["complete"]
    assert found.processing == {"g"}


def test_a_run_without_processed_records_is_judged_on_consumed_ones(tmp_path: Path) -> None:
    finish(clean_run(tmp_path / "clean"))
    violations_run(tmp_path / "violations")
    clean, bad = python_analysis(tmp_path / "clean" / "journal"), python_analysis(tmp_path / "violations" / "journal")
    assert clean.counts == dict.fromkeys(EXPECTED, 0)
    assert bad.counts == EXPECTED
    assert bad.missing == [
        {"group": "g", "topic": "t", "partition": 0, "first": 120, "last": 129, "count": 10, "judged_on": "consumed"}
    ]
    assert clean.processing == bad.processing == frozenset()


def test_each_group_is_judged_on_its_own_records(tmp_path: Path) -> None:
    mixed_groups_run(tmp_path)
    found = python_analysis(tmp_path / "journal")
    assert found.counts == PROCESSED_EXPECTED["mixed"]
    assert found.missing == [
        {"group": "h", "topic": "t", "partition": 1, "first": 90, "last": 99, "count": 10, "judged_on": "consumed"}
    ]


def test_a_duplicate_processed_after_a_poll_timeout_is_allowed(tmp_path: Path) -> None:
    poll_timeout_run(tmp_path / "timeout")
    poll_timeout_run(tmp_path / "control", timeout=False)
    assert python_analysis(tmp_path / "timeout" / "journal").counts == PROCESSED_EXPECTED["timeout"]
    # without the timeout the member left nothing uncommitted: 50..79 processed twice are clean duplicates
    assert python_analysis(tmp_path / "control" / "journal").counts == PROCESSED_EXPECTED["no-timeout"]


def test_a_commit_ahead_of_the_application_is_at_risk(tmp_path: Path) -> None:
    """Every record is processed (S3 0), but A's commit of t-0 50 came when its application had finished 0..29, and
    B's of t-1 100 before it had finished any of 50..99 (B was never handed 0..49): 70 offsets at risk."""
    at_risk_run(tmp_path, auto_commit=False)
    found = python_analysis(tmp_path / "journal")
    assert found.counts == PROCESSED_EXPECTED["at-risk"]
    assert found.at_risk == AT_RISK
    assert found.commits_judged == 6


def test_commits_under_auto_commit_or_without_the_field_are_not_judged(tmp_path: Path) -> None:
    at_risk_run(tmp_path / "auto", auto_commit=True)
    processed_run(tmp_path / "old", gap=True)  # commits without auto_commit: an older journal
    for name in ("auto", "old"):
        found = python_analysis(tmp_path / name / "journal")
        assert (found.counts["S3-risk"], found.at_risk, found.commits_judged) == (0, [], 0), name
    # the older journal's loss is still S3's
    assert python_analysis(tmp_path / "old" / "journal").counts["S3"] == 25


def test_a_group_that_journals_no_processed_records_is_not_judged_on_its_commits(tmp_path: Path) -> None:
    """Group h of the mixed run commits with auto-commit off, but journals only records.consumed: nothing says
    what its application finished, so its commits are not judged."""
    mixed_groups_run(tmp_path)
    found = python_analysis(tmp_path / "journal")
    assert (found.counts["S3-risk"], found.commits_judged) == (0, 0)


def test_commits_that_follow_the_work_are_judged_and_pass(tmp_path: Path) -> None:
    """The commits of the at-risk run that follow the work alone (the two ahead of it left out): judged, none at
    risk.  A commit in the millisecond its records were processed counts as after them."""
    at_risk_run(tmp_path, auto_commit=False)
    for path in (tmp_path / "journal").glob("*.jsonl"):
        lines = path.read_text().splitlines(keepends=True)
        ahead = [json.loads(line) for line in lines]
        path.write_text(
            "".join(
                line
                for line, e in zip(lines, ahead, strict=True)
                if not (e["ev"] == "offsets.committed" and e["ts"] in (1340, 1440))
            )
        )
    found = python_analysis(tmp_path / "journal")
    assert (found.counts["S3-risk"], found.at_risk, found.commits_judged) == (0, [], 4)


def test_lines_it_could_not_use_are_counted_so_zero_violations_prove_nothing_with_them(tmp_path: Path) -> None:
    """As the Spark verdict's ``unusable`` (a run with any is INCONCLUSIVE, not PASS): malformed lines, lines of a
    newer schema and range events without a valid range.  A torn last line and an unknown event type are expected."""
    finish(clean_run(tmp_path / "clean"))
    damaged_run(tmp_path / "damaged")
    clean, damaged = python_analysis(tmp_path / "clean" / "journal"), python_analysis(tmp_path / "damaged" / "journal")
    assert clean.unusable == 0
    assert damaged.counts == dict.fromkeys(EXPECTED, 0), "the damage itself breaks no property: only its count shows"
    assert damaged.unusable == DAMAGE["malformed"] + DAMAGE["newer_schema"] + DAMAGE["incomplete"]


def test_each_lost_and_duplicated_range_names_who_delivered_around_it(tmp_path: Path) -> None:
    """S3's rows name the delivery that ended just before the gap and the one that began after it, each with the
    ownership interval it was delivered under (its generation, the start-fetcher that granted it and that command's
    epoch), and the first commit past the gap's first offset; S4's rows the first two deliveries of the duplicated
    offsets, in time order."""
    processed_run(tmp_path / "gap", gap=True)
    violations_run(tmp_path / "violations")
    mixed_groups_run(tmp_path / "mixed")
    poll_timeout_run(tmp_path / "no-timeout", timeout=False)
    gap, bad, mixed, twice = (
        python_analysis(tmp_path / name / "journal") for name in ("gap", "violations", "mixed", "no-timeout")
    )
    assert (gap.lost, gap.duplicated) == ([GAP_LOST], [])
    assert (bad.lost, bad.duplicated) == ([VIOLATION_LOST], [VIOLATION_DUPLICATE])
    # h's consumer fetched 0..89 under an interval no journalled command granted; its commit of 90 is not past 90
    [h] = mixed.lost
    assert (h["before"], h["after"], h["commit"]) == (delivery(H, 1300, 0, 89, (1250, 1310)), None, None)
    assert (twice.lost, twice.duplicated) == ([], [DUPLICATE_WITHOUT_TIMEOUT])
