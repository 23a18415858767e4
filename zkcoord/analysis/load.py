"""Finding a run's journal and reading it into Spark, skipping and counting what cannot be used.

The reader follows :func:`zkcoord.journal.read_journal`, the reference: a torn last line (a file that does not end
with a newline), a line that is not a JSON object with every core field, and a line of a newer schema version are
skipped and counted, never guessed at.  Two more reasons are counted here: an ``ev`` this reader does not know
(``unknown_event``: a newer writer's event type, ignored) and a range event (``produce.batch``, ``records.consumed``)
without its topic, partition or a valid ``first..last`` (``incomplete``).

Lines are read as text and parsed with ``from_json`` against the explicit schema of :mod:`zkcoord.analysis.schema`.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from zkcoord.analysis.errors import NoJournalError
from zkcoord.analysis.schema import CORE_FIELDS, EVENT_COLUMNS, EVENT_SCHEMA, KNOWN_EVENTS, MAX_VERSION

#: Why a line was skipped (the ``skip`` column; null for a usable event).
SKIP_REASONS: tuple[str, ...] = ("truncated", "malformed", "newer_schema", "unknown_event", "incomplete")

RANGE_EVENTS = ("produce.batch", "records.consumed")


@dataclass(frozen=True)
class RunInput:
    """One run to analyse: its name (the ``run`` column), its journal directory and the files in it."""

    name: str
    journal_dir: Path
    files: tuple[Path, ...]
    #: file name -> the text of its torn last line (files that do not end with a newline)
    torn: tuple[tuple[str, str], ...]

    @property
    def run_dir(self) -> Path:
        return self.journal_dir.parent if self.journal_dir.name == "journal" else self.journal_dir


def _torn_tail(path: Path) -> str | None:
    """The text of ``path``'s last line if the file does not end with a newline (a write cut short), else None."""
    size = path.stat().st_size
    if size == 0:
        return None
    with path.open("rb") as f:
        f.seek(size - 1)
        if f.read(1) == b"\n":
            return None
        chunk = 1 << 16
        pos, tail = size, b""
        while pos > 0 and b"\n" not in tail:
            step = min(chunk, pos)
            pos -= step
            f.seek(pos)
            tail = f.read(step) + tail
    last = tail.rsplit(b"\n", 1)[-1]
    try:
        return last.rstrip(b"\r").decode("utf-8")
    except UnicodeDecodeError:
        return None  # cannot be matched as text; it is not JSON either, so it is counted as malformed


def locate(paths: Sequence[str | os.PathLike[str]]) -> list[RunInput]:
    """Resolve run directories (``RUN/journal/*.jsonl``) or journal directories (``DIR/*.jsonl``) into inputs.

    Run names are the run directories' names, made unique with a ``-2``, ``-3``... suffix.

    :raises NoJournalError: a path holds no journal file.
    """
    runs: list[RunInput] = []
    seen: dict[str, int] = {}
    for raw in paths:
        path = Path(raw).expanduser()
        journal = path / "journal"
        if not (journal.is_dir() and any(journal.glob("*.jsonl"))):
            journal = path
        files = tuple(sorted(journal.glob("*.jsonl"))) if journal.is_dir() else ()
        if not files:
            raise NoJournalError(str(path))
        run_dir = journal.parent if journal.name == "journal" else journal
        base = run_dir.resolve().name or "run"
        seen[base] = seen.get(base, 0) + 1
        name = base if seen[base] == 1 else f"{base}-{seen[base]}"
        torn = tuple((f.name, t) for f in files if (t := _torn_tail(f)) is not None)
        runs.append(RunInput(name=name, journal_dir=journal, files=files, torn=torn))
    return runs


