"""A run's status: FAIL on a violation, INCONCLUSIVE on evidence that is incomplete or absent, else PASS."""

from __future__ import annotations

from typing import Any

from zkcoord.analysis.verdict import PROPERTIES, PropertyResult, ReadCounts, RunVerdict, Verdict


def run(s3: dict[str, Any], *, count: int = 0, unusable: int = 0) -> RunVerdict:
    props = tuple(
        PropertyResult(k, t, count if k == "S3" else 0, s3 if k == "S3" else {}) for k, t in PROPERTIES.items()
    )
    return RunVerdict("safe", "j", ReadCounts(10, 10, 1, malformed=unusable), props)


def test_a_run_that_judged_records_passes() -> None:
    r = run({"expected": 1200})
    assert r.status == "PASS" and not r.judged_nothing and r.cell(r.property("S2")) == "0 PASS"


def test_a_run_in_which_no_record_reached_a_group_is_inconclusive_not_pass() -> None:
    """A seed whose producers never produced passed on nothing before this rule (S2-S4 all 0 on no evidence)."""
    r = run({"expected": 0})
    assert r.judged_nothing and r.status == "INCONCLUSIVE" and not r.ok
    assert r.cell(r.property("S2")) == "0 INCONCLUSIVE"
    assert Verdict((r,), "out").status == "INCONCLUSIVE"


def test_a_violation_is_a_failure_even_on_little_evidence() -> None:
    assert run({"expected": 0}, count=3).status == "FAIL"


def test_a_verdict_without_s3_figures_is_not_judged_on_them() -> None:
    assert run({}).status == "PASS"


def test_a_region_run_is_judged_by_its_state() -> None:
    """A consistent region's records are judged by S8 (its checkpointed state against every record produced)."""
    props = tuple(
        PropertyResult(k, t, 0, {"expected": 0} if k == "S3" else s8 if k == "S8" else {})
        for k, t in PROPERTIES.items()
        for s8 in ({"applicable": True, "records_journalled": 40},)
    )
    assert RunVerdict("region", "j", ReadCounts(1, 1, 1), props).status == "PASS"


def test_a_region_run_whose_producers_journalled_nothing_is_inconclusive() -> None:
    props = tuple(
        PropertyResult(k, t, 0, {"expected": 0} if k == "S3" else s8 if k == "S8" else {})
        for k, t in PROPERTIES.items()
        for s8 in ({"applicable": True, "records_journalled": 0},)
    )
    assert RunVerdict("region", "j", ReadCounts(1, 1, 1), props).status == "INCONCLUSIVE"
