"""Offset-range algebra on DataFrames: merge, overlap, subtract and intersect ranges without exploding offsets.

Every function is a pure ``DataFrame -> DataFrame`` transform over rows that carry grouping ``keys`` (for instance
``run, group, topic, partition``) and an inclusive range ``first..last``.  The cost grows with the number of ranges,
never with the number of offsets in them, so a run of 10^8 records journalled as 10^6 ranges stays cheap.

* :func:`merge_ranges` sorts the ranges of each key once (a window: gaps and islands) and returns, per island of
  contiguous or overlapping ranges, its extent, the number of offsets delivered into it (with repeats) and the
  portions of ranges that overlap an earlier one (offsets covered at least twice).
* :func:`sweep` combines two sets of disjoint, non-adjacent ranges (islands) with a sweep line over their boundaries:
  ``a - b`` (what ``a`` covers and ``b`` does not) or ``a & b``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F


def length(first: str = "first", last: str = "last") -> Column:
    """The number of offsets in an inclusive range."""
    return F.col(last) - F.col(first) + F.lit(1)


def merge_ranges(ranges: DataFrame, keys: Sequence[str]) -> DataFrame:
    """Merge each key's ranges into islands (contiguous or overlapping ranges become one).

    Output, one row per island: ``*keys, first, last, delivered`` (offsets delivered into the island, repeats
    included: ``delivered - (last - first + 1)`` is the number of repeated deliveries), ``ranges`` (how many input
    ranges) and ``overlaps``: an array of ``struct(first, last)``, the part of each range that an earlier range
    (in ``first`` order) already covered.  Their union is exactly the set of offsets covered twice or more.
    """
    order = Window.partitionBy(*keys).orderBy("first", "last")
    before = order.rowsBetween(Window.unboundedPreceding, -1)
    upto = order.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    prev_last = F.col("prev_last")
    starts = prev_last.isNull() | (F.col("first") > prev_last + F.lit(1))
    annotated = (
        ranges.select(*keys, "first", "last")
        .withColumn("prev_last", F.max("last").over(before))
        .withColumn("island", F.sum(starts.cast("long")).over(upto))
    )
    overlap = F.when(
        F.col("first") <= prev_last,
        F.struct(F.col("first").alias("first"), F.least(F.col("last"), prev_last).alias("last")),
    )
    return (
        annotated.groupBy(*keys, "island")
        .agg(
            F.min("first").alias("first"),
            F.max("last").alias("last"),
            F.sum(length()).alias("delivered"),
            F.count(F.lit(1)).alias("ranges"),
            F.collect_list(overlap).alias("overlaps"),
        )
        .drop("island")
    )


def islands(merged: DataFrame, keys: Sequence[str]) -> DataFrame:
    """``*keys, first, last`` of the islands of :func:`merge_ranges`."""
    return merged.select(*keys, "first", "last")


def overlap_islands(merged: DataFrame, keys: Sequence[str]) -> DataFrame:
    """The offsets covered at least twice, as merged ranges: ``*keys, first, last``."""
    portions = merged.select(*keys, F.explode("overlaps").alias("o")).select(
        *keys, F.col("o.first").alias("first"), F.col("o.last").alias("last")
    )
    return islands(merge_ranges(portions, keys), keys)


def sweep(a: DataFrame, b: DataFrame, keys: Sequence[str], mode: Literal["minus", "and"]) -> DataFrame:
    """``a - b`` or ``a & b`` of two sets of islands (disjoint, non-adjacent ranges per key): ``*keys, first, last``.

    A sweep line over the boundaries: each range adds one at ``first`` and removes one at ``last + 1``; between two
    consecutive boundaries the running counts say whether ``a`` and ``b`` cover that segment.
    """

    def edges(df: DataFrame, column: str) -> DataFrame:
        other = "db" if column == "da" else "da"
        up = df.select(*keys, F.col("first").alias("pos"), F.lit(1).alias(column), F.lit(0).alias(other))
        down = df.select(*keys, (F.col("last") + 1).alias("pos"), F.lit(-1).alias(column), F.lit(0).alias(other))
        return up.unionByName(down)

    points = (
        edges(a, "da")
        .unionByName(edges(b, "db"))
        .groupBy(*keys, "pos")
        .agg(F.sum("da").alias("da"), F.sum("db").alias("db"))
    )
    order = Window.partitionBy(*keys).orderBy("pos")
    upto = order.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    segments = points.select(
        *keys,
        F.col("pos").alias("first"),
        (F.lead("pos").over(order) - 1).alias("last"),
        F.sum("da").over(upto).alias("in_a"),
        F.sum("db").over(upto).alias("in_b"),
    )
    covered_b = F.col("in_b") > 0
    keep = (F.col("in_a") > 0) & (~covered_b if mode == "minus" else covered_b)
    return segments.where(keep & F.col("last").isNotNull() & (F.col("last") >= F.col("first"))).select(
        *keys, "first", "last"
    )


def total(ranges: DataFrame, keys: Sequence[str], name: str) -> DataFrame:
    """``*keys, <name>``: the number of offsets in each key's ranges (repeats counted)."""
    return ranges.groupBy(*keys).agg(F.sum(length()).alias(name))
