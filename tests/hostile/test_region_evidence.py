"""S8 on damaged region evidence (the single-process reference, ``zkcoord.bench.analyze_regions``): a line that
cannot be used is left out, never guessed at, and what is left out shows as a difference, not as a PASS it did not
earn.  The Spark verdict follows the same rules (``zkcoord.analysis.regions``)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.spark.journals import Proc
from tests.spark.region_journals import region_run
from zkcoord.bench.analyze_python import python_analysis


def _append(run: Path, role: str, pid: int, ts: int, ev: str, **fields: object) -> None:
    Proc(run / "journal", role, pid).emit(ts, ev, **fields)


def test_unusable_region_lines_are_left_out(tmp_path: Path) -> None:
    run = region_run(tmp_path / "r")
    # a checkpoint without its member, one without its id, a state entry that is not [count, sum], an offsets key
    # that is not topic/partition, records whose keys and values differ in length: none changes the verdict
    _append(run, "x", 901, 1500, "region.checkpoint", group="rg", region=1, checkpoint=2, members=["m1", "m2"],
            offsets={"r/0": 10}, state={"k0": [99, 99]})  # fmt: skip
    _append(run, "x", 902, 1500, "region.checkpoint", group="rg", region=1, member="m9", members=["m1"],
            offsets={"r/0": 10}, state={"k0": [99, 99]})  # fmt: skip
    _append(run, "x", 903, 1500, "produce.records", topic="r", partition=0, first=10, keys=["k0", "k1"], values=[1])
    _append(run, "x", 904, 1500, "region.checkpoint", group="rg", region=1, member="m9", checkpoint=3,
            members=["m1"], offsets={"no-partition": 10}, state={"k0": [1]})  # fmt: skip
    found = python_analysis(run / "journal")
    assert found.counts["S8"] == 0
    assert found.region_summary["records_journalled"] == 20


def test_a_completed_checkpoint_missing_a_members_state_fails(tmp_path: Path) -> None:
    """The driver completed checkpoint 2, but m2's contribution is gone from the journal (a torn file, a person):
    its keys are found short, never assumed."""
    run = region_run(tmp_path / "r")
    path = next((run / "journal").glob("region-m2.*.jsonl"))
    kept = [line for line in path.read_text().splitlines() if json.loads(line).get("checkpoint") != 2]
    path.write_text("".join(line + "\n" for line in kept))
    rows = python_analysis(run / "journal").region_state
    assert [(r["checkpoint"], r["key"], r["expected_count"], r["found_count"]) for r in rows] == [(2, "k2", 10, 0)]


def test_a_member_of_another_group_does_not_complete_a_checkpoint(tmp_path: Path) -> None:
    """A completion names its members: a contribution from a name it does not list is not summed."""
    run = region_run(tmp_path / "r")
    _append(run, "x", 905, 1310, "region.checkpoint", group="rg", region=1, member="intruder", checkpoint=2,
            members=["m1", "m2", "intruder"], offsets={"r/0": 10}, state={"k0": [5, 20]})  # fmt: skip
    assert python_analysis(run / "journal").counts["S8"] == 0
