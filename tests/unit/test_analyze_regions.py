"""S8 exactly-once state in the single-process reference (``zkcoord.bench.analyze_regions``) on crafted region
journals (``tests/spark/region_journals.py``): a correct region passes; a double count after a reset, a state above
its checkpoint's offsets and a region that never completed a checkpoint are rows (key, checkpoint, expected, found).
The Spark verdict is held to the same rows in ``tests/spark/test_reader_agreement.py``."""

from __future__ import annotations

import json
from pathlib import Path

from tests.spark.journals import PROCESSED_EXPECTED, clean_run, finish
from tests.spark.region_journals import DOUBLE_ROWS, region_run
from zkcoord.analysis.verdict import PROPERTIES, PropertyResult, ReadCounts, RunVerdict
from zkcoord.analysis.violations import unlisted, violations
from zkcoord.bench.analyze_python import python_analysis


def test_a_correct_region_keeps_exactly_once_state(tmp_path: Path) -> None:
    found = python_analysis(region_run(tmp_path / "region") / "journal")
    assert found.counts == PROCESSED_EXPECTED["region"]
    assert found.region_state == []
    assert found.region_summary == {
        "regions": 1, "checkpoints": 3, "complete_checkpoints": 2, "resets": 2, "records_journalled": 20,
    }  # fmt: skip


def test_a_double_count_after_a_reset_is_a_row_per_key(tmp_path: Path) -> None:
    found = python_analysis(region_run(tmp_path / "double", double=True) / "journal")
    assert found.counts == PROCESSED_EXPECTED["region-double"]
    assert found.region_state == DOUBLE_ROWS


def test_the_last_checkpoint_must_cover_every_record_produced(tmp_path: Path) -> None:
    """A region whose last checkpoint stopped short of the log end (its state matches its offsets) fails: the
    records above them were never part of a consistent state."""
    run = region_run(tmp_path / "short")
    for path in (run / "journal").glob("region-*.jsonl"):
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        path.write_text("".join(json.dumps(o) + "\n" for o in lines if o.get("checkpoint") != 2))
    driver = next((run / "journal").glob("driver-*.jsonl"))
    kept = [line for line in driver.read_text().splitlines() if json.loads(line).get("checkpoint") != 2]
    driver.write_text("".join(line + "\n" for line in kept))
    found = python_analysis(run / "journal")
    # checkpoint 1 is now the last: m1 holds 0..4 of partition 0, m2 0..2 of partition 1, out of 20 records
    assert [(r["checkpoint"], r["key"], r["expected_count"], r["found_count"]) for r in found.region_state] == [
        (1, "k0", 5, 3), (1, "k1", 5, 2), (1, "k2", 10, 3),
    ]  # fmt: skip


def test_a_region_group_consuming_again_after_a_reset_is_judged_by_s8_not_s4(tmp_path: Path) -> None:
    """The region run's m1 fetched 5..6 before the reset and again after it: the same journal without its region
    events is an S4 violation of two offsets."""
    run = region_run(tmp_path / "region")
    assert python_analysis(run / "journal").counts["S4"] == 0
    for path in (run / "journal").glob("*.jsonl"):
        lines = [line for line in path.read_text().splitlines() if not json.loads(line)["ev"].startswith("region.")]
        path.write_text("".join(line + "\n" for line in lines))
    assert python_analysis(run / "journal").counts["S4"] == 2


def test_a_run_without_a_region_has_no_s8_violation(tmp_path: Path) -> None:
    finish(clean_run(tmp_path / "clean"))
    found = python_analysis(tmp_path / "clean" / "journal")
    assert found.counts["S8"] == 0
    assert found.region_summary["regions"] == 0


def test_each_s8_row_is_a_violation_of_the_report(tmp_path: Path) -> None:
    """The report's violation table (zkcoord.analysis.violations, plain Python) has a row per S8 example naming the
    group, region, checkpoint, key, expected and found count/sum and what went wrong."""
    found = python_analysis(region_run(tmp_path / "double", double=True) / "journal")
    props = tuple(
        PropertyResult(key, title, found.counts.get(key, 0), {"examples": found.region_state} if key == "S8" else {})
        for key, title in PROPERTIES.items()
    )
    run = RunVerdict("double", str(tmp_path), ReadCounts(files=1, lines=1, events=1), props)
    rows = [v for v in violations(run) if v.prop == "S8"]
    assert [(v.kind, v.where, v.commands) for v in rows] == [
        ("state differs from the records", "rg", ("region 1", "checkpoint 1")),
        ("state differs from the records", "rg", ("region 1", "checkpoint 2")),
        ("state differs from the records", "rg", ("region 1", "checkpoint 2")),
        ("no complete checkpoint", "rg2", ("region two",)),
    ]
    assert rows[1].detail == (
        "key k0: expected count/sum 5/20 (every record produced), found 6/24: 1 counted twice or more"
    )
    assert rows[0].detail.startswith("key k2: expected count/sum 3/303 (the records below its merged offsets)")
    assert unlisted(run, rows) == {}
    assert run.cell(run.property("S8")) == "4 FAIL"
