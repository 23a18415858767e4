"""S8 exactly-once state (seed 003's consistent regions) as DataFrame transforms (docs/analysis.md).

The evidence: ``region.checkpoint`` (each member's checkpoint: its offsets and its application's aggregate, count and
sum per key), ``region.completed`` (the region driver found a checkpoint complete: every member it names
contributed, the merge has no partition twice) and ``produce.records`` (every produced record's key and number, from
producers started with ``--journal-records``).  For every completed checkpoint, the aggregates of the members it
names, summed, must equal the aggregate of the produced records below the merged offsets; the region's last completed
checkpoint must equal the aggregate of every record produced to the region's topics.  Each key that differs is a
violation row; so is a region without any completed checkpoint.

The one pass over records is an explode of ``produce.records`` (one row per record): S8 is judged on region runs,
whose producers journal records one by one anyway.  Everything here runs in the JVM (no Python UDF).
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from zkcoord.analysis.tables import of

REGION_KEYS = ("run", "group", "region")
CHECKPOINT_KEYS = (*REGION_KEYS, "checkpoint")
#: The columns of a violation row (the ``region_state`` table and S8's examples).
VIOLATION_COLUMNS = (*REGION_KEYS, "checkpoint", "last", "key", "expected_count", "expected_sum", "found_count",
                     "found_sum")  # fmt: skip


def produced_records(events: DataFrame) -> DataFrame:
    """``produce.records`` one row per record: ``run, topic, partition, offset, key, value``.

    An event whose ``keys`` and ``values`` are not two lists of the same length (of strings or nulls, and integers)
    is left out whole, as the reference reader does.  A null key is ``-``.
    """
    rows = of(events, "produce.records").select(
        "run",
        "topic",
        "partition",
        "first",
        F.from_json("keys", "array<string>").alias("keys"),
        F.from_json("values", "array<long>").alias("values"),
    )
    usable = (
        F.col("topic").isNotNull()
        & F.col("partition").isNotNull()
        & (F.col("first") >= 0)
        & (F.size("keys") == F.size("values"))
        & ~F.exists("values", lambda v: v.isNull())
    )
    exploded = rows.where(usable).select(
        "run", "topic", "partition", "first", F.posexplode(F.arrays_zip("keys", "values")).alias("pos", "r")
    )
    return exploded.select(
        "run",
        "topic",
        "partition",
        (F.col("first") + F.col("pos")).alias("offset"),
        F.coalesce(F.col("r.keys"), F.lit("-")).alias("key"),
        F.col("r.values").alias("value"),
    )


def contributions(events: DataFrame) -> DataFrame:
    """``region.checkpoint`` with a group, region, member and checkpoint id, the latest per member and checkpoint (by
    ``ts``, ``pid``, ``seq``): ``run, group, region, checkpoint, member, members, offsets, state``."""
    rows = of(events, "region.checkpoint").where(
        F.col("group").isNotNull()
        & F.col("region").isNotNull()
        & F.col("member").isNotNull()
        & F.col("checkpoint").isNotNull()
    )
    latest = Window.partitionBy(*CHECKPOINT_KEYS, "member").orderBy(F.desc("ts"), F.desc("pid"), F.desc("seq"))
    return (
        rows.withColumn("_n", F.row_number().over(latest))
        .where(F.col("_n") == 1)
        .select(
            *CHECKPOINT_KEYS,
            "member",
            F.coalesce(F.from_json("members", "array<string>"), F.array().cast("array<string>")).alias("members"),
            "offsets",
            F.from_json("state", "map<string,array<long>>").alias("state"),
        )
    )


def regions(events: DataFrame) -> DataFrame:
    """Every region a run names (``region.joined``, ``region.checkpoint`` or ``region.completed``): ``run, group,
    region``."""
    named = of(events, "region.joined", "region.checkpoint", "region.completed").where(
        F.col("group").isNotNull() & F.col("region").isNotNull()
    )
    return named.select(*REGION_KEYS).distinct()


def region_groups(events: DataFrame) -> DataFrame:
    """The groups of a run that take part in a consistent region (any ``region.*`` event names them): ``run,
    group``."""
    named = events.where(F.col("ev").startswith("region.") & F.col("group").isNotNull())
    return named.select("run", "group").distinct()


def mark_region_groups(duplicates: DataFrame, events: DataFrame) -> DataFrame:
    """Add ``region`` to S4's duplicate ranges: whether their group takes part in a consistent region.  A region's
    resets rewind its members' positions by design (records are consumed again after every reset); S8 judges such a
    group on its state, S4 does not count these ranges."""
    groups = region_groups(events).withColumn("region", F.lit(True))
    return duplicates.join(F.broadcast(groups), ["run", "group"], "left").withColumn(
        "region", F.coalesce(F.col("region"), F.lit(False))
    )


def complete_checkpoints(events: DataFrame) -> DataFrame:
    """The checkpoints the region driver found complete (``region.completed``; the latest event per checkpoint):
    ``run, group, region, checkpoint, members, last`` (``last``: the region's highest completed checkpoint)."""
    rows = of(events, "region.completed").where(
        F.col("group").isNotNull() & F.col("region").isNotNull() & F.col("checkpoint").isNotNull()
    )
    latest = Window.partitionBy(*CHECKPOINT_KEYS).orderBy(F.desc("ts"), F.desc("pid"), F.desc("seq"))
    complete = (
        rows.withColumn("_n", F.row_number().over(latest))
        .where(F.col("_n") == 1)
        .select(
            *CHECKPOINT_KEYS,
            F.coalesce(F.from_json("members", "array<string>"), F.array().cast("array<string>")).alias("members"),
        )
    )
    top = F.max("checkpoint").over(Window.partitionBy(*REGION_KEYS))
    return complete.withColumn("last", F.col("checkpoint") == top)


def merged_offsets(contrib: DataFrame) -> DataFrame:
    """Per checkpoint (complete or not) the merged offsets: ``run, group, region, checkpoint, topic, partition,
    next`` (the highest any member contributed; a key that is not ``topic/partition`` is left out)."""
    tp = contrib.select(*CHECKPOINT_KEYS, F.explode("offsets").alias("tp", "next"))
    pattern = r"^(.+)/([0-9]{1,18})$"
    parsed = tp.where(F.col("tp").rlike(pattern) & F.col("next").isNotNull()).select(
        *CHECKPOINT_KEYS,
        F.regexp_extract("tp", pattern, 1).alias("topic"),
        F.regexp_extract("tp", pattern, 2).cast("long").alias("partition"),
        "next",
    )
    return parsed.groupBy(*CHECKPOINT_KEYS, "topic", "partition").agg(F.max("next").alias("next"))


def expected_state(records: DataFrame, merged: DataFrame, complete: DataFrame) -> DataFrame:
    """The aggregate each complete checkpoint must hold: ``run, group, region, checkpoint, key, count, sum``.

    A checkpoint that is not its region's last covers the records below its merged offsets; the last covers every
    record of the region's topics (every topic any of its checkpoints names)."""
    complete = complete.drop("members")
    bounded = (
        complete.where(~F.col("last"))
        .join(merged, list(CHECKPOINT_KEYS))
        .join(records, ["run", "topic", "partition"])
        .where(F.col("offset") < F.col("next"))
    )
    topics = merged.select(*REGION_KEYS, "topic").distinct()
    everything = complete.where(F.col("last")).join(topics, list(REGION_KEYS)).join(records, ["run", "topic"])
    cols = [*CHECKPOINT_KEYS, "key", "value"]
    both = bounded.select(*cols).unionByName(everything.select(*cols))
    return both.groupBy(*CHECKPOINT_KEYS, "key").agg(F.count(F.lit(1)).alias("count"), F.sum("value").alias("sum"))


def found_state(contrib: DataFrame, complete: DataFrame) -> DataFrame:
    """The aggregates of each completed checkpoint's members (those its ``region.completed`` names), summed: ``run,
    group, region, checkpoint, key, count, sum`` (an entry that is not ``[count, sum]`` of integers is left out)."""
    named = contrib.join(complete.select(*CHECKPOINT_KEYS, F.col("members").alias("named")), list(CHECKPOINT_KEYS))
    entries = named.where(F.array_contains("named", F.col("member"))).select(
        *CHECKPOINT_KEYS, F.explode("state").alias("key", "cs")
    )
    usable = entries.where((F.size("cs") == 2) & F.col("cs")[0].isNotNull() & F.col("cs")[1].isNotNull())
    return usable.groupBy(*CHECKPOINT_KEYS, "key").agg(
        F.sum(F.col("cs")[0]).alias("count"), F.sum(F.col("cs")[1]).alias("sum")
    )


def state_violations(events: DataFrame, records: DataFrame) -> DataFrame:
    """S8's violation rows (:data:`VIOLATION_COLUMNS`): per complete checkpoint, each key whose summed state differs
    from the expected aggregate; per region without a complete checkpoint, one row (``checkpoint`` and ``key`` null)
    expecting every record of its topics."""
    contrib = contributions(events)
    complete = complete_checkpoints(events)
    merged = merged_offsets(contrib)
    expected = expected_state(records, merged, complete)
    found = found_state(contrib, complete)
    keys = [*CHECKPOINT_KEYS, "key"]
    joined = (
        expected.withColumnRenamed("count", "expected_count")
        .withColumnRenamed("sum", "expected_sum")
        .join(found.withColumnRenamed("count", "found_count").withColumnRenamed("sum", "found_sum"), keys, "full")
        .join(complete.drop("members"), list(CHECKPOINT_KEYS))
    )
    zero = F.lit(0).cast("long")
    rows = joined.select(
        *CHECKPOINT_KEYS,
        "last",
        "key",
        *[F.coalesce(F.col(c), zero).alias(c) for c in ("expected_count", "expected_sum", "found_count", "found_sum")],
    ).where((F.col("expected_count") != F.col("found_count")) | (F.col("expected_sum") != F.col("found_sum")))
    # a region without a complete checkpoint never showed a consistent state: one row, expecting all of its topics
    without = regions(events).join(complete.select(*REGION_KEYS).distinct(), list(REGION_KEYS), "left_anti")
    topics = merged.select(*REGION_KEYS, "topic").distinct()
    totals = (
        without.join(topics, list(REGION_KEYS), "left")
        .join(records, ["run", "topic"], "left")
        .groupBy(*REGION_KEYS)
        .agg(F.count("offset").alias("expected_count"), F.coalesce(F.sum("value"), zero).alias("expected_sum"))
    )
    none = totals.select(
        *REGION_KEYS,
        F.lit(None).cast("long").alias("checkpoint"),
        F.lit(True).alias("last"),
        F.lit(None).cast("string").alias("key"),
        "expected_count",
        "expected_sum",
        zero.alias("found_count"),
        zero.alias("found_sum"),
    )
    return rows.select(*VIOLATION_COLUMNS).unionByName(none.select(*VIOLATION_COLUMNS))


def region_summary(events: DataFrame, records: DataFrame) -> DataFrame:
    """Per run the numbers S8's details give beside its count: regions, complete and incomplete checkpoints, resets,
    records journalled.  Long rows ``run, metric, value, text`` as :func:`zkcoord.analysis.assemble.metrics`."""
    contrib = contributions(events)
    checkpoints = contrib.select(*CHECKPOINT_KEYS).distinct()
    complete = complete_checkpoints(events)
    parts = [
        (regions(events), "regions"),
        (checkpoints, "checkpoints"),
        (complete, "complete_checkpoints"),
        (of(events, "region.reset"), "resets"),
        (records, "records_journalled"),
    ]
    frames = [
        df.groupBy("run")
        .agg(F.count(F.lit(1)).cast("double").alias("value"))
        .select("run", F.lit(name).alias("metric"), "value", F.lit(None).cast("string").alias("text"))
        for df, name in parts
    ]
    out = frames[0]
    for frame in frames[1:]:
        out = out.unionByName(frame)
    return out
