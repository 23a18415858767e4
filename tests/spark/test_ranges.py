"""The pure range and matching transforms, each against hand-computed results (and a set-based oracle)."""

from __future__ import annotations

import random

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from zkcoord.analysis import checks, ranges

pytestmark = pytest.mark.spark

KEYS = ("k",)


def _ranges(spark: SparkSession, rows: list[tuple[str, int, int]]) -> DataFrame:
    return spark.createDataFrame(rows, "k string, first long, last long")


def test_merge_ranges_joins_overlapping_and_adjacent_ranges(spark: SparkSession) -> None:
    df = _ranges(spark, [("a", 0, 9), ("a", 5, 14), ("a", 15, 20), ("a", 30, 40), ("b", 3, 3)])
    merged = ranges.merge_ranges(df, KEYS)
    expected = spark.createDataFrame(
        [("a", 0, 20, 26, 3, [(5, 9)]), ("a", 30, 40, 11, 1, []), ("b", 3, 3, 1, 1, [])],
        "k string, first long, last long, delivered long, ranges long, overlaps array<struct<first:long,last:long>>",
    )
    assertDataFrameEqual(merged, expected)


def test_overlap_islands_count_each_repeated_offset_once(spark: SparkSession) -> None:
    df = _ranges(spark, [("a", 0, 9), ("a", 0, 9), ("a", 0, 9), ("a", 8, 12), ("a", 20, 25)])
    dups = ranges.overlap_islands(ranges.merge_ranges(df, KEYS), KEYS)
    assertDataFrameEqual(dups, _ranges(spark, [("a", 0, 9)]))


def test_sweep_subtracts_and_intersects_islands(spark: SparkSession) -> None:
    a = _ranges(spark, [("a", 0, 99), ("b", 0, 9)])
    b = _ranges(spark, [("a", 10, 19), ("a", 50, 120), ("c", 0, 5)])
    assertDataFrameEqual(ranges.sweep(a, b, KEYS, "minus"), _ranges(spark, [("a", 0, 9), ("a", 20, 49), ("b", 0, 9)]))
    assertDataFrameEqual(ranges.sweep(a, b, KEYS, "and"), _ranges(spark, [("a", 10, 19), ("a", 50, 99)]))


def test_range_algebra_matches_a_set_oracle(spark: SparkSession) -> None:
    rng = random.Random(7)
    rows = []
    for key in ("x", "y", "z"):
        for _ in range(40):
            first = rng.randrange(0, 500)
            rows.append((key, first, first + rng.randrange(0, 30)))
    produced = [(k, 0, 520) for k in ("x", "y", "z")]
    merged = ranges.merge_ranges(_ranges(spark, rows), KEYS)
    covered: dict[str, list[int]] = {}
    for k, first, last in rows:
        covered.setdefault(k, []).extend(range(first, last + 1))
    missing = ranges.sweep(_ranges(spark, produced), ranges.islands(merged, KEYS), KEYS, "minus")
    dups = ranges.overlap_islands(merged, KEYS)
    got_missing = {r["k"]: r["n"] for r in ranges.total(missing, KEYS, "n").collect()}
    got_dups = {r["k"]: r["n"] for r in ranges.total(dups, KEYS, "n").collect()}
    got_delivered = {r["k"]: r["d"] for r in merged.groupBy("k").agg(F.sum("delivered").alias("d")).collect()}
    for k, offsets in covered.items():
        assert got_missing.get(k, 0) == 521 - len(set(offsets))
        assert got_dups.get(k, 0) == len({o for o in offsets if offsets.count(o) > 1})
        assert got_delivered[k] == len(offsets)


def test_subscriptions_match_whole_topic_names(spark: SparkSession) -> None:
    regs = spark.createDataFrame(
        [
            ("r", "static", "g1", {"orders": 1}),
            ("r", "white_list", "g2", {"ord.*": 2}),
            ("r", "black_list", "g3", {"orders|pay": 1}),
            ("r", "white_list", "g4", {"(?P<bad>x)": 1}),
        ],
        "run string, pattern string, group string, subscription map<string,long>",
    )
    topics = spark.createDataFrame(
        [("r", "orders"), ("r", "orders2"), ("r", "pay"), ("r", "xorders")], "run string, topic string"
    )
    got = checks.subscribed_topics(regs, topics, invalid=["(?P<bad>x)"])
    expected = spark.createDataFrame(
        [
            ("r", "g1", "orders"),
            ("r", "g2", "orders"),
            ("r", "g2", "orders2"),
            ("r", "g3", "orders2"),
            ("r", "g3", "xorders"),
        ],
        "run string, group string, topic string",
    )
    assertDataFrameEqual(got, expected)


def test_asof_max_counts_only_markers_strictly_before(spark: SparkSession) -> None:
    rows = spark.createDataFrame([("r", 10, "x"), ("r", 20, "y"), ("r", 5, "z")], "run string, ts long, id string")
    markers = spark.createDataFrame([("r", 10, 3), ("r", 15, 2), ("r", 1, 1)], "run string, ts long, epoch long")
    got = checks.asof_max(rows, markers, ["run"], "epoch", "before").select("id", "before")
    assertDataFrameEqual(got, spark.createDataFrame([("x", 1), ("y", 3), ("z", 1)], "id string, before long"))
