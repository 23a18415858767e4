"""Who was involved in each listed S3 and S4 violation: the deliveries around a lost range and the commit past it,
the two deliveries of a duplicated range, each with the ownership interval it was delivered under (docs/analysis.md,
"Who was involved").

The missing and duplicate tables are built from merged offset ranges and no longer know the consumers, so the few
examples the verdict lists (:data:`zkcoord.analysis.assemble.EXAMPLES` per run and kind) are looked up again in the
raw tables: every look-up joins a big table with a broadcast of the small side (the examples, then their deliveries)
and aggregates per example (the small results are joined back broadcast too: no shuffle for them), all in the plan
of the verdict's one job.  ``tests/spark/test_reader_agreement.py`` holds
the rows equal to :class:`zkcoord.bench.involved.Involved`'s.

A delivery is the struct ``consumer, ts, first, last, start_ts, end_ts, generation, command, epoch``: a judged range
(:func:`zkcoord.analysis.consumption.judged`), the last ownership interval of its consumer and partition started at
or before ``ts``, and the last ``start-fetcher`` its consumer applied in the group at or before that interval began
(its name and epoch); null where the journal has none.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from zkcoord.analysis.tables import PARTITION_KEYS, of

#: An example: its run, kind (``lost``: S3, ``duplicated``: S4) and rank.
EXAMPLE = ("run", "_kind", "_n")
#: One delivery of an example: ``before``/``after`` (S3), ``delivery_a``/``delivery_b`` (S4).
PICK = (*EXAMPLE, "_side")


def explain(lost: DataFrame, duplicated: DataFrame, judged: DataFrame, intervals: DataFrame,
            events: DataFrame) -> tuple[DataFrame, DataFrame]:  # fmt: skip
    """Add who was involved to the ranked examples of S3 (``lost``) and S4 (``duplicated``): both have
    ``PARTITION_KEYS, first, last, _n`` (the rank).

    ``lost`` gets ``before`` (the judged delivery of the group and partition ending nearest below the gap: greatest
    ``last`` below its ``first``, then the latest), ``after`` (the one beginning nearest above it: least ``first``
    above its ``last``, then the earliest) and ``commit`` (``consumer, ts, offset``: the earliest
    ``offsets.committed`` of the group and partition above the gap's first offset, which says it was consumed);
    ``duplicated`` gets ``delivery_a`` and ``delivery_b``, the first two deliveries (in time order) of its first
    offset.  ``judged``: the judged ranges; ``intervals``: the ownership table; ``events``: the parsed events.
    """
    targets = F.broadcast(
        lost.select(*PARTITION_KEYS, "_n", "first", "last", F.lit("lost").alias("_kind"))
        .unionByName(duplicated.select(*PARTITION_KEYS, "_n", "first", "last", F.lit("duplicated").alias("_kind")))
        .withColumnsRenamed({"first": "_lo", "last": "_hi"})
    )
    first, last, lo, hi = F.col("first"), F.col("last"), F.col("_lo"), F.col("_hi")
    is_lost = F.col("_kind") == "lost"
    covers = ~is_lost & (first <= lo) & (last >= lo)
    near = (
        judged.select(*PARTITION_KEYS, "consumer", "ts", "first", "last")
        .join(targets, list(PARTITION_KEYS))
        .groupBy(*PARTITION_KEYS, "_kind", "_n")
        .agg(
            F.max(F.when(is_lost & (last < lo), F.struct("last", "ts", "consumer", "first"))).alias("before"),
            F.min(F.when(is_lost & (first > hi), F.struct("first", "ts", "consumer", "last"))).alias("after"),
            F.sort_array(F.collect_list(F.when(covers, F.struct("ts", "consumer", "first", "last")))).alias("covering"),
        )
    )
    sides = F.array(
        _side("before", F.col("before")),
        _side("after", F.col("after")),
        _side("delivery_a", F.get(F.col("covering"), 0)),
        _side("delivery_b", F.get(F.col("covering"), 1)),
    )
    picks = near.select(*PARTITION_KEYS, "_kind", "_n", F.inline(sides)).where(F.col("ts").isNotNull())
    folded = _granted(_owned(picks, intervals), events).groupBy(*EXAMPLE).agg(
        *[F.max(F.when(F.col("_side") == s, _delivery())).alias(s)
          for s in ("before", "after", "delivery_a", "delivery_b")]
    )  # fmt: skip
    return (
        lost.join(
            F.broadcast(folded.where(is_lost).drop("_kind", "delivery_a", "delivery_b")), ["run", "_n"], "left"
        ).join(F.broadcast(_commits(lost, events)), ["run", "_n"], "left"),
        duplicated.join(F.broadcast(folded.where(~is_lost).drop("_kind", "before", "after")), ["run", "_n"], "left"),
    )


def _side(name: str, d: Column) -> Column:
    """One delivery of an example, flat (null fields when there is none: filtered out after ``inline``)."""
    return F.struct(F.lit(name).alias("_side"), *[d.getField(k).alias(k) for k in ("consumer", "ts", "first", "last")])


def _owned(picks: DataFrame, intervals: DataFrame) -> DataFrame:
    """``picks`` with ``start_ts, end_ts, generation`` of the last interval of their consumer and partition started
    at or before their ``ts`` (null: none)."""
    small = F.broadcast(picks.select(*PARTITION_KEYS, "_kind", "_n", "_side", "consumer", F.col("ts").alias("_ts")))
    found = (
        intervals.select(*PARTITION_KEYS, "consumer", "start_ts", "end_ts", "generation")
        .join(small, [*PARTITION_KEYS, "consumer"])
        .where(F.col("start_ts") <= F.col("_ts"))
        .groupBy(*PICK)
        .agg(F.max(F.struct("start_ts", "end_ts", "generation")).alias("_own"))
        .select(*PICK, "_own.*")
    )
    return picks.join(F.broadcast(found), list(PICK), "left")


def _granted(picks: DataFrame, events: DataFrame) -> DataFrame:
    """``picks`` (with their interval) with ``command, epoch``: the last ``start-fetcher`` their consumer applied in
    the group at or before the interval began (null: none, or no interval)."""
    small = F.broadcast(
        picks.where(F.col("start_ts").isNotNull()).select(*PICK, "group", "consumer", F.col("start_ts").alias("_start"))
    )
    found = (
        of(events, "command.applied")
        .where(F.col("option") == "start-fetcher")
        .select("run", "group", "consumer", "ts", "name", "epoch")
        .join(small, ["run", "group", "consumer"])
        .where(F.col("ts") <= F.col("_start"))
        .groupBy(*PICK)
        .agg(F.max(F.struct("ts", "name", "epoch")).alias("_grant"))
        .select(*PICK, F.col("_grant.name").alias("command"), F.col("_grant.epoch").alias("epoch"))
    )
    return picks.join(F.broadcast(found), list(PICK), "left")


def _delivery() -> Column:
    return F.struct("consumer", "ts", "first", "last", "start_ts", "end_ts", "generation", "command", "epoch")


def _commits(lost: DataFrame, events: DataFrame) -> DataFrame:
    """``run, _n, commit``: per lost range, the earliest commit of its group and partition above its first offset."""
    small = F.broadcast(lost.select(*PARTITION_KEYS, "_n", F.col("first").alias("_lo")))
    return (
        of(events, "offsets.committed")
        .where(F.col("offset").isNotNull())
        .select(*PARTITION_KEYS, "consumer", "ts", "offset")
        .join(small, list(PARTITION_KEYS))
        .where(F.col("offset") > F.col("_lo"))
        .groupBy("run", "_n")
        .agg(F.min(F.struct("ts", "consumer", "offset")).alias("_c"))
        .select("run", "_n", F.struct("_c.consumer", "_c.ts", "_c.offset").alias("commit"))
    )
