"""The run's tables, each a pure ``DataFrame -> DataFrame`` transform of the parsed events.

Input ``events`` has a ``run`` column and one column per schema field (:mod:`zkcoord.analysis.schema`).  Every
table is keyed by ``run`` first, so several runs are analysed side by side in one pass.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

PARTITION_KEYS = ("run", "group", "topic", "partition")
RANGE_COLUMNS = ("run", "ts", "topic", "partition", "first", "last")
CONSUMED_COLUMNS = ("run", "ts", "group", "consumer", "thread", "topic", "partition", "first", "last")


def of(events: DataFrame, *types: str) -> DataFrame:
    """The events of the given types."""
    return events.where(F.col("ev").isin(*types))


def produced_ranges(events: DataFrame) -> DataFrame:
    """``produce.batch`` as ranges: ``run, ts, topic, partition, first, last``."""
    return of(events, "produce.batch").select(*RANGE_COLUMNS)


def consumed_ranges(events: DataFrame) -> DataFrame:
    """``records.consumed`` as ranges: ``run, ts, group, consumer, thread, topic, partition, first, last``.

    ``ts`` is when the records were handed out (the event's ``at_ms``, the consumer's lease check), else when the
    event was written: the ownership intervals end at a lease deadline measured the same way.
    """
    return _group_ranges(events, "records.consumed")


def processed_ranges(events: DataFrame) -> DataFrame:
    """``records.processed`` as ranges, the columns of :func:`consumed_ranges`; ``ts`` is when the application's work
    on them ended (the event's ``at_ms``), else when the event was written."""
    return _group_ranges(events, "records.processed")


def _group_ranges(events: DataFrame, ev: str) -> DataFrame:
    rows = of(events, ev).where(F.col("group").isNotNull())
    return rows.withColumn("ts", F.coalesce(F.col("at_ms").cast("long"), F.col("ts"))).select(*CONSUMED_COLUMNS)


def terms(events: DataFrame, bounds: DataFrame) -> DataFrame:
    """Coordinator terms: ``run, epoch, broker, elected_ts, resigned_ts, resign_reason, end_ts, epoch_regression``.

    A term ends at its resignation, else at the next election, else at the run's last event (``bounds``: ``run,
    last_ts``).  ``epoch_regression`` marks an election whose epoch is not above every epoch elected before it.
    """
    elected = of(events, "coordinator.elected").select("run", "epoch", "broker", F.col("ts").alias("elected_ts"))
    resigned = (
        of(events, "coordinator.resigned")
        .groupBy("run", "broker", "epoch")
        .agg(F.min("ts").alias("resigned_ts"), F.min_by("reason", "ts").alias("resign_reason"))
    )
    order = Window.partitionBy("run").orderBy("elected_ts", "epoch")
    prior_max = F.max("epoch").over(order.rowsBetween(Window.unboundedPreceding, -1))
    return (
        elected.join(resigned, ["run", "broker", "epoch"], "left")
        .join(bounds.select("run", "last_ts"), "run", "left")
        .select(
            "run",
            "epoch",
            "broker",
            "elected_ts",
            "resigned_ts",
            "resign_reason",
            F.coalesce(F.col("resigned_ts"), F.lead("elected_ts").over(order), F.col("last_ts")).alias("end_ts"),
            F.coalesce(F.col("epoch") <= prior_max, F.lit(False)).alias("epoch_regression"),
        )
    )


def _member_count(members: Column) -> Column:
    """``members`` is a list of ids in ``rebalance.started`` and a number in ``rebalance.completed``."""
    as_list = F.from_json(members, T.ArrayType(T.StringType()))
    return F.when(as_list.isNotNull(), F.size(as_list)).otherwise(members.cast("long"))


def _earliest(ev: str, value: Column | str) -> Column:
    """The value of ``value`` in the earliest event of type ``ev`` of the group (an aggregate)."""
    is_ev = F.col("ev") == ev
    column = F.col(value) if isinstance(value, str) else value
    return F.min_by(F.when(is_ev, column), F.when(is_ev, F.col("ts")))


def _largest(ev: str, value: Column | str) -> Column:
    column = F.col(value) if isinstance(value, str) else value
    return F.max(F.when(F.col("ev") == ev, column))


def rebalances(events: DataFrame) -> DataFrame:
    """One row per rebalance attempt (``run, group, generation``): trigger, phases, size, movement and outcome.

    Columns: ``epoch, attempt, trigger, reason, started_ts, barrier_ts, ended_ts, duration_ms, latency_ms (from the
    request, completed only), stop_ms, start_ms, stw_ms (stop + start: the time the group's fetching is held),
    members, partitions, moved, attempts, outcome (completed | aborted | retrying | failed | unfinished),
    outcome_reason``.  One aggregation over the rebalance events.
    """
    started, barrier, completed = "rebalance.started", "rebalance.barrier", "rebalance.completed"
    endings = ("failed", "aborted", "retrying")
    members = _member_count(F.col("members"))
    table = (
        of(events, started, barrier, completed, *[f"rebalance.{e}" for e in endings])
        .where(F.col("group").isNotNull() & F.col("generation").isNotNull())
        .groupBy("run", "group", "generation")
        .agg(
            _earliest(started, "ts").alias("started_ts"),
            _earliest(started, "epoch").alias("epoch"),
            _earliest(started, "attempt").alias("attempt"),
            _earliest(started, "trigger").alias("trigger"),
            _earliest(started, "reason").alias("reason"),
            _earliest(started, members).alias("started_members"),
            _earliest(started, "partitions").alias("started_partitions"),
            _earliest(barrier, "ts").alias("barrier_ts"),
            _largest(barrier, "stop_ms").alias("barrier_stop_ms"),
            _earliest(completed, "ts").alias("completed_ts"),
            *[
                _largest(completed, c).alias(c)
                for c in ("latency_ms", "stop_ms", "start_ms", "partitions", "moved", "attempts")
            ],
            _largest(completed, members).alias("members"),
            *[_earliest(f"rebalance.{e}", "ts").alias(f"{e}_ts") for e in endings],
            *[_earliest(f"rebalance.{e}", "reason").alias(f"{e}_reason") for e in endings],
        )
    )
    outcome = F.when(F.col("completed_ts").isNotNull(), "completed")
    for e in endings:
        outcome = outcome.when(F.col(f"{e}_ts").isNotNull(), e)
    ended = F.coalesce("completed_ts", *[f"{e}_ts" for e in endings])
    stop_ms = F.coalesce("stop_ms", "barrier_stop_ms")
    return table.select(
        "run",
        "group",
        "generation",
        "epoch",
        "attempt",
        "trigger",
        "reason",
        "started_ts",
        "barrier_ts",
        ended.alias("ended_ts"),
        (ended - F.col("started_ts")).alias("duration_ms"),
        "latency_ms",
        stop_ms.alias("stop_ms"),
        "start_ms",
        (stop_ms + F.col("start_ms")).alias("stw_ms"),
        F.coalesce("members", "started_members").alias("members"),
        F.coalesce("partitions", "started_partitions").alias("partitions"),
        "moved",
        F.coalesce(F.col("attempts"), F.col("attempt") + 1).alias("attempts"),
        outcome.otherwise("unfinished").alias("outcome"),
        F.coalesce(*[f"{e}_reason" for e in endings]).alias("outcome_reason"),
    )


def last_seen(events: DataFrame, consumed: DataFrame) -> DataFrame:
    """``run, group, consumer, seen_ts``: the last event that names each consumer of a group (deliveries included)."""
    named = events.where(F.col("group").isNotNull() & F.col("consumer").isNotNull()).select(
        "run", "group", "consumer", "ts"
    )
    return (
        named.unionByName(consumed.select("run", "group", "consumer", "ts"))
        .groupBy("run", "group", "consumer")
        .agg(F.max("ts").alias("seen_ts"))
    )


def ownership(events: DataFrame, seen: DataFrame) -> DataFrame:
    """Ownership intervals: from each ``fetch.started`` to the consumer's next ``fetch.stopped`` of that partition.

    Columns: ``run, group, topic, partition, consumer, thread, generation, start_ts, end_ts, start_offset,
    end_offset, end_reason, closed``.  The end is the stop's ``at_ms`` (the lease deadline) if present, else its
    ``ts``; a partition started again without a stop ends at the new start.  An interval never closed (the process
    was killed) ends at the last event naming its consumer (``seen``, from :func:`last_seen`): a dead process hands
    out nothing after its last journalled event.  Such intervals have ``closed = false``.
    """
    fetch = of(events, "fetch.started", "fetch.stopped").where(
        F.col("group").isNotNull() & F.col("consumer").isNotNull() & F.col("topic").isNotNull()
    )
    order = Window.partitionBy("run", "group", "consumer", "topic", "partition").orderBy("ts", "pid", "seq")
    nxt = F.lead(F.struct("ev", "ts", "at_ms", "reason", "offset")).over(order)
    starts = (
        fetch.withColumn("nxt", nxt)
        .where(F.col("ev") == "fetch.started")
        .join(seen, ["run", "group", "consumer"], "left")
    )
    stopped = F.col("nxt.ev") == "fetch.stopped"
    restarted = F.col("nxt.ev") == "fetch.started"
    end_ts = (
        F.when(stopped, F.coalesce(F.col("nxt.at_ms").cast("long"), F.col("nxt.ts")))
        .when(restarted, F.col("nxt.ts"))
        .otherwise(F.greatest(F.col("seen_ts"), F.col("ts")))
    )
    end_reason = F.when(stopped, F.col("nxt.reason")).when(restarted, F.lit("started again"))
    return starts.select(
        *PARTITION_KEYS,
        "consumer",
        "thread",
        "generation",
        F.col("ts").alias("start_ts"),
        end_ts.alias("end_ts"),
        F.col("offset").alias("start_offset"),
        F.when(stopped, F.col("nxt.offset")).alias("end_offset"),
        end_reason.alias("end_reason"),
        stopped.alias("closed"),
    )


def commands(events: DataFrame, stale: DataFrame) -> DataFrame:
    """One row per command (``run, group, consumer, option, epoch, generation``): when it was sent, acknowledged,
    applied or rejected, and whether an applied one was stale (``stale``: ``run, group, consumer, option, epoch,
    generation, applied_ts``).  Rejections whose command could not be read have null option, epoch and generation.
    """
    key = ["run", "group", "consumer", "option", "epoch", "generation"]
    sent, acked, applied, rejected = "command.sent", "command.acked", "command.applied", "command.rejected"
    table = (
        of(events, sent, acked, applied, rejected)
        .groupBy(*key)
        .agg(
            _earliest(sent, "ts").alias("sent_ts"),
            F.count_if(F.col("ev") == sent).alias("sent"),
            _earliest(acked, "ts").alias("acked_ts"),
            _largest(acked, "latency_ms").alias("ack_latency_ms"),
            _earliest(applied, "ts").alias("applied_ts"),
            _earliest(applied, "name").alias("name"),
            _earliest(rejected, "ts").alias("rejected_ts"),
            _earliest(rejected, "reason").alias("reject_reason"),
        )
    )
    flags = stale.select(*key).distinct().withColumn("stale", F.lit(True))
    return table.join(flags, key, "left").withColumn("stale", F.coalesce(F.col("stale"), F.lit(False)))


def faults(events: DataFrame) -> DataFrame:
    """``fault.injected``: ``run, ts, fault, target, detail, role, pid``."""
    return of(events, "fault.injected").select("run", "ts", "fault", "target", "detail", "role", "pid")


def progress(produced: DataFrame, consumed: DataFrame, bounds: DataFrame, buckets: int = 120) -> DataFrame:
    """Records produced and delivered per time bucket: ``run, bucket, bucket_ts, produced, delivered``.

    Delivered counts every record handed to an application (all groups, repeats included).
    """
    width = F.greatest(F.lit(1), F.ceil((F.col("last_ts") - F.col("first_ts") + 1) / F.lit(buckets))).cast("long")
    scale = bounds.select("run", "first_ts", width.alias("width"))

    def bucketed(df: DataFrame, name: str) -> DataFrame:
        return (
            df.join(F.broadcast(scale), "run")
            .groupBy("run", F.floor((F.col("ts") - F.col("first_ts")) / F.col("width")).alias("bucket"))
            .agg(
                F.sum(F.col("last") - F.col("first") + 1).alias(name),
                F.min(
                    F.col("first_ts") + F.floor((F.col("ts") - F.col("first_ts")) / F.col("width")) * F.col("width")
                ).alias(f"{name}_ts"),
            )
        )

    return (
        bucketed(produced, "produced")
        .join(bucketed(consumed, "delivered"), ["run", "bucket"], "full")
        .select(
            "run",
            "bucket",
            F.coalesce(F.col("produced_ts"), F.col("delivered_ts")).alias("bucket_ts"),
            F.coalesce(F.col("produced"), F.lit(0)).alias("produced"),
            F.coalesce(F.col("delivered"), F.lit(0)).alias("delivered"),
        )
    )
