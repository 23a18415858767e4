"""Offset-range algebra on DataFrames: merge, overlap, subtract and intersect ranges without exploding offsets.

Every function is a pure ``DataFrame -> DataFrame`` transform over rows that carry grouping ``keys`` (for instance
``run, group, topic, partition``) and an inclusive range ``first..last``.  The cost grows with the number of ranges,
never with the number of offsets in them, so a run of 10^8 records journalled as 10^6 ranges stays cheap.

* :func:`merge_ranges` sorts the ranges of each key once (a window: gaps and islands) and returns, per island of
  contiguous or overlapping ranges, its extent, the number of offsets delivered into it (with repeats) and the
  portions of ranges that overlap an earlier one (offsets covered at least twice).
* :func:`segments` and :func:`sweep` combine two sets of disjoint, non-adjacent ranges (islands) with a sweep line
  over their boundaries: ``a - b`` (what ``a`` covers and ``b`` does not) or ``a & b``.
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


def segments(a: DataFrame, b: DataFrame, keys: Sequence[str]) -> DataFrame:
    """Cut the union of two sets of islands (disjoint, non-adjacent ranges per key) at every boundary.

    Output: ``*keys, first, last, in_a, in_b``: the segments covered by ``a`` or ``b``, saying which (a sweep line:
    each range adds one at ``first`` and removes one at ``last + 1``; a running sum per key, in one sort).
    """

    def edges(df: DataFrame, side: Literal["a", "b"]) -> DataFrame:
        one, zero = F.lit(1), F.lit(0)
        up, down = (one, zero) if side == "a" else (zero, one)
        points = F.array(
            F.struct(F.col("first").alias("pos"), up.alias("da"), down.alias("db")),
            F.struct((F.col("last") + 1).alias("pos"), (-up).alias("da"), (-down).alias("db")),
        )
        return df.select(*keys, F.explode(points).alias("e")).select(*keys, "e.pos", "e.da", "e.db")

    order = Window.partitionBy(*keys).orderBy("pos")
    # A range frame sums every edge at the same position (its peers) at once; the last peer carries the segment.
    upto = order.rangeBetween(Window.unboundedPreceding, Window.currentRow)
    cut = (
        edges(a, "a")
        .unionByName(edges(b, "b"))
        .select(
            *keys,
            F.col("pos").alias("first"),
            (F.lead("pos").over(order) - 1).alias("last"),
            F.sum("da").over(upto).alias("in_a"),
            F.sum("db").over(upto).alias("in_b"),
        )
    )
    covered = (F.col("in_a") > 0) | (F.col("in_b") > 0)
    return cut.where(F.col("last").isNotNull() & (F.col("last") >= F.col("first")) & covered)


def sweep(a: DataFrame, b: DataFrame, keys: Sequence[str], mode: Literal["minus", "and"]) -> DataFrame:
    """``a - b`` or ``a & b`` of two sets of islands: ``*keys, first, last`` (see :func:`segments`)."""
    in_b = F.col("in_b") > 0
    keep = (F.col("in_a") > 0) & (~in_b if mode == "minus" else in_b)
    return segments(a, b, keys).where(keep).select(*keys, "first", "last")


def total(ranges: DataFrame, keys: Sequence[str], name: str) -> DataFrame:
    """``*keys, <name>``: the number of offsets in each key's ranges (repeats counted)."""
    return ranges.groupBy(*keys).agg(F.sum(length()).alias(name))
