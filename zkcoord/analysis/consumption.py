"""Consumption per partition (S3 missing, S4 duplicates), computed on offset ranges.

Inputs are the islands of :func:`zkcoord.analysis.ranges.merge_ranges`: ``produced_merged`` per ``run, topic,
partition``; ``consumed_merged`` and ``processed_merged`` per ``run, group, topic, partition``.

S3 and S4 judge each group on what its application finished: on its ``records.processed`` ranges if its journals
hold any, else (old journals, clients that do not journal their work) on its ``records.consumed`` ranges, what
``poll()`` handed out.  :func:`processing_groups` names the first kind, :func:`judged` picks the ranges, and every
row of S3 and S4 says which in its ``judged_on`` column.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from zkcoord.analysis.ranges import islands, length, merge_ranges, overlap_islands, segments, sweep
from zkcoord.analysis.tables import PARTITION_KEYS

TOPIC_PARTITION = ("run", "topic", "partition")
GROUP_KEYS = ["run", "group"]


def processing_groups(processed: DataFrame) -> DataFrame:
    """``run, group`` of every group with a ``records.processed`` range (``processed``: ranges or islands of them):
    the groups S3 and S4 judge on what their application processed."""
    return processed.select(*GROUP_KEYS).distinct()


def judged(consumed: DataFrame, processed: DataFrame, groups: DataFrame) -> DataFrame:
    """What S3 and S4 judge: the ``processed`` rows of the groups in ``groups`` (:func:`processing_groups`) and the
    ``consumed`` rows of every other group, with ``judged_on`` (``processed`` or ``consumed``).  Both inputs have the
    same columns: ranges (:func:`zkcoord.analysis.tables.consumed_ranges`) or their islands."""
    others = consumed.join(F.broadcast(groups), GROUP_KEYS, "left_anti")
    return processed.withColumn("judged_on", F.lit("processed")).unionByName(
        others.withColumn("judged_on", F.lit("consumed"))
    )


def judged_on(rows: DataFrame, groups: DataFrame) -> DataFrame:
    """``rows`` (with ``run, group``) and the column ``judged_on`` of their group (see :func:`judged`)."""
    flags = groups.withColumn("_processing", F.lit(True))
    on: Column = F.when(F.col("_processing"), F.lit("processed")).otherwise(F.lit("consumed"))
    return rows.join(F.broadcast(flags), GROUP_KEYS, "left").withColumn("judged_on", on).drop("_processing")


def expected_ranges(produced_merged: DataFrame, subscribed: DataFrame) -> DataFrame:
    """What each group should consume: the produced islands of every topic it subscribes to (``PARTITION_KEYS``,
    ``first, last``)."""
    return (
        islands(produced_merged, TOPIC_PARTITION)
        .join(subscribed, ["run", "topic"])
        .select(*PARTITION_KEYS, "first", "last")
    )


def missing_ranges(expected: DataFrame, judged_merged: DataFrame, groups: DataFrame) -> DataFrame:
    """S3: the expected offsets that the group's judged ranges (:func:`judged`) do not cover, as ranges:
    ``PARTITION_KEYS, first, last, count, judged_on`` (``processed``: never processed; ``consumed``: never handed
    to the group's applications)."""
    gaps = sweep(expected, islands(judged_merged, PARTITION_KEYS), PARTITION_KEYS, "minus")
    return judged_on(gaps.withColumn("count", length()), groups)


def duplicate_ranges(judged_merged: DataFrame, tails: DataFrame, groups: DataFrame) -> DataFrame:
    """S4: offsets of a group's judged ranges (:func:`judged`) covered more than once, as ranges, each marked
    ``after_crash`` when it lies in a lost consumer's uncommitted tail (``tails``, from
    :func:`zkcoord.analysis.checks.crash_tails`).

    Columns: ``PARTITION_KEYS, first, last, count, after_crash, judged_on``.
    """
    dups = overlap_islands(judged_merged, PARTITION_KEYS)
    lost = islands(merge_ranges(tails, PARTITION_KEYS), PARTITION_KEYS)
    found = (
        segments(dups, lost, PARTITION_KEYS)
        .where(F.col("in_a") > 0)
        .select(*PARTITION_KEYS, "first", "last", length().alias("count"), (F.col("in_b") > 0).alias("after_crash"))
    )
    return judged_on(found, groups)


def consumption(
    produced_merged: DataFrame,
    consumed_merged: DataFrame,
    subscribed: DataFrame,
    missing: DataFrame,
    duplicates: DataFrame,
    *,
    processed_merged: DataFrame,
    groups: DataFrame,
) -> DataFrame:
    """One row per ``run, group, topic, partition`` a group subscribes to, consumed from or processed from.

    Columns: ``subscribed``, ``produced`` (distinct offsets produced to the partition), ``delivered`` (records handed
    to the group's applications, repeats included), ``consumed_distinct``, ``duplicate_offsets`` (offsets judged
    more than once), ``duplicates_after_crash`` (of those, in a lost consumer's uncommitted tail),
    ``duplicate_deliveries`` (``delivered - consumed_distinct``), ``missing_offsets`` and ``missing_ranges``
    (an array of ``struct(first, last)``), ``processed`` (records the applications finished, repeats included),
    ``processed_distinct`` and ``judged_on``: what the missing and duplicate offsets are counted on (:func:`judged`).
    """
    produced = produced_merged.groupBy(*TOPIC_PARTITION).agg(F.sum(length()).alias("produced"))
    wanted = produced.join(subscribed, ["run", "topic"]).select(*PARTITION_KEYS, F.lit(True).alias("subscribed"))
    consumed = consumed_merged.groupBy(*PARTITION_KEYS).agg(
        F.sum("delivered").alias("delivered"), F.sum(length()).alias("consumed_distinct")
    )
    processed = processed_merged.groupBy(*PARTITION_KEYS).agg(
        F.sum("delivered").alias("processed"), F.sum(length()).alias("processed_distinct")
    )
    dup = duplicates.groupBy(*PARTITION_KEYS).agg(
        F.sum("count").alias("duplicate_offsets"),
        F.sum(F.when(F.col("after_crash"), F.col("count")).otherwise(0)).alias("duplicates_after_crash"),
    )
    gaps = missing.groupBy(*PARTITION_KEYS).agg(
        F.sum("count").alias("missing_offsets"),
        F.sort_array(F.collect_list(F.struct("first", "last"))).alias("missing_ranges"),
    )
    zero = F.lit(0).cast("long")
    table = (
        wanted.join(consumed, list(PARTITION_KEYS), "full")
        .join(processed, list(PARTITION_KEYS), "full")
        .join(produced, list(TOPIC_PARTITION), "left")
        .join(dup, list(PARTITION_KEYS), "left")
        .join(gaps, list(PARTITION_KEYS), "left")
    )
    return judged_on(table, groups).select(
        *PARTITION_KEYS,
        F.coalesce(F.col("subscribed"), F.lit(False)).alias("subscribed"),
        F.coalesce(F.col("produced"), zero).alias("produced"),
        F.coalesce(F.col("delivered"), zero).alias("delivered"),
        F.coalesce(F.col("consumed_distinct"), zero).alias("consumed_distinct"),
        F.coalesce(F.col("duplicate_offsets"), zero).alias("duplicate_offsets"),
        F.coalesce(F.col("duplicates_after_crash"), zero).alias("duplicates_after_crash"),
        (F.coalesce(F.col("delivered"), zero) - F.coalesce(F.col("consumed_distinct"), zero)).alias(
            "duplicate_deliveries"
        ),
        F.coalesce(F.col("missing_offsets"), zero).alias("missing_offsets"),
        F.coalesce(F.col("missing_ranges"), F.array().cast("array<struct<first:bigint,last:bigint>>")).alias(
            "missing_ranges"
        ),
        F.coalesce(F.col("processed"), zero).alias("processed"),
        F.coalesce(F.col("processed_distinct"), zero).alias("processed_distinct"),
        "judged_on",
    )
