"""``run_analysis`` end to end on crafted journals: exact counts for every property, damage skipped and counted,
tables written, the report rendered.  One analysis of three runs side by side serves the whole module."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from tests.spark.journals import DAMAGE, EXPECTED, OUTSIDE_DIALECT, VIOLATION_LOST
from zkcoord.analysis import JournalRefusedError, NoJournalError, SparkUnavailableError, Verdict, run_analysis
from zkcoord.analysis.pipeline import journalled
from zkcoord.bench.analyze_python import python_verdict
from zkcoord.runtime.journal import ReadStats, read_journal

pytestmark = pytest.mark.spark

TABLES = (
    "terms",
    "rebalances",
    "ownership",
    "consumption",
    "missing_ranges",
    "duplicate_ranges",
    "committed_unprocessed",
    "commands",
    "faults",
    "overlaps",
    "stale_applied",
    "deposed_writes",
    "progress",
    "outside_ownership",
    "events/kind=produced",
    "events/kind=consumed",
    "events/kind=other",
)


@pytest.fixture(scope="module")
def runs(analysed_runs: tuple[Path, Verdict]) -> Path:
    return analysed_runs[0]


@pytest.fixture(scope="module")
def verdict(analysed_runs: tuple[Path, Verdict]) -> Verdict:
    return analysed_runs[1]


def test_clean_run_passes_every_property(verdict: Verdict) -> None:
    clean = verdict.run("clean")
    assert clean.ok
    assert {p.key: p.count for p in clean.properties} == dict.fromkeys(
        ("S1", "S2", "S3", "S3-risk", "S4", "S5", "S8"), 0
    )
    assert clean.property("S8").details["applicable"] is False, "a run without a region is not judged by S8"
    assert clean.property("S3").details["expected"] == 200
    assert clean.rebalances["completed"] == 2


def test_each_violation_is_found_with_its_exact_count(verdict: Verdict) -> None:
    bad = verdict.run("violations")
    assert not bad.ok and not verdict.ok
    assert {p.key: p.count for p in bad.properties} == EXPECTED
    s1, s2, s3 = bad.property("S1").details, bad.property("S2").details, bad.property("S3").details
    assert (s1["deposed_writes"], s1["epoch_regressions"], s1["max_epoch"]) == (1, 0, 2)
    assert (s2["overlapping_pairs"], s2["deliveries_outside_ownership"]) == (1, 1)
    assert s3["examples"] == [VIOLATION_LOST]
    s4, s5 = bad.property("S4").details, bad.property("S5").details
    assert (s4["duplicate_offsets"], s4["after_crash"], s4["clean"]) == (35, 30, 5)
    assert s5["stale_by_option"] == {"start-fetcher": 1, "stop-fetcher": 1}
    assert s5["rejected_by_reason"] == {"stale": 1}
    assert bad.rebalances["unfinished"] == 1


def test_runs_without_processed_records_are_judged_on_consumed_ones(verdict: Verdict, runs: Path) -> None:
    """Journals without ``records.processed`` (older ones, clients that do not journal their work) keep S3 and S4 on
    what ``poll()`` handed out, with the same counts as before, in both readers."""
    for name, expected in (("clean", dict.fromkeys(EXPECTED, 0)), ("violations", EXPECTED)):
        run = verdict.run(name)
        assert (run.judged_on, run.property("S4").details["judged_on"]) == ("consumed", "consumed"), name
        assert {p.key: p.count for p in run.properties} == python_verdict(runs / name / "journal") == expected, name
    judged = next(line for line in verdict.table().splitlines() if line.startswith("S3, S4 judged on"))
    assert judged.split()[-3:] == ["consumed", "consumed", "consumed"]


def test_damage_is_skipped_and_counted_like_the_reference_reader(verdict: Verdict, runs: Path) -> None:
    damaged = verdict.run("damaged")
    read = damaged.read
    got = {k: getattr(read, k) for k in DAMAGE}
    assert got == DAMAGE
    assert read.unknown_types == {"consumer.teleported": 1}
    assert all(p.count == 0 for p in damaged.properties), "damage that is skipped must not be mistaken for a violation"
    # a subscription outside the topic-pattern dialect: listed, per run, and left out of S3 (not a crash)
    assert damaged.property("S3").details["invalid_regexes"] == [OUTSIDE_DIALECT]
    assert verdict.run("clean").property("S3").details["invalid_regexes"] == []
    # ...nor give a PASS: lines the checks should have used could not be (2 malformed, 1 incomplete, 1 newer)
    assert read.unusable == 4 and damaged.status == "INCONCLUSIVE" and not damaged.ok
    stats = ReadStats()
    events = list(read_journal(runs / "damaged" / "journal", stats))
    assert (read.truncated, read.malformed, read.newer_schema) == (stats.truncated, stats.malformed, stats.newer_schema)
    assert read.events == len(events) - read.unknown_event - read.incomplete
    assert read.lines == stats.lines


def test_tables_and_verdict_json_are_written(verdict: Verdict, runs: Path, spark: SparkSession) -> None:
    out = runs / "out"
    for name in TABLES:
        assert list((out / "tables" / name).glob("*.parquet")), name
    saved = json.loads((out / "verdict.json").read_text())
    assert saved["ok"] is False
    assert [r["run"] for r in saved["runs"]] == ["clean", "violations", "damaged"]
    assert saved["runs"][1]["properties"]["S3"]["count"] == EXPECTED["S3"]
    row = (
        spark.read.parquet(str(out / "tables" / "consumption"))
        .where("run = 'violations' AND topic = 't' AND partition = 0")
        .collect()
    )
    assert [(r["missing_offsets"], [(m["first"], m["last"]) for m in r["missing_ranges"]]) for r in row] == [
        (10, [(120, 129)])
    ]
    intervals = spark.read.parquet(str(out / "tables" / "ownership")).where("run = 'violations'").count()
    assert intervals == 7


def test_report_is_one_page_with_its_figures_and_the_violation_table(verdict: Verdict, runs: Path) -> None:
    out = runs / "out"
    page = (out / "report.html").read_text()
    assert "<img" not in page and not list(out.glob("*.png"))  # interactive figures, not images
    assert page.count("Plotly.newPlot(") == 3 * 3 + page.count('<tr class="violation">')  # three per run, a zoom each
    assert page.count('<tr class="violation">') == 7  # S1 1, S2 2, S3 1, S4 1, S5 2
    for run in ("clean", "violations", "damaged"):
        assert run in page


def test_verdict_table_shows_runs_side_by_side(verdict: Verdict) -> None:
    table = verdict.table()
    header = table.splitlines()[0].split()
    assert header == ["property", "clean", "violations", "damaged"]
    s3 = next(line for line in table.splitlines() if line.startswith("S3"))
    assert re.search(r"0 PASS\s+10 FAIL\s+0 INCONCLUSIVE", s3)
    assert table.splitlines()[-1].split() == ["verdict", "PASS", "FAIL", "INCONCLUSIVE"]


def test_a_journal_of_a_newer_schema_only_is_refused(spark: SparkSession, tmp_path: Path) -> None:
    journal = tmp_path / "run" / "journal"
    journal.mkdir(parents=True)
    line = {"v": 9, "ts": 1, "mono": 1, "seq": 1, "role": "r", "pid": 1, "ev": "zk.state"}
    (journal / "r.1.jsonl").write_text(json.dumps(line) + "\n")
    with pytest.raises(JournalRefusedError, match=r"no usable event in 1 line\(s\) \(1 skipped: 1 newer_schema\)"):
        run_analysis([tmp_path / "run"], tmp_path / "out")


def test_a_directory_without_journal_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(NoJournalError, match=r"no journal in .*empty"):
        run_analysis([tmp_path / "empty"], tmp_path / "out")


def test_missing_java_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from zkcoord.analysis import session

    monkeypatch.setattr(SparkSession, "getActiveSession", classmethod(lambda cls: None))
    monkeypatch.setenv("JAVA_HOME", "/nonexistent/jdk")
    with pytest.raises(SparkUnavailableError, match=r"Java not found.*needs Java 17"):
        session.get_spark("local[1]")


def test_plans_of_an_event_type_no_journal_holds_are_pruned(spark: SparkSession) -> None:
    """Without a ``region.*`` event S8's plans read an empty relation, which the optimizer knows to be empty (their
    jobs are pruned, not run); with one they read the events.  The same for ``records.processed``."""
    other = spark.range(3).select(F.lit("consumer.registered").alias("ev"), F.col("id"))

    def optimized(df: DataFrame) -> str:
        return str(df._jdf.queryExecution().optimizedPlan().toString())

    assert "LocalRelation <empty>" in optimized(
        journalled(other, {"consumer.registered", "produce.records"}, "region.")
    )
    assert "LocalRelation <empty>" not in optimized(
        journalled(other, {"consumer.registered", "region.joined"}, "region.")
    )
    assert "LocalRelation <empty>" in optimized(journalled(other, {"records.consumed"}, "records.processed"))
