"""The single-process reference verdict (``zkcoord.bench.analyze_python``) on crafted journals: S3 and S4 judged on
``records.processed`` for the groups that journal it, on ``records.consumed`` for the others, and a
``consumer.poll_timeout`` allowing the duplicates of the member's uncommitted tail.  (The Spark verdict is checked
on the same journals in ``tests/spark/test_processed.py``, and against this one in
``tests/spark/test_reader_agreement.py``.)"""

from __future__ import annotations

from pathlib import Path

from tests.spark.journals import (
    EXPECTED,
    PROCESSED_EXPECTED,
    PROCESSED_GAP,
    clean_run,
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
