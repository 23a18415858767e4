"""Consumption per partition (S3 missing, S4 duplicates), computed on offset ranges.

Inputs are the islands of :func:`zkcoord.analysis.ranges.merge_ranges`: ``produced_merged`` per ``run, topic,
partition`` and ``consumed_merged`` per ``run, group, topic, partition``.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from zkcoord.analysis.ranges import islands, length, merge_ranges, overlap_islands, segments, sweep
from zkcoord.analysis.tables import PARTITION_KEYS

TOPIC_PARTITION = ("run", "topic", "partition")


def expected_ranges(produced_merged: DataFrame, subscribed: DataFrame) -> DataFrame:
    """What each group should consume: the produced islands of every topic it subscribes to (``PARTITION_KEYS``,
    ``first, last``)."""
    return (
        islands(produced_merged, TOPIC_PARTITION)
        .join(subscribed, ["run", "topic"])
        .select(*PARTITION_KEYS, "first", "last")
    )


def missing_ranges(expected: DataFrame, consumed_merged: DataFrame) -> DataFrame:
    """S3: the expected offsets no delivery of the group covered, as ranges: ``PARTITION_KEYS, first, last, count``."""
    gaps = sweep(expected, islands(consumed_merged, PARTITION_KEYS), PARTITION_KEYS, "minus")
    return gaps.withColumn("count", length())


def duplicate_ranges(consumed_merged: DataFrame, tails: DataFrame) -> DataFrame:
    """S4: offsets a group consumed more than once, as ranges, each marked ``after_crash`` when it lies in a lost
    consumer's uncommitted tail (``tails``, from :func:`zkcoord.analysis.checks.crash_tails`).

    Columns: ``PARTITION_KEYS, first, last, count, after_crash``.
    """
    dups = overlap_islands(consumed_merged, PARTITION_KEYS)
    lost = islands(merge_ranges(tails, PARTITION_KEYS), PARTITION_KEYS)
    return (
        segments(dups, lost, PARTITION_KEYS)
        .where(F.col("in_a") > 0)
        .select(*PARTITION_KEYS, "first", "last", length().alias("count"), (F.col("in_b") > 0).alias("after_crash"))
    )


def consumption(
    produced_merged: DataFrame,
    consumed_merged: DataFrame,
    subscribed: DataFrame,
    missing: DataFrame,
    duplicates: DataFrame,
) -> DataFrame:
    """One row per ``run, group, topic, partition`` a group subscribes to or consumed from.

    Columns: ``subscribed``, ``produced`` (distinct offsets produced to the partition), ``delivered`` (records handed
    to the group's applications, repeats included), ``consumed_distinct``, ``duplicate_offsets`` (offsets delivered
    more than once), ``duplicates_after_crash`` (of those, in a lost consumer's uncommitted tail),
    ``duplicate_deliveries`` (``delivered - consumed_distinct``), ``missing_offsets`` and ``missing_ranges``
    (an array of ``struct(first, last)``).
    """
    produced = produced_merged.groupBy(*TOPIC_PARTITION).agg(F.sum(length()).alias("produced"))
    wanted = produced.join(subscribed, ["run", "topic"]).select(*PARTITION_KEYS, F.lit(True).alias("subscribed"))
    consumed = consumed_merged.groupBy(*PARTITION_KEYS).agg(
        F.sum("delivered").alias("delivered"), F.sum(length()).alias("consumed_distinct")
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
        .join(produced, list(TOPIC_PARTITION), "left")
        .join(dup, list(PARTITION_KEYS), "left")
        .join(gaps, list(PARTITION_KEYS), "left")
    )
    return table.select(
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
    )
