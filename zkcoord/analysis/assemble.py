"""From the computed tables to one :class:`~zkcoord.analysis.verdict.RunVerdict` per run.

Spark aggregates every table per run in one job (long rows ``run, metric, value, text``); the rest is plain Python.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from zkcoord.analysis.involved import explain
from zkcoord.analysis.load import RunInput
from zkcoord.analysis.ranges import length, merge_ranges
from zkcoord.analysis.regions import VIOLATION_COLUMNS
from zkcoord.analysis.tables import PARTITION_KEYS
from zkcoord.analysis.verdict import PROPERTIES, PropertyResult, ReadCounts, RunVerdict, judged_on_label

Rows = dict[str, dict[str, Any]]

#: How many offending rows of each kind verdict.json lists (the tables hold them all).
EXAMPLES = 10

#: The columns of an S3 or S4 example before who was involved (:mod:`zkcoord.analysis.involved`).
RANGE_EXAMPLE = ("group", "topic", "partition", "first", "last", "count", "judged_on")

OUTCOMES = ("completed", "aborted", "retrying", "failed", "unfinished")


@dataclass(frozen=True)
class Tables:
    """The DataFrames the verdict is computed from (all keyed by ``run``)."""

    terms: DataFrame
    deposed: DataFrame
    intervals: DataFrame
    overlaps: DataFrame
    outside: DataFrame
    missing: DataFrame
    duplicates: DataFrame
    #: S3-risk: per consumer, the islands of offsets committed before they were processed; and the commits judged
    unprocessed: DataFrame
    commits: DataFrame
    consumption: DataFrame
    stale: DataFrame
    rejections: DataFrame
    rebalances: DataFrame
    faults: DataFrame
    #: S8: the violation rows (zkcoord.analysis.regions.VIOLATION_COLUMNS) and the long rows of its numbers
    region_state: DataFrame
    region_summary: DataFrame
    #: what the S3 and S4 examples are explained from (:func:`zkcoord.analysis.involved.explain`): the judged ranges
    #: and the parsed events other than ranges
    judged: DataFrame
    events: DataFrame


def metrics(df: DataFrame, **aggs: Column) -> DataFrame:
    """Aggregate ``df`` per run into long rows ``run, metric, value, text`` (text null), one per aggregate."""
    wide = df.groupBy("run").agg(*[c.cast("double").alias(k) for k, c in aggs.items()])
    pairs = F.array(*[F.struct(F.lit(k).alias("metric"), F.col(k).alias("value")) for k in aggs])
    return wide.select("run", F.explode(pairs).alias("m")).select(
        "run", "m.metric", "m.value", F.lit(None).cast("string").alias("text")
    )


def ranked(df: DataFrame, order: Sequence[str]) -> DataFrame:
    """The first :data:`EXAMPLES` rows of each run in ``order``, ranked (``_n``, from 1)."""
    rank = F.row_number().over(Window.partitionBy("run").orderBy(*order))
    return df.withColumn("_n", rank).where(F.col("_n") <= EXAMPLES)


def as_examples(df: DataFrame, name: str, columns: Sequence[str]) -> DataFrame:
    """Ranked rows (:func:`ranked`) as JSON: ``run, metric (example:<name>), value (rank), text``."""
    return df.select(
        "run",
        F.lit(f"example:{name}").alias("metric"),
        F.col("_n").cast("double").alias("value"),
        F.to_json(F.struct(*columns), {"ignoreNullFields": "false"}).alias("text"),
    )


def examples(df: DataFrame, name: str, order: Sequence[str], columns: Sequence[str]) -> DataFrame:
    """Up to :data:`EXAMPLES` rows per run as JSON (:func:`as_examples`)."""
    return as_examples(ranked(df, order), name, columns)


def _collect(parts: Sequence[DataFrame]) -> tuple[Rows, dict[str, dict[str, list[dict[str, Any]]]]]:
    """One Spark job for every number of the verdict: ``({run: {metric: value}}, {run: {name: [example]}})``."""
    union = parts[0]
    for part in parts[1:]:
        union = union.unionByName(part)
    numbers: Rows = {}
    found: dict[str, dict[str, list[tuple[float, dict[str, Any]]]]] = {}
    for row in union.collect():
        metric = str(row["metric"])
        if metric.startswith("example:"):
            found.setdefault(row["run"], {}).setdefault(metric[8:], []).append((row["value"], json.loads(row["text"])))
        else:
            numbers.setdefault(row["run"], {})[metric] = row["value"]
    shown = {
        run: {k: [e for _, e in sorted(v, key=lambda x: x[0])] for k, v in kinds.items()}
        for run, kinds in found.items()
    }
    return numbers, shown


def run_verdicts(
    t: Tables, runs: Sequence[RunInput], reads: dict[str, ReadCounts], invalid_regexes: Mapping[str, Sequence[str]]
) -> list[RunVerdict]:
    """Aggregate the tables per run (one Spark job) and judge S1-S5 and S3-risk (definitions in docs/analysis.md).

    ``invalid_regexes``: per run, the regex subscriptions outside the topic-pattern dialect, which S3 left out.
    """
    n = F.count(F.lit(1))
    order = ["group", "topic", "partition", "first"]
    lost, duplicated = explain(
        ranked(t.missing, order),
        # a group in a consistent region consumes again after each reset by design: S8 judges it, not S4
        ranked(t.duplicates.where(~F.col("after_crash") & ~F.col("region")), order),
        t.judged,
        t.intervals,
        t.events,
    )
    parts = [
        metrics(t.terms, elections=n, regressions=F.count_if("epoch_regression"), max_epoch=F.max("epoch")),
        metrics(t.deposed, deposed=n),
        metrics(t.overlaps, overlaps=n),
        metrics(t.outside, outside=n),
        metrics(t.intervals, intervals=n),
        metrics(t.missing, missing=F.sum("count"), missing_ranges=n),
        metrics(t.duplicates, dups=F.sum("count"), after_crash=F.sum(F.when(F.col("after_crash"), F.col("count")))),
        metrics(t.duplicates.where(~F.col("after_crash") & ~F.col("region")), clean_ranges=n),
        metrics(t.duplicates.where(~F.col("after_crash") & F.col("region")), region_dups=F.sum("count")),
        # offsets at risk are counted once per partition, however many consumers committed them unprocessed
        metrics(merge_ranges(t.unprocessed, PARTITION_KEYS), at_risk=F.sum(length())),
        metrics(t.unprocessed, at_risk_ranges=n, at_risk_consumers=F.count_distinct("group", "consumer")),
        metrics(t.commits, commits_judged=n),
        metrics(
            t.consumption,
            expected=F.sum(F.when(F.col("subscribed"), F.col("produced"))),
            delivered=F.sum("delivered"),
            consumed_distinct=F.sum("consumed_distinct"),
            duplicate_deliveries=F.sum("duplicate_deliveries"),
            processed_distinct=F.sum("processed_distinct"),
            groups=F.count_distinct("group"),
            groups_on_processed=F.count_distinct(F.when(F.col("judged_on") == "processed", F.col("group"))),
        ),
        metrics(
            t.stale,
            stale=n,
            stale_start=F.count_if(F.col("option") == "start-fetcher"),
            stale_stop=F.count_if(F.col("option") == "stop-fetcher"),
        ),
        metrics(
            t.rebalances,
            attempts=n,
            moved=F.sum("moved"),
            **{o: F.count_if(F.col("outcome") == o) for o in OUTCOMES},
            **{
                f"{c}_{q}": F.percentile(F.col(c), p)
                for c in ("latency_ms", "stw_ms")
                for q, p in (("p50", 0.5), ("p95", 0.95))
            },
            latency_ms_max=F.max("latency_ms"),
            stw_ms_max=F.max("stw_ms"),
        ),
        metrics(t.faults, faults=n),
        metrics(t.region_state, s8=n),
        t.region_summary,
        t.rejections.select(
            "run",
            F.concat(F.lit("rejected:"), F.col("reason")).alias("metric"),
            F.col("count").cast("double").alias("value"),
            F.lit(None).cast("string").alias("text"),
        ),
        examples(
            t.overlaps,
            "overlaps",
            ["group", "topic", "partition", "start_a", "consumer_a", "consumer_b"],
            ["group", "topic", "partition", "consumer_a", "start_a", "end_a", "consumer_b", "start_b", "end_b",
             "overlap_ms", "generation_a", "generation_b", "command_a", "epoch_a", "command_b", "epoch_b"],
        ),
        examples(
            t.outside, "outside", ["ts", "group", "consumer", "topic", "partition", "first"],
            ["group", "topic", "partition", "consumer", "ts", "first", "last"],
        ),
        examples(
            t.deposed, "deposed", ["ts", "group", "consumer"],
            ["ts", "role", "pid", "group", "consumer", "option", "epoch", "elected_epoch", "generation"],
        ),
        as_examples(lost, "missing", [*RANGE_EXAMPLE, "before", "after", "commit"]),
        as_examples(duplicated, "duplicates", [*RANGE_EXAMPLE, "delivery_a", "delivery_b"]),
        examples(
            t.unprocessed.withColumn("count", length()), "at_risk",
            ["group", "topic", "partition", "first", "consumer"],
            ["group", "consumer", "topic", "partition", "first", "last", "count"],
        ),
        examples(
            t.stale, "stale", ["applied_ts", "group", "consumer"],
            ["group", "consumer", "name", "option", "epoch", "generation", "seen_epoch", "seen_generation",
             "applied_ts", "why"],
        ),
        examples(t.region_state, "region_state", ["group", "region", "checkpoint", "key"], list(VIOLATION_COLUMNS[1:])),
    ]  # fmt: skip
    numbers, shown = _collect(parts)
    verdicts = []
    for run in runs:
        name = run.name
        refused = invalid_regexes.get(name, ())
        verdicts.append(_judge(run, reads[name], numbers.get(name, {}), shown.get(name, {}), refused))
    return verdicts


def _judge(
    run: RunInput,
    read: ReadCounts,
    m: dict[str, Any],
    shown: dict[str, list[dict[str, Any]]],
    invalid_regexes: Sequence[str],
) -> RunVerdict:
    def n(key: str) -> int:
        value = m.get(key)
        return int(value) if value is not None else 0

    rejected = {k[9:]: n(k) for k in m if k.startswith("rejected:")}
    on_processed = n("groups_on_processed")
    on_consumed = n("groups") - on_processed
    judged_on = judged_on_label(on_processed, on_consumed)
    props = (
        PropertyResult("S1", PROPERTIES["S1"], n("deposed") + n("regressions"), {
            "deposed_writes": n("deposed"),
            "epoch_regressions": n("regressions"),
            "elections": n("elections"),
            "max_epoch": n("max_epoch") if m.get("max_epoch") is not None else None,
            "examples": shown.get("deposed", []),
        }),
        PropertyResult("S2", PROPERTIES["S2"], n("overlaps") + n("outside"), {
            "overlapping_pairs": n("overlaps"),
            "deliveries_outside_ownership": n("outside"),
            "intervals": n("intervals"),
            "examples": shown.get("overlaps", []),
            "outside_examples": shown.get("outside", []),
        }),
        PropertyResult("S3", PROPERTIES["S3"], n("missing"), {
            "judged_on": judged_on,
            "missing_offsets": n("missing"),
            "missing_ranges": n("missing_ranges"),
            "expected": n("expected"),
            "consumed_distinct": n("consumed_distinct"),
            "processed_distinct": n("processed_distinct"),
            "groups": n("groups"),
            "groups_on_processed": on_processed,
            "groups_on_consumed": on_consumed,
            "invalid_regexes": list(invalid_regexes),
            "examples": shown.get("missing", []),
        }),
        PropertyResult("S3-risk", PROPERTIES["S3-risk"], n("at_risk"), {
            "offsets_at_risk": n("at_risk"),
            "ranges": n("at_risk_ranges"),
            "consumers": n("at_risk_consumers"),
            "commits_judged": n("commits_judged"),
            "examples": shown.get("at_risk", []),
        }),
        PropertyResult("S4", PROPERTIES["S4"], n("dups") - n("after_crash") - n("region_dups"), {
            "judged_on": judged_on,
            "duplicate_offsets": n("dups"),
            "after_crash": n("after_crash"),
            "in_regions": n("region_dups"),
            "clean": n("dups") - n("after_crash") - n("region_dups"),
            "clean_ranges": n("clean_ranges"),
            "examples": shown.get("duplicates", []),
            "duplicate_deliveries": n("duplicate_deliveries"),
            "delivered": n("delivered"),
        }),
        PropertyResult("S5", PROPERTIES["S5"], n("stale"), {
            "stale_applied": n("stale"),
            "stale_by_option": {"start-fetcher": n("stale_start"), "stop-fetcher": n("stale_stop")},
            "rejected": sum(rejected.values()),
            "rejected_by_reason": rejected,
            "examples": shown.get("stale", []),
        }),
        PropertyResult("S8", PROPERTIES["S8"], n("s8"), {
            "applicable": n("regions") > 0,
            "regions": n("regions"),
            "checkpoints": n("checkpoints"),
            "complete_checkpoints": n("complete_checkpoints"),
            "resets": n("resets"),
            "records_journalled": n("records_journalled"),
            "examples": shown.get("region_state", []),
        }),
    )  # fmt: skip
    rebalances: dict[str, Any] = {k: n(k) for k in ("attempts", *OUTCOMES, "moved")}
    for c in ("latency_ms", "stw_ms"):
        for q in ("p50", "p95", "max"):
            value = m.get(f"{c}_{q}")
            rebalances[f"{c}_{q}"] = None if value is None else round(float(value), 2)
    return RunVerdict(
        run=run.name,
        journal=str(run.journal_dir),
        read=read,
        properties=props,
        rebalances=rebalances,
        faults=n("faults"),
    )