def read_lines(spark: SparkSession, runs: Sequence[RunInput]) -> DataFrame:
    """Every line of every run's journal: ``run``, ``file``, ``value`` (the raw text), ``torn`` (a cut last line)."""
    frames = []
    for run in runs:
        df = spark.read.text([str(f) for f in run.files]).select(
            F.lit(run.name).alias("run"), F.col("_metadata.file_name").alias("file"), F.col("value")
        )
        torn: Column = F.lit(False)
        for file_name, text in run.torn:
            torn = torn | ((F.col("file") == F.lit(file_name)) & (F.col("value") == F.lit(text)))
        frames.append(df.withColumn("torn", torn))
    return functools.reduce(DataFrame.unionByName, frames)


def classify(lines: DataFrame) -> DataFrame:
    """Parse each line and say why it is skipped (``skip``), or null for a usable event.

    Output: ``run``, ``skip`` and one column per schema field (:data:`~zkcoord.analysis.schema.EVENT_COLUMNS`);
    the raw text is dropped.
    """
    e = F.col("e")
    core_present = functools.reduce(lambda a, b: a & b, [e[k].isNotNull() for k in CORE_FIELDS if k != "v"])
    raw_v = F.get_json_object(F.col("value"), "$.v")
    ev = e["ev"]
    range_ok = (
        e["topic"].isNotNull()
        & e["partition"].isNotNull()
        & e["first"].isNotNull()
        & e["last"].isNotNull()
        & (e["first"] >= 0)
        & (e["last"] >= e["first"])
    )
    skip = (
        F.when(F.col("torn"), F.lit("truncated"))
        .when(~core_present, F.lit("malformed"))
        # the reference reader counts a non-integer v as a newer schema, never guesses it
        .when(e["v"].isNull() & raw_v.isNotNull(), F.lit("newer_schema"))
        .when(e["v"].isNull(), F.lit("malformed"))
        .when(e["v"] > MAX_VERSION, F.lit("newer_schema"))
        .when(~ev.isin(*KNOWN_EVENTS), F.lit("unknown_event"))
        .when(ev.isin(*RANGE_EVENTS) & ~range_ok, F.lit("incomplete"))
    )
    return lines.select(
        "run", F.from_json(F.col("value"), EVENT_SCHEMA).alias("e"), F.col("torn"), F.col("value")
    ).select("run", skip.alias("skip"), *[e[c].alias(c) for c in EVENT_COLUMNS])


def usable(classified: DataFrame) -> DataFrame:
    """The events the analysis uses: lines that were not skipped."""
    return classified.where(F.col("skip").isNull()).drop("skip")


def skip_counts(classified: DataFrame) -> DataFrame:
    """``run``, ``lines``, ``events``, one count column per skip reason, and the run's ``first_ts`` and ``last_ts``
    (over its usable events)."""
    ok = F.col("skip").isNull()
    aggs = [F.count(F.lit(1)).alias("lines"), F.count_if(ok).alias("events")]
    aggs += [F.count_if(F.col("skip") == r).alias(r) for r in SKIP_REASONS]
    aggs += [F.min(F.when(ok, F.col("ts"))).alias("first_ts"), F.max(F.when(ok, F.col("ts"))).alias("last_ts")]
    return classified.groupBy("run").agg(*aggs)


def unknown_event_types(classified: DataFrame) -> DataFrame:
    """``run``, ``ev``, ``count`` of the event types this reader does not know."""
    return classified.where(F.col("skip") == "unknown_event").groupBy("run", "ev").count()


def sequence_gaps(classified: DataFrame) -> DataFrame:
    """``run``, ``seq_gaps``: sequence numbers missing per process (lost or unreadable lines), summed per run."""
    per_process = (
        classified.where(F.col("seq").isNotNull() & F.col("pid").isNotNull() & F.col("role").isNotNull())
        .groupBy("run", "role", "pid")
        .agg((F.max("seq") - F.count(F.lit(1))).alias("gaps"))
    )
    return per_process.groupBy("run").agg(F.sum(F.greatest(F.col("gaps"), F.lit(0))).alias("seq_gaps"))
