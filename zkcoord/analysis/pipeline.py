"""``run_analysis``: journals in, Parquet tables, ``verdict.json`` and ``report.html`` out.

The one implementation of the verdict: ``zkcoord analyze`` and ``zkcoord demo`` both call :func:`run_analysis`.
All runs are read in one pass (every table carries a ``run`` column); each run gets its own verdict.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from py4j.protocol import Py4JError  # type: ignore[import-untyped]  # py4j ships no type information
from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from zkcoord.analysis import checks, consumption, load, ranges, tables
from zkcoord.analysis.errors import AnalysisError, JournalRefusedError
from zkcoord.analysis.report import ReportData, render_report
from zkcoord.analysis.schema import MAX_VERSION
from zkcoord.analysis.session import DEFAULT_LOCAL_MASTER, get_spark, spark_errors
from zkcoord.analysis.verdict import PROPERTIES, PropertyResult, ReadCounts, RunVerdict, Verdict

Say = Callable[[str], None]
Rows = dict[str, dict[str, Any]]

#: How many offending rows of each kind verdict.json lists (the tables hold them all).
EXAMPLES = 10


def run_analysis(
    run_dirs: Sequence[str | os.PathLike[str]],
    out_dir: str | os.PathLike[str],
    master: str | None = DEFAULT_LOCAL_MASTER,
    *,
    report: bool = True,
    spark: SparkSession | None = None,
    conf: Mapping[str, str] | None = None,
    progress: Say | None = None,
) -> Verdict:
    """Analyse the journals of ``run_dirs`` and write tables, ``verdict.json`` and the report into ``out_dir``.

    :param run_dirs: run directories (``RUN/journal/*.jsonl``) or journal directories (``DIR/*.jsonl``).
    :param master: Spark master (``local[N]``, ``spark://HOST:PORT``, ``yarn``); ``None``: spark-submit's choice.
    :param spark: use this session instead of the active one or a new one (then it is not stopped).
    :param conf: extra Spark settings for a session this call creates.
    :param progress: called with one line per stage (the CLI prints them).
    :raises AnalysisError: no journal, no Java, an unreadable journal, a failed Spark job: one line each.
    """
    started = time.monotonic()
    say: Say = progress or (lambda _line: None)
    runs = load.locate(run_dirs)
    out = Path(out_dir).expanduser().resolve()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise AnalysisError(f"cannot write the analysis to {out}: {e.strerror}") from e
    created = False
    if spark is None:
        say(f"starting Spark ({master or 'spark-submit master'})")
        spark, created = get_spark(master, conf)
    try:
        with spark_errors("analysing the journals"):
            verdicts, data = _analyse(spark, runs, out, say)
    finally:
        if created:
            spark.stop()
    verdict = Verdict(runs=tuple(verdicts), out_dir=str(out), seconds=time.monotonic() - started)
    (out / "verdict.json").write_text(verdict.to_json() + "\n")
    if report:
        say("rendering the report")
        render_report(out, verdict, data)
    return verdict


def _persist(df: DataFrame) -> DataFrame:
    return df.persist(StorageLevel.MEMORY_AND_DISK)


def _by_run(df: DataFrame, *aggs: Any) -> Rows:
    return {row["run"]: row.asDict() for row in df.groupBy("run").agg(*aggs).collect()}


def _examples(df: DataFrame, order: Sequence[str], columns: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
    """Up to :data:`EXAMPLES` rows per run, for verdict.json."""
    ranked = df.withColumn("_n", F.row_number().over(Window.partitionBy("run").orderBy(*order)))
    out: dict[str, list[dict[str, Any]]] = {}
    for row in ranked.where(F.col("_n") <= EXAMPLES).orderBy("run", "_n").collect():
        out.setdefault(row["run"], []).append({c: row[c] for c in columns})
    return out


def _java_regex_ok(spark: SparkSession, regex: str) -> bool:
    """Whether Java (which ``rlike`` uses) compiles ``regex``: an invalid one would fail the whole job."""
    jvm = spark.sparkContext._jvm
    try:
        jvm.java.util.regex.Pattern.compile(f"^(?:{regex})$")  # type: ignore[union-attr]  # the JVM is up here
    except Py4JError:
        return False
    return True


def _read(
    spark: SparkSession, runs: Sequence[load.RunInput], say: Say
) -> tuple[DataFrame, dict[str, ReadCounts], DataFrame]:
    """Parse every line once; return the usable events (cached), the read counts per run and the runs' time bounds."""
    files = sum(len(r.files) for r in runs)
    say(f"reading {files} journal file(s) of {len(runs)} run(s)")
    classified = _persist(load.classify(load.read_lines(spark, runs)))
    stats = {row["run"]: row.asDict() for row in load.skip_counts(classified).collect()}
    unknown: dict[str, dict[str, int]] = {}
    for row in load.unknown_event_types(classified).collect():
        unknown.setdefault(row["run"], {})[str(row["ev"])] = int(row["count"])
    gaps = {row["run"]: int(row["seq_gaps"] or 0) for row in load.sequence_gaps(classified).collect()}
    reads: dict[str, ReadCounts] = {}
    for run in runs:
        s = stats.get(run.name, {})
        counts = ReadCounts(
            files=len(run.files),
            lines=int(s.get("lines", 0)),
            events=int(s.get("events", 0)),
            seq_gaps=gaps.get(run.name, 0),
            unknown_types=unknown.get(run.name, {}),
            **{reason: int(s.get(reason, 0)) for reason in load.SKIP_REASONS},
        )
        if counts.events == 0:
            classified.unpersist()
            raise JournalRefusedError(
                f"{run.journal_dir}: no usable event in {counts.lines} line(s) ({counts.summary()}); "
                f"this zkcoord reads journal schema version <= {MAX_VERSION}"
            )
        reads[run.name] = counts
    bounds = spark.createDataFrame(
        [(name, int(stats[name]["first_ts"]), int(stats[name]["last_ts"])) for name in reads],
        "run string, first_ts long, last_ts long",
    )
    return classified, reads, bounds


def _analyse(
    spark: SparkSession, runs: Sequence[load.RunInput], out: Path, say: Say
) -> tuple[list[RunVerdict], ReportData]:
    classified, reads, bounds = _read(spark, runs, say)
    events = load.usable(classified)
    produced = _persist(tables.produced_ranges(events))
    consumed = _persist(tables.consumed_ranges(events))
    other = _persist(events.where(~F.col("ev").isin(*load.RANGE_EVENTS)))
    for df in (produced, consumed, other):
        df.count()
    classified.unpersist()

    say("computing ownership, rebalances and commands")
    intervals = _persist(tables.ownership(other, tables.last_seen(other, consumed)))
    rebalances = _persist(tables.rebalances(other))
    terms = _persist(tables.terms(other, bounds))
    stale = _persist(checks.stale_applied(other))
    deposed = checks.deposed_writes(other)
    overlaps = _persist(checks.overlaps(intervals))
    outside = _persist(checks.outside_ownership(consumed, intervals))

    say("merging offset ranges")
    tp = ("run", "topic", "partition")
    produced_merged = _persist(ranges.merge_ranges(produced, tp))
    consumed_merged = _persist(ranges.merge_ranges(consumed, tables.PARTITION_KEYS))
    registrations = tables.of(other, "consumer.registered")
    invalid = sorted({str(r["key"]) for r in checks.regex_keys(registrations).collect()} - {""})
    invalid = [regex for regex in invalid if not _java_regex_ok(spark, regex)]
    subscribed = _persist(checks.subscribed_topics(registrations, produced.select("run", "topic").distinct(), invalid))
    missing = _persist(
        consumption.missing_ranges(consumption.expected_ranges(produced_merged, subscribed), consumed_merged)
    )
    duplicates = _persist(consumption.duplicate_ranges(consumed_merged, checks.crash_tails(other, consumed)))
    per_partition = consumption.consumption(produced_merged, consumed_merged, subscribed, missing, duplicates)

    say(f"writing tables to {out / 'tables'}")
    small = {
        "terms": terms,
        "rebalances": rebalances,
        "ownership": intervals,
        "consumption": per_partition,
        "missing_ranges": missing,
        "duplicate_ranges": duplicates,
        "commands": tables.commands(other, stale),
        "faults": tables.faults(other),
        "overlaps": overlaps,
        "stale_applied": stale,
        "deposed_writes": deposed,
        "progress": tables.progress(produced, consumed, bounds),
    }
    for name, df in small.items():
        df.coalesce(1).write.mode("overwrite").parquet(str(out / "tables" / name))
    outside.write.mode("overwrite").parquet(str(out / "tables" / "outside_ownership"))

    say("computing the verdict")
    verdicts = _verdicts(
        reads,
        runs,
        terms=_by_run(
            terms,
            F.count(F.lit(1)).alias("elections"),
            F.count_if("epoch_regression").alias("regressions"),
            F.max("epoch").alias("max_epoch"),
        ),
        deposed=_by_run(deposed, F.count(F.lit(1)).alias("n")),
        overlaps=_by_run(overlaps, F.count(F.lit(1)).alias("n")),
        overlap_examples=_examples(
            overlaps,
            ["group", "topic", "partition", "start_a"],
            [
                "group",
                "topic",
                "partition",
                "consumer_a",
                "start_a",
                "end_a",
                "consumer_b",
                "start_b",
                "end_b",
                "overlap_ms",
            ],
        ),
        outside=_by_run(outside, F.count(F.lit(1)).alias("n")),
        intervals=_by_run(intervals, F.count(F.lit(1)).alias("n")),
        missing=_by_run(missing, F.sum("count").alias("offsets"), F.count(F.lit(1)).alias("ranges")),
        missing_examples=_examples(
            missing, ["group", "topic", "partition", "first"], ["group", "topic", "partition", "first", "last", "count"]
        ),
        duplicates=_by_run(
            duplicates,
            F.sum("count").alias("offsets"),
            F.sum(F.when(F.col("after_crash"), F.col("count"))).alias("after_crash"),
        ),
        totals=_by_run(
            per_partition,
            F.sum(F.when(F.col("subscribed"), F.col("produced"))).alias("expected"),
            F.sum("delivered").alias("delivered"),
            F.sum("consumed_distinct").alias("consumed_distinct"),
            F.sum("duplicate_deliveries").alias("duplicate_deliveries"),
            F.countDistinct("group").alias("groups"),
        ),
        stale=_by_run(
            stale,
            F.count(F.lit(1)).alias("n"),
            F.count_if(F.col("option") == "start-fetcher").alias("start"),
            F.count_if(F.col("option") == "stop-fetcher").alias("stop"),
        ),
        stale_examples=_examples(
            stale, ["applied_ts"], ["group", "consumer", "option", "epoch", "generation", "applied_ts", "why"]
        ),
        rebalance_stats=_by_run(
            rebalances,
            F.count(F.lit(1)).alias("attempts"),
            *[
                F.count_if(F.col("outcome") == o).alias(o)
                for o in ("completed", "aborted", "retrying", "failed", "unfinished")
            ],
            F.percentile(F.col("latency_ms"), [0.5, 0.95]).alias("latency_ms_p"),
            F.max("latency_ms").alias("latency_ms_max"),
            F.percentile(F.col("stw_ms"), [0.5, 0.95]).alias("stw_ms_p"),
            F.max("stw_ms").alias("stw_ms_max"),
            F.sum("moved").alias("moved"),
        ),
        faults=_by_run(tables.faults(other), F.count(F.lit(1)).alias("n")),
        invalid_regexes=invalid,
    )
    rejected: dict[str, dict[str, int]] = {}
    for row in checks.rejections(other).collect():
        rejected.setdefault(row["run"], {})[str(row["reason"])] = int(row["count"])
    for v in verdicts:
        s5 = v.property("S5")
        s5.details["rejected"] = sum(rejected.get(v.run, {}).values())
        s5.details["rejected_by_reason"] = rejected.get(v.run, {})

    say("collecting report data")
    data = ReportData.collect(
        bounds=bounds,
        intervals=intervals,
        overlaps=overlaps,
        rebalances=rebalances,
        faults=small["faults"],
        progress=small["progress"],
    )
    for df in (
        produced,
        consumed,
        other,
        intervals,
        rebalances,
        terms,
        stale,
        overlaps,
        outside,
        produced_merged,
        consumed_merged,
        subscribed,
        missing,
        duplicates,
    ):
        df.unpersist()
    return verdicts, data


def _n(rows: Rows, run: str, key: str = "n") -> int:
    value = rows.get(run, {}).get(key)
    return int(value) if value is not None else 0


def _verdicts(reads: dict[str, ReadCounts], runs: Sequence[load.RunInput], **f: Any) -> list[RunVerdict]:
    out = []
    for run in runs:
        name = run.name
        t = f["terms"].get(name, {})
        deposed, regressions = _n(f["deposed"], name), _n(f["terms"], name, "regressions")
        overlap, outside = _n(f["overlaps"], name), _n(f["outside"], name)
        dup_offsets, after_crash = _n(f["duplicates"], name, "offsets"), _n(f["duplicates"], name, "after_crash")
        totals = f["totals"].get(name, {})
        props = (
            PropertyResult(
                "S1",
                PROPERTIES["S1"],
                deposed + regressions,
                {
                    "deposed_writes": deposed,
                    "epoch_regressions": regressions,
                    "elections": int(t.get("elections") or 0),
                    "max_epoch": t.get("max_epoch"),
                },
            ),
            PropertyResult(
                "S2",
                PROPERTIES["S2"],
                overlap + outside,
                {
                    "overlapping_pairs": overlap,
                    "deliveries_outside_ownership": outside,
                    "intervals": _n(f["intervals"], name),
                    "examples": f["overlap_examples"].get(name, []),
                },
            ),
            PropertyResult(
                "S3",
                PROPERTIES["S3"],
                _n(f["missing"], name, "offsets"),
                {
                    "missing_offsets": _n(f["missing"], name, "offsets"),
                    "missing_ranges": _n(f["missing"], name, "ranges"),
                    "expected": int(totals.get("expected") or 0),
                    "consumed_distinct": int(totals.get("consumed_distinct") or 0),
                    "groups": int(totals.get("groups") or 0),
                    "invalid_regexes": f["invalid_regexes"],
                    "examples": f["missing_examples"].get(name, []),
                },
            ),
            PropertyResult(
                "S4",
                PROPERTIES["S4"],
                dup_offsets - after_crash,
                {
                    "duplicate_offsets": dup_offsets,
                    "after_crash": after_crash,
                    "clean": dup_offsets - after_crash,
                    "duplicate_deliveries": int(totals.get("duplicate_deliveries") or 0),
                    "delivered": int(totals.get("delivered") or 0),
                },
            ),
            PropertyResult(
                "S5",
                PROPERTIES["S5"],
                _n(f["stale"], name),
                {
                    "stale_applied": _n(f["stale"], name),
                    "stale_by_option": {
                        "start-fetcher": _n(f["stale"], name, "start"),
                        "stop-fetcher": _n(f["stale"], name, "stop"),
                    },
                    "examples": f["stale_examples"].get(name, []),
                },
            ),
        )
        out.append(
            RunVerdict(
                run=name,
                journal=str(run.journal_dir),
                read=reads[name],
                properties=props,
                rebalances=_rebalance_stats(f["rebalance_stats"].get(name, {})),
                faults=_n(f["faults"], name),
            )
        )
    return out


def _rebalance_stats(row: dict[str, Any]) -> dict[str, Any]:
    stats: dict[str, Any] = {
        k: int(row.get(k) or 0)
        for k in ("attempts", "completed", "aborted", "retrying", "failed", "unfinished", "moved")
    }
    for name in ("latency_ms", "stw_ms"):
        p = row.get(f"{name}_p") or [None, None]
        stats[f"{name}_p50"], stats[f"{name}_p95"] = (None if v is None else round(float(v), 2) for v in p)
        top = row.get(f"{name}_max")
        stats[f"{name}_max"] = None if top is None else round(float(top), 2)
    return stats
