"""``run_analysis``: journals in, Parquet tables, ``verdict.json`` and ``report.html`` out.

The one implementation of the verdict: ``zkcoord analyze`` and ``zkcoord demo`` both call :func:`run_analysis`.
All runs are read in one pass (every table carries a ``run`` column); each run gets its own verdict.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from zkcoord.analysis import checks, consumption, load, ranges, regions, tables
from zkcoord.analysis.assemble import Tables, run_verdicts
from zkcoord.analysis.errors import AnalysisError, JournalRefusedError
from zkcoord.analysis.report import ReportData, render_report
from zkcoord.analysis.schema import MAX_VERSION
from zkcoord.analysis.session import DEFAULT_LOCAL_MASTER, get_spark, journals_readable, spark_errors
from zkcoord.analysis.verdict import ReadCounts, RunVerdict, Verdict
from zkcoord.layout import topic_regex

Say = Callable[[str], None]
_Result = tuple[list[RunVerdict], ReportData]

#: Driver threads that submit independent Spark jobs at once.
DRIVER_THREADS = 4

#: Journal bytes per partition of the parsed events (input splits are merged up to this, never split further).
BYTES_PER_PARTITION = 64 << 20

#: Journal bytes per shuffle partition.  The shuffles carry narrow rows (the keys and ``first, last`` of the range
#: events, the other events' few columns), about half a journal line's size: without adaptive execution to merge
#: small shuffle partitions after the fact (session.py), a journal of 10^6 events (220 MB) gets two (both cores of
#: local[2]) instead of four half-empty ones (at 10^6 events four made 520 tasks where 224 did).
BYTES_PER_SHUFFLE = 128 << 20


def run_analysis(
    run_dirs: Sequence[str | os.PathLike[str]],
    out_dir: str | os.PathLike[str],
    master: str | None = DEFAULT_LOCAL_MASTER,
    *,
    report: bool = True,
    spark: SparkSession | None = None,
    conf: Mapping[str, str] | None = None,
    progress: Say | None = None,
) -> Verdict:
    """Analyse the journals of ``run_dirs`` and write tables, ``verdict.json`` and the report into ``out_dir``.

    :param run_dirs: run directories (``RUN/journal/*.jsonl``) or journal directories (``DIR/*.jsonl``).
    :param master: Spark master (``local[N]``, ``spark://HOST:PORT``, ``yarn``); ``None``: spark-submit's choice.
    :param spark: use this session instead of the active one or a new one (then it is not stopped).
    :param conf: extra Spark settings for a session this call creates.
    :param progress: called with one line per stage (the CLI prints them).
    :raises AnalysisError: no journal, no Java, an unreadable journal, a failed Spark job: one line each.
    """
    started = time.monotonic()
    say: Say = progress or (lambda _line: None)
    runs = load.locate(run_dirs)
    out = Path(out_dir).expanduser().resolve()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise AnalysisError(f"cannot write the analysis to {out}: {e.strerror}") from e
    created = False
    if spark is None:
        say(f"starting Spark ({master or 'spark-submit master'})")
        spark, created = get_spark(master, conf)
    try:
        files = [f for r in runs for f in r.files]
        shuffles = _partitions(runs, BYTES_PER_SHUFFLE)
        with spark_errors("analysing the journals"), journals_readable(files), _tuned(spark, shuffles):
            verdicts, data = _analyse(spark, runs, out, say)
    finally:
        if created:
            spark.stop()
    verdict = Verdict(runs=tuple(verdicts), out_dir=str(out), seconds=time.monotonic() - started)
    (out / "verdict.json").write_text(verdict.to_json() + "\n")
    if report:
        say("rendering the report")
        render_report(out, verdict, data)
    return verdict


@contextlib.contextmanager
def _tuned(spark: SparkSession, partitions: int) -> Iterator[None]:
    """Size the shuffles to the input for the analysis, and restore the session's settings after.

    ``partitions`` is the journal's size in :data:`BYTES_PER_SHUFFLE` units.
    A small journal (one partition's worth) is analysed with one shuffle partition and, on a cluster too, without
    adaptive execution (local mode never uses it, session.py): there is nothing to share out or re-plan, and each
    extra job and task only adds latency.
    """
    shuffle, adaptive, writers = (
        "spark.sql.shuffle.partitions",
        "spark.sql.adaptive.enabled",
        "spark.sql.maxConcurrentOutputFileWriters",
    )
    previous: dict[str, str | None] = {key: spark.conf.get(key, None) for key in (shuffle, adaptive, writers)}
    settings: dict[str, str] = {
        shuffle: str(min(int(previous[shuffle] or 200), partitions)),
        # the events table is written by kind (5 of them): one open writer each instead of a sort by kind
        writers: "5",
    }
    if partitions == 1:
        settings[adaptive] = "false"
    try:
        for key, value in settings.items():
            spark.conf.set(key, value)
        yield
    finally:
        for key, old in previous.items():
            if old is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, old)


def _together(*jobs: Callable[[], Any]) -> list[Any]:
    """Run ``jobs`` (callables that start Spark jobs) from :data:`DRIVER_THREADS` threads; their results in order.

    The first error is raised once every job has ended.
    """
    with concurrent.futures.ThreadPoolExecutor(DRIVER_THREADS, thread_name_prefix="analysis") as pool:
        futures = [pool.submit(job) for job in jobs]
        concurrent.futures.wait(futures)
    return [f.result() for f in futures]


def _checkpoint(df: DataFrame) -> DataFrame:
    """Materialize a small intermediate result once and cut its lineage, so later plans stay short."""
    return df.localCheckpoint(eager=True)


def _refused_regexes(rows: Sequence[Any]) -> dict[str, list[str]]:
    """Per run, the regex subscriptions (rows of :func:`checks.regex_keys`) outside the topic-pattern dialect: S3
    leaves them out and lists them (Java could mean something else by them than the consumers did, or fail the job).
    """
    refused: dict[str, set[str]] = {}
    for row in rows:
        key = str(row["key"])
        if topic_regex.refusal(key) is not None:
            refused.setdefault(str(row["run"]), set()).add(key)
    return {run: sorted(keys) for run, keys in refused.items()}


def _partitions(runs: Sequence[load.RunInput], per: int = BYTES_PER_PARTITION) -> int:
    """Partitions for journals of this size: at least one per ``per`` bytes."""
    return max(1, sum(f.stat().st_size for r in runs for f in r.files) // per + 1)


def _read(spark: SparkSession, runs: Sequence[load.RunInput], out: Path, say: Say) -> tuple[DataFrame, dict[str, Any]]:
    """Parse every line once into the ``events`` table (Parquet, partitioned by kind); return it read back, and the
    read summary per run (:func:`zkcoord.analysis.load.fold_summary`).

    The parsed journal goes to disk, not to memory: Parquet stores the many fields an event type leaves empty for
    almost nothing, and every later step reads only the kind and the columns it needs.
    """
    files = sum(len(r.files) for r in runs)
    say(f"reading {files} journal file(s) of {len(runs)} run(s)")
    path = str(out / "tables" / "events")
    classified = load.classify(load.read_lines(spark, runs).coalesce(_partitions(runs)))
    classified.write.mode("overwrite").partitionBy("kind").parquet(path)
    events = spark.read.schema(classified.schema).parquet(path)
    return events, load.fold_summary(load.read_summary(events).collect())


def _read_counts(runs: Sequence[load.RunInput], stats: dict[str, Any]) -> dict[str, ReadCounts]:
    """:class:`ReadCounts` per run; a run without a single usable event is refused."""
    reads: dict[str, ReadCounts] = {}
    for run in runs:
        s = stats.get(run.name, {})
        counts = ReadCounts(
            files=len(run.files),
            lines=int(s.get("lines", 0)),
            events=int(s.get("events", 0)),
            seq_gaps=int(s.get("seq_gaps", 0)),
            unknown_types=dict(s.get("unknown_types", {})),
            **{reason: int(s.get(reason, 0)) for reason in load.SKIP_REASONS},
        )
        if counts.events == 0:
            raise JournalRefusedError(
                f"{run.journal_dir}: no usable event in {counts.lines} line(s) ({counts.summary()}); "
                f"this zkcoord reads journal schema version <= {MAX_VERSION}"
            )
        reads[run.name] = counts
    return reads


def _analyse(spark: SparkSession, runs: Sequence[load.RunInput], out: Path, say: Say) -> _Result:
    events, stats = _read(spark, runs, out, say)
    reads = _read_counts(runs, stats)
    # Built from literals, not with createDataFrame: a Python list becomes a Python RDD, which would need Python on
    # every executor; this plan is Spark's alone (the executors need no Python, docs/analysis.md).
    rows = [
        F.struct(
            F.lit(name).alias("run"),
            *[F.lit(int(stats[name][key])).cast("long").alias(key) for key in ("first_ts", "last_ts")],
        )
        for name in reads
    ]
    bounds = spark.range(1).select(F.inline(F.array(*rows)))
    types = frozenset[str]().union(*(stats[name]["types"] for name in reads))
    inputs = _Inputs(
        reads=reads,
        first_ts={name: int(stats[name]["first_ts"]) for name in reads},
        types=types,
        bounds=bounds,
        produced=tables.produced_ranges(load.of_kind(events, "produced")),
        consumed=tables.consumed_ranges(load.of_kind(events, "consumed")),
        processed=journalled(tables.processed_ranges(load.of_kind(events, "processed")), types, "records.processed"),
        # read where it lies: the events table is partitioned by kind, so this reads the other kinds' files only
        other=load.of_kind(events, "other"),
    )
    return _judge(spark, runs, out, say, inputs)


@dataclass(frozen=True)
class _Inputs:
    """The parsed journal, split by kind (each read from its own partition of the events table)."""

    reads: dict[str, ReadCounts]
    first_ts: dict[str, int]
    types: frozenset[str]  # the types of the usable events, over all runs
    bounds: DataFrame  # run, first_ts, last_ts
    produced: DataFrame
    consumed: DataFrame
    processed: DataFrame
    other: DataFrame


def journalled(df: DataFrame, types: Iterable[str], prefix: str) -> DataFrame:
    """``df`` if the journals hold an event whose type starts with ``prefix`` (``types``: the read summary's), else
    an empty relation (``limit(0)``), on which the optimizer prunes the scans, joins and broadcast jobs of every plan
    built on it: the same code gives the same empty results without running jobs that would find nothing.

    For the inputs of whole checks a journal may lack: S8's region events (the ``region_state`` table, S8's
    numbers, the region marks of S4's duplicates; a dozen jobs), ``records.processed`` (S3-risk, the groups judged
    on processed records) and ``produce.records`` (S8's records).
    """
    return df if any(t.startswith(prefix) for t in types) else df.limit(0)


def _judge(spark: SparkSession, runs: Sequence[load.RunInput], out: Path, say: Say, i: _Inputs) -> _Result:
    produced, consumed, processed, other, bounds = i.produced, i.consumed, i.processed, i.other, i.bounds
    region_events = journalled(other, i.types, "region.")
    say("computing ownership intervals and merging offset ranges")
    tables_dir = out / "tables"

    def write(name: str, df: DataFrame) -> DataFrame:
        """Write a table and return it read back: one job, and the table then serves its later users from disk (a
        table that is also an intermediate result is not checkpointed first and written after)."""
        path = str(tables_dir / name)
        (df if name == "outside_ownership" else df.coalesce(1)).write.mode("overwrite").parquet(path)
        return spark.read.schema(df.schema).parquet(path)  # the schema is known: no footer to read

    def writing(name: str, df: DataFrame) -> Callable[[], DataFrame]:
        return functools.partial(write, name, df)

    # Independent Spark jobs are submitted together from a few driver threads (rounds: each needs the ones before):
    # small jobs spend most of their time in planning and scheduling, which then overlaps.
    registrations = tables.of(other, "consumer.registered")
    # Consumed and processed ranges are merged in one job, each kind apart (the ``source`` key).
    both = consumed.withColumn("source", F.lit("consumed")).unionByName(
        processed.withColumn("source", F.lit("processed"))
    )
    seen, produced_merged, group_merged, regex_rows, stale, terms, rebalances, faults, deposed, progress = _together(
        lambda: _checkpoint(tables.last_seen(other, consumed)),
        lambda: _checkpoint(ranges.merge_ranges(produced, ("run", "topic", "partition"))),
        lambda: _checkpoint(ranges.merge_ranges(both, (*tables.PARTITION_KEYS, "source"))),
        lambda: checks.regex_keys(registrations).collect(),
        writing("stale_applied", checks.stale_applied(other)),
        writing("terms", tables.terms(other, bounds)),
        writing("rebalances", tables.rebalances(other)),
        writing("faults", tables.faults(other)),
        writing("deposed_writes", checks.deposed_writes(other)),
        writing("progress", tables.progress(produced, consumed, bounds)),
    )
    consumed_merged = group_merged.where(F.col("source") == "consumed").drop("source")
    # (the checkpoint hides from the optimizer that there is nothing processed where no journal holds a range of it)
    processed_merged = journalled(
        group_merged.where(F.col("source") == "processed").drop("source"), i.types, "records.processed"
    )
    # S3 and S4 judge a group on what its application processed if it journals that, else on what it consumed.
    groups = consumption.processing_groups(processed_merged)
    judged_merged = consumption.judged(consumed_merged, processed_merged, groups)
    refused = _refused_regexes(regex_rows)
    invalid = sorted({key for keys in refused.values() for key in keys})
    # the produced topics from the merged islands (few rows), not from every produce.batch again
    topics = produced_merged.select("run", "topic").distinct()
    intervals, subscribed, commands = _together(
        writing("ownership", tables.ownership(other, seen)),
        lambda: _checkpoint(checks.subscribed_topics(registrations, topics, invalid)),
        writing("commands", tables.commands(other, stale)),
    )
    expected = consumption.expected_ranges(produced_merged, subscribed)
    judged = consumption.judged(consumed, processed, groups)
    tails = checks.crash_tails(other, judged, seen)
    # S3-risk: what consumers with auto-commit off committed before their application processed it
    commits = checks.judged_commits(other, groups)
    # S8: the states of a consistent region's checkpoints against the records produced (region runs only)
    records = journalled(regions.produced_records(other), i.types, "produce.records")
    say(f"writing tables to {tables_dir}")
    missing, duplicates, unprocessed, region_state, overlaps, outside = _together(
        writing("missing_ranges", consumption.missing_ranges(expected, judged_merged, groups)),
        # a group in a consistent region consumes again after each reset by design: S8 judges it, not S4
        writing(
            "duplicate_ranges",
            regions.mark_region_groups(consumption.duplicate_ranges(judged_merged, tails, groups), region_events),
        ),
        writing("committed_unprocessed", checks.committed_unprocessed(commits, consumed, processed)),
        writing("region_state", regions.state_violations(region_events, records)),
        writing("overlaps", checks.with_grants(checks.overlaps(intervals), other)),
        # Deliveries outside ownership can be many (an unsafe run): written in parallel.
        writing("outside_ownership", checks.outside_ownership(consumed, intervals)),
    )
    table = consumption.consumption(
        produced_merged,
        consumed_merged,
        subscribed,
        missing,
        duplicates,
        processed_merged=processed_merged,
        groups=groups,
    )
    per_partition = write("consumption", table)

    say("computing the verdict")
    t = Tables(
        terms=terms,
        deposed=deposed,
        intervals=intervals,
        overlaps=overlaps,
        outside=outside,
        missing=missing,
        duplicates=duplicates,
        unprocessed=unprocessed,
        commits=commits,
        consumption=per_partition,
        stale=stale,
        rejections=checks.rejections(other),
        rebalances=rebalances,
        faults=faults,
        region_state=region_state,
        region_summary=regions.region_summary(region_events, records),
        judged=judged,
        events=other,
    )
    verdicts = run_verdicts(t, runs, i.reads, refused)
    say("collecting report data")
    frames = {
        "intervals": intervals,
        "overlaps": overlaps,
        "rebalances": rebalances,
        "faults": faults,
        "progress": progress,
        "commands": commands,
    }
    return verdicts, ReportData.collect(frames, i.first_ts)
