"""The safety properties S1-S5 (and S3-risk) as DataFrame transforms: each returns the offending rows
(docs/analysis.md).

* S1 :func:`deposed_writes` (and the ``epoch_regression`` column of :func:`zkcoord.analysis.tables.terms`)
* S2 :func:`overlaps`, :func:`outside_ownership`
* S3 :func:`subscribed_topics`, then :func:`zkcoord.analysis.ranges.sweep` of produced minus judged islands
* S3-risk :func:`judged_commits`, then :func:`committed_unprocessed`
* S4 :func:`crash_tails`, then the duplicated islands intersected with them
* S5 :func:`stale_applied`, :func:`rejections`

S3 and S4 judge the ranges :func:`zkcoord.analysis.consumption.judged` picks per group: processed, or consumed.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from zkcoord.analysis.ranges import islands, merge_ranges, sweep
from zkcoord.analysis.tables import PARTITION_KEYS, of
from zkcoord.layout import topic_regex

#: A time after every event: the loss point of a consumer that never deregistered.
END_OF_TIME = (1 << 62) - 1


def asof_max(rows: DataFrame, markers: DataFrame, keys: Sequence[str], value: str, out: str) -> DataFrame:
    """Add ``out``: the largest ``value`` among ``markers`` with the same ``keys`` and a ``ts`` *before* the row's.

    One sort of rows and markers together (a window), no join: at equal ``ts`` rows sort before markers, so a marker
    of the same millisecond does not count as before.
    """
    tagged_rows = rows.withColumn("_marker", F.lit(None).cast("long")).withColumn("_kind", F.lit(0))
    tagged_markers = markers.select(*keys, "ts", F.col(value).cast("long").alias("_marker")).withColumn(
        "_kind", F.lit(1)
    )
    both = tagged_rows.unionByName(tagged_markers, allowMissingColumns=True)
    upto = Window.partitionBy(*keys).orderBy("ts", "_kind").rowsBetween(Window.unboundedPreceding, Window.currentRow)
    return both.withColumn(out, F.max("_marker").over(upto)).where(F.col("_kind") == 0).drop("_marker", "_kind")


# --- S1 ------------------------------------------------------------------------------------------------------------


def deposed_writes(events: DataFrame) -> DataFrame:
    """``command.sent`` with an epoch below the highest epoch elected before it: a deposed coordinator wrote."""
    sent = of(events, "command.sent").select(
        "run", "ts", "role", "pid", "group", "consumer", "option", "epoch", "generation"
    )
    elected = of(events, "coordinator.elected").select("run", "ts", "epoch")
    return asof_max(sent, elected, ["run"], "epoch", "elected_epoch").where(F.col("epoch") < F.col("elected_epoch"))


# --- S2 ------------------------------------------------------------------------------------------------------------


def overlaps(intervals: DataFrame) -> DataFrame:
    """Pairs of ownership intervals of one partition, held by different consumers, that overlap in time.

    Intervals are half-open ``[start_ts, end_ts)``: one ending in the millisecond the next begins is a hand-over,
    not an overlap.  Each pair is reported once (``a.consumer < b.consumer``).
    """
    a = intervals.alias("a")
    b = intervals.alias("b")
    same = [F.col(f"a.{k}").eqNullSafe(F.col(f"b.{k}")) for k in PARTITION_KEYS]
    cond = same[0]
    for c in same[1:]:
        cond = cond & c
    cond = (
        cond
        & (F.col("a.consumer") < F.col("b.consumer"))
        & (F.col("a.start_ts") < F.col("b.end_ts"))
        & (F.col("b.start_ts") < F.col("a.end_ts"))
    )
    return a.join(b, cond).select(
        *[F.col(f"a.{k}").alias(k) for k in PARTITION_KEYS],
        F.col("a.consumer").alias("consumer_a"),
        F.col("a.thread").alias("thread_a"),
        F.col("a.start_ts").alias("start_a"),
        F.col("a.end_ts").alias("end_a"),
        F.col("a.generation").alias("generation_a"),
        F.col("b.consumer").alias("consumer_b"),
        F.col("b.thread").alias("thread_b"),
        F.col("b.start_ts").alias("start_b"),
        F.col("b.end_ts").alias("end_b"),
        F.col("b.generation").alias("generation_b"),
        (F.least("a.end_ts", "b.end_ts") - F.greatest("a.start_ts", "b.start_ts")).alias("overlap_ms"),
    )


def with_grants(overlaps: DataFrame, events: DataFrame) -> DataFrame:
    """Add to each overlapping pair what put each side in possession: ``command_x, epoch_x`` (x = a, b), the name
    and coordinator epoch of the last ``start-fetcher`` its consumer applied in the group at or before its interval
    began (null: none journalled).  Overlaps are few: a join per side, grouped back to one row per pair."""
    starts = of(events, "command.applied").where(F.col("option") == "start-fetcher")
    out = overlaps
    keys = out.columns
    for side in ("a", "b"):
        grants = starts.select(
            F.col("run").alias("_run"),
            F.col("group").alias("_group"),
            F.col("consumer").alias("_consumer"),
            F.col("ts").alias("_ts"),
            F.struct("name", "epoch").alias("_cmd"),
        )
        cond = (
            (F.col("run") == F.col("_run"))
            & (F.col("group") == F.col("_group"))
            & (F.col(f"consumer_{side}") == F.col("_consumer"))
            & (F.col("_ts") <= F.col(f"start_{side}"))
        )
        latest = F.max_by("_cmd", "_ts")
        out = (
            out.join(grants, cond, "left")
            .groupBy(*keys)
            .agg(latest.getField("name").alias(f"command_{side}"), latest.getField("epoch").alias(f"epoch_{side}"))
        )
        keys = out.columns
    return out


def outside_ownership(consumed: DataFrame, intervals: DataFrame) -> DataFrame:
    """``records.consumed`` whose ``ts`` lies outside every ownership interval of its consumer and partition.

    The intervals are few (a handful per rebalance and partition) and broadcast; the deliveries are streamed.
    """
    spans = intervals.select(
        *PARTITION_KEYS, F.col("consumer").alias("o_consumer"), F.col("start_ts"), F.col("end_ts")
    ).withColumnsRenamed({k: f"o_{k}" for k in PARTITION_KEYS})
    cond = (
        (F.col("run") == F.col("o_run"))
        & (F.col("group") == F.col("o_group"))
        & (F.col("topic") == F.col("o_topic"))
        & (F.col("partition") == F.col("o_partition"))
        & (F.col("consumer") == F.col("o_consumer"))
        & (F.col("ts") >= F.col("start_ts"))
        & (F.col("ts") <= F.col("end_ts"))
    )
    return consumed.join(F.broadcast(spans), cond, "left_anti")


# --- S3 ------------------------------------------------------------------------------------------------------------


def subscribed_topics(registrations: DataFrame, topics: DataFrame, invalid: Sequence[str] = ()) -> DataFrame:
    """``run, group, topic`` for every topic (``topics``: ``run, topic``) a group subscribes to.

    ``registrations`` are ``consumer.registered`` events: ``static`` subscriptions name topics; ``white_list`` and
    ``black_list`` hold one regex of the topic-pattern dialect (:mod:`zkcoord.layout.topic_regex`, which Java and
    the consumers' Python evaluate alike) that must match the whole topic name (``rlike '\\A(?:regex)\\z'``), a
    black list subscribing to every topic it does not match.  A group subscribes to what any of its registrations
    subscribed.  Regexes listed in ``invalid`` (outside the dialect: Java may mean something else by them than the
    consumers did, or fail the job) are left out.
    """
    subs = registrations.select(
        "run", "group", "pattern", F.explode(F.map_keys("subscription")).alias("key")
    ).distinct()
    if invalid:
        subs = subs.where(~(F.col("pattern").isin("white_list", "black_list") & F.col("key").isin(*invalid)))
    anchored = whole_name_match(F.col("topic"), F.col("key"))
    matches = (
        F.when(F.col("pattern") == "static", F.col("topic") == F.col("key"))
        .when(F.col("pattern") == "white_list", anchored)
        .when(F.col("pattern") == "black_list", ~anchored)
        .otherwise(F.lit(False))
    )
    return subs.join(topics.distinct(), "run").where(matches).select("run", "group", "topic").distinct()


def whole_name_match(name: Column, pattern: Column) -> Column:
    """Whether ``pattern`` (of the topic-pattern dialect) matches the whole of ``name``, as Java evaluates it: the
    analysis' half of the agreement :mod:`zkcoord.layout.topic_regex` promises (the consumers' half is Python's)."""
    before, after = topic_regex.JAVA_WHOLE
    return F.regexp_like(name, F.concat(F.lit(before), pattern, F.lit(after)))


def regex_keys(registrations: DataFrame) -> DataFrame:
    """``run, pattern, key`` of every regex subscription, to validate before matching."""
    return (
        registrations.where(F.col("pattern").isin("white_list", "black_list"))
        .select("run", "pattern", F.explode(F.map_keys("subscription")).alias("key"))
        .distinct()
    )


# --- S4 ------------------------------------------------------------------------------------------------------------


def crash_tails(events: DataFrame, judged: DataFrame, members: DataFrame) -> DataFrame:
    """The offsets a consumer delivered or processed but never committed before it was lost: ``run, group, topic,
    partition, first, last`` (ranges, may overlap).

    ``judged`` are the ranges S4 judges (:func:`zkcoord.analysis.consumption.judged`: ``records.processed`` or
    ``records.consumed``, said by ``judged_on``); ``members`` (``run, group, consumer``) are the consumers of each
    group (every consumer named by an event).  A consumer is lost when it ends without committing what it holds:

    * at a ``consumer.fenced`` (its session expired: it dropped its partitions without committing);
    * at a ``consumer.poll_timeout`` (it did not poll within its interval and left the group, committing nothing);
    * if it never wrote ``consumer.deregistered``, at the end of the run (a crash).

    Its tail for a partition at a loss point is what it delivered or processed at or above its last
    ``offsets.committed`` for the partition before that point (a committed offset is the next one to consume);
    without a commit, everything.  Delivered ranges count up to the loss point.  Processed ranges count up to the
    consumer's next ``consumer.registered`` after it (or the run's end): the application goes on working on records
    handed to it before the loss, and commits nothing of them, until its consumer has joined again.
    """
    member = ["run", "group", "consumer"]
    end = F.lit(END_OF_TIME)
    closed = of(events, "consumer.deregistered").select(*member)
    crashed = (
        members.select(*member).join(closed, member, "left_anti").withColumn("loss_ts", end).withColumn("until_ts", end)
    )
    left = of(events, "consumer.fenced", "consumer.poll_timeout").select(*member, F.col("ts").alias("loss_ts"))
    joined = of(events, "consumer.registered").select(*member, F.col("ts").alias("joined_ts"))
    rejoin = F.min(F.when(F.col("joined_ts") > F.col("loss_ts"), F.col("joined_ts")))
    lost = left.join(joined, member, "left").groupBy(*member, "loss_ts").agg(F.coalesce(rejoin, end).alias("until_ts"))
    losses = crashed.unionByName(lost)
    commits = (
        of(events, "offsets.committed")
        .select(*member, "topic", "partition", "offset", F.col("ts").alias("commit_ts"))
        .join(F.broadcast(losses.select(*member, "loss_ts")), member)
        .where(F.col("commit_ts") <= F.col("loss_ts"))
        .groupBy(*member, "topic", "partition", "loss_ts")
        .agg(F.max_by("offset", "commit_ts").alias("committed"))
    )
    until = F.when(F.col("judged_on") == "processed", F.col("until_ts")).otherwise(F.col("loss_ts"))
    held = judged.join(F.broadcast(losses), member).where(F.col("ts") <= until)
    return (
        held.join(commits, [*member, "topic", "partition", "loss_ts"], "left")
        .select(
            *PARTITION_KEYS,
            F.greatest(F.col("first"), F.coalesce(F.col("committed"), F.col("first"))).alias("first"),
            F.col("last"),
        )
        .where(F.col("last") >= F.col("first"))
    )


# --- S3 at risk ----------------------------------------------------------------------------------------------------

COMMITTER = ("run", "group", "consumer", "topic", "partition")


def judged_commits(events: DataFrame, groups: DataFrame) -> DataFrame:
    """The commits S3-risk judges: ``offsets.committed`` with ``auto_commit: false`` of the groups in ``groups``
    (``run, group``: those that journal ``records.processed``).  Columns: ``run, group, consumer, topic, partition,
    ts, offset``.

    With auto-commit on, a consumer commits what ``poll()`` returned, by contract (Kafka's ``enable.auto.commit``);
    a journal without the field (written before it existed) says nothing about the policy; a group that journals no
    processed records says nothing about what was finished.  None of those is judged.
    """
    return (
        of(events, "offsets.committed")
        .where((F.col("auto_commit") == F.lit(False)) & F.col("offset").isNotNull())
        .join(F.broadcast(groups.select("run", "group")), ["run", "group"])
        .select(*COMMITTER, "ts", "offset")
    )


def committed_unprocessed(commits: DataFrame, consumed: DataFrame, processed: DataFrame) -> DataFrame:
    """S3 at risk: the offsets a consumer committed before its application had processed them (the cause of the
    loss S3 sees only if the consumer then dies before it finishes them, and nobody processes them again).

    ``commits`` are :func:`judged_commits`; ``consumed`` and ``processed`` the ``records.consumed`` and
    ``records.processed`` ranges (:func:`zkcoord.analysis.tables.consumed_ranges`: ``ts`` is when they were handed
    out, or finished).  For a commit of offset ``V`` by consumer ``C`` for a partition at time ``t``: ``L`` is the
    highest offset of the partition C's application had processed at or before ``t`` (none: -1), ``H`` the highest
    poll() had handed C at or before ``t``; the offsets at risk are those of ``L+1 .. min(V-1, H)`` that poll() handed
    to C.  Output: ``run, group, consumer, topic, partition, first, last``, the islands of each consumer's offsets at
    risk (merged over its commits).

    One window per consumer and partition over its handed, processed and committed events in time order (records of
    the commit's millisecond count as before it), then a merge and an intersection with the handed islands: the cost
    grows with the number of events, never with the offsets.
    """
    keys = commits.select(*COMMITTER).distinct()
    handed = consumed.join(keys, list(COMMITTER), "left_semi")
    finished = processed.join(keys, list(COMMITTER), "left_semi")

    def stream(df: DataFrame, kind: str, value: str) -> DataFrame:
        return df.select(*COMMITTER, "ts", F.col(value).alias("value"), F.lit(kind).alias("kind"))

    timeline = (
        stream(handed, "handed", "last")
        .unionByName(stream(finished, "processed", "last"))
        .unionByName(stream(commits, "commit", "offset"))
    )
    upto = Window.partitionBy(*COMMITTER).orderBy("ts").rangeBetween(Window.unboundedPreceding, Window.currentRow)
    kind = F.col("kind")
    marked = timeline.select(
        *COMMITTER,
        kind,
        F.col("value"),
        F.max(F.when(kind == "handed", F.col("value"))).over(upto).alias("top_handed"),
        F.max(F.when(kind == "processed", F.col("value"))).over(upto).alias("top_processed"),
    )
    candidates = (
        marked.where((kind == "commit") & F.col("top_handed").isNotNull())
        .select(
            *COMMITTER,
            (F.coalesce(F.col("top_processed"), F.lit(-1)) + F.lit(1)).alias("first"),
            F.least(F.col("value") - F.lit(1), F.col("top_handed")).alias("last"),
        )
        .where(F.col("last") >= F.col("first"))
    )
    return sweep(
        islands(merge_ranges(candidates, COMMITTER), COMMITTER),
        islands(merge_ranges(handed, COMMITTER), COMMITTER),
        COMMITTER,
        "and",
    )


# --- S5 ------------------------------------------------------------------------------------------------------------


def stale_applied(events: DataFrame) -> DataFrame:
    """``command.applied`` events older than a command the same consumer had already applied.

    A consumer applies its channel in order; S5 says it must never apply a command from an older coordinator epoch,
    or of an older group generation, than one it has already applied (a deposed coordinator's start arriving after
    the new coordinator's commands is the case this catches).  A command that was simply still in flight when a newer
    generation *started* at the coordinator is not stale: the consumer could not have known, and the barrier orders
    it before the newer commands.  Column ``why`` says which bound was broken.
    """
    applied = of(events, "command.applied").select(
        "run", "ts", "seq", "pid", "group", "consumer", "name", "option", "epoch", "generation"
    )
    before = (
        Window.partitionBy("run", "group", "consumer")
        .orderBy("ts", "pid", "seq")
        .rowsBetween(Window.unboundedPreceding, -1)
    )
    marked = applied.withColumn("seen_epoch", F.max("epoch").over(before)).withColumn(
        "seen_generation", F.max("generation").over(before)
    )
    old_epoch = F.coalesce(F.col("epoch") < F.col("seen_epoch"), F.lit(False))
    old_generation = F.coalesce(F.col("generation") < F.col("seen_generation"), F.lit(False))
    why = F.concat_ws(
        "; ",
        F.when(old_epoch, F.format_string("epoch %d < already applied %d", "epoch", "seen_epoch")),
        F.when(old_generation, F.format_string("generation %d < already applied %d", "generation", "seen_generation")),
    )
    return (
        marked.where(old_epoch | old_generation)
        .withColumn("why", why)
        .withColumnRenamed("ts", "applied_ts")
        .drop("seq", "pid")
    )


def rejections(events: DataFrame) -> DataFrame:
    """``run, reason, count`` of ``command.rejected``, the reason cut at its first colon (``stale``, ``malformed``)."""
    reason = F.coalesce(F.trim(F.regexp_extract(F.col("reason"), r"^([^:]*)", 1)), F.lit("unknown"))
    return of(events, "command.rejected").groupBy("run", reason.alias("reason")).count()
