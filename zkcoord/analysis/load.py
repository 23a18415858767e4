"""Finding a run's journal and reading it into Spark, skipping and counting what cannot be used.

The reader follows :func:`zkcoord.runtime.journal.read_journal`, the reference: a torn last line (a file that does not
end with a newline), a line that is not a JSON object with every core field, and a line of a newer schema version are
skipped and counted, never guessed at.  Two more reasons are counted here: an ``ev`` this reader does not know
(``unknown_event``: a newer writer's event type, ignored) and a range event (``produce.batch``, ``records.consumed``,
``records.processed``) without its topic, partition or a valid ``first..last`` (``incomplete``).

Lines are read as text and parsed with ``from_json`` against the explicit schema of :mod:`zkcoord.analysis.schema`.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import Column, DataFrame, Row, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from zkcoord.analysis.errors import NoJournalError
from zkcoord.analysis.schema import CORE_FIELDS, EVENT_COLUMNS, EVENT_SCHEMA, FIELD_KINDS, KNOWN_EVENTS, MAX_VERSION

#: Why a line was skipped (the ``skip`` column; null for a usable event).
SKIP_REASONS: tuple[str, ...] = ("truncated", "malformed", "newer_schema", "unknown_event", "incomplete")

RANGE_EVENTS = ("produce.batch", "records.consumed", "records.processed")

#: from_json's corrupt-record column: the raw line when a field could not be converted to its schema type.
CORRUPT = "_unconverted"
_PARSE_SCHEMA = T.StructType([*EVENT_SCHEMA.fields, T.StructField(CORRUPT, T.StringType())])


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


def _holds_journal(path: Path) -> bool:
    return path.is_dir() and any(path.glob("*.jsonl"))


def _journals(path: Path) -> list[Path]:
    """The journal directories ``path`` stands for: its own, else those of the run directories right inside it (what
    ``zkcoord demo`` prints as its "run directory": ``safe/`` and ``unsafe/``), in name order.

    :raises NoJournalError: neither ``path`` nor a directory inside it holds a journal.
    """
    for journal in (path / "journal", path):
        if _holds_journal(journal):
            return [journal]
    inside = sorted(p / "journal" for p in path.iterdir()) if path.is_dir() else []
    found = [journal for journal in inside if _holds_journal(journal)]
    if not found:
        raise NoJournalError(str(path))
    return found


def locate(paths: Sequence[str | os.PathLike[str]]) -> list[RunInput]:
    """Resolve run directories (``RUN/journal/*.jsonl``), journal directories (``DIR/*.jsonl``) or a directory of
    run directories (``BASE/RUN/journal/*.jsonl``, a demo's: each run inside it) into inputs.

    Run names are the run directories' names, made unique with a ``-2``, ``-3``... suffix.

    :raises NoJournalError: a path holds no journal file.
    """
    runs: list[RunInput] = []
    seen: dict[str, int] = {}
    for journal in [j for raw in paths for j in _journals(Path(raw).expanduser())]:
        files = tuple(sorted(journal.glob("*.jsonl")))
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

    Output: ``run``, ``skip``, one column per schema field (:data:`~zkcoord.analysis.schema.EVENT_COLUMNS`) and
    ``kind``: ``produced``, ``consumed`` and ``processed`` (the range events, most of a journal), ``other`` or
    ``skipped``.  The raw text is dropped.
    """
    e = F.col("e")
    # Both parses are columns of their own, each evaluated once per line, not once per expression that reads them.
    variant = F.col("j")
    value = {k: F.variant_get(variant, f"$.{k}", "variant") for k in FIELD_KINDS}
    # from_json marks a line it could not convert field for field (a value of the wrong JSON type for a number, a
    # boolean, a map or an integer beyond 64 bits) in the corrupt-record column, and reads such a field as null.
    # On a line it converted whole, a null is an absent field: the variant, which most lines leave many fields
    # absent from, is asked whether a field is there only on the lines from_json could not convert (or where a
    # string could be another type's text: _mistyped).  A string field never fails the conversion.
    converted = e[CORRUPT].isNull()
    present = {
        k: e[k].isNotNull() | (~converted & v.isNotNull() & ~F.is_variant_null(v))
        if FIELD_KINDS[k] not in ("str", "text")
        else e[k].isNotNull()
        for k, v in value.items()
    }
    # present and not null, whatever its type: a wrong type is judged after the version (a newer schema may differ)
    core_present = functools.reduce(lambda a, b: a & b, [present[k] for k in CORE_FIELDS])
    mistyped = functools.reduce(
        lambda a, b: a | b,
        [_mistyped(e[k], value[k], present[k], kind) for k, kind in FIELD_KINDS.items() if k != "v"],
    )
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
        .when(variant.isNull() | ~core_present, F.lit("malformed"))
        # the reference reader counts a non-integer v as a newer schema, never guesses it
        .when(e["v"].isNull(), F.lit("newer_schema"))
        .when(e["v"] > MAX_VERSION, F.lit("newer_schema"))
        .when(mistyped, F.lit("malformed"))
        .when(~ev.isin(*KNOWN_EVENTS), F.lit("unknown_event"))
        .when(ev.isin(*RANGE_EVENTS) & ~range_ok, F.lit("incomplete"))
    )
    kind = (
        F.when(F.col("skip").isNotNull(), F.lit("skipped"))
        .when(F.col("ev") == "produce.batch", F.lit("produced"))
        .when(F.col("ev") == "records.consumed", F.lit("consumed"))
        .when(F.col("ev") == "records.processed", F.lit("processed"))
        .otherwise(F.lit("other"))
    )
    parsed = lines.select(
        "run",
        F.from_json(F.col("value"), _PARSE_SCHEMA, {"columnNameOfCorruptRecord": CORRUPT}).alias("e"),
        # the line as a variant (null unless plain JSON: a duplicate key, NaN or Infinity), for the JSON type of each
        # field: from_json turns a value of the wrong type into null, as if the field were absent
        F.try_parse_json(F.col("value")).alias("j"),
        F.col("torn"),
    )
    return parsed.select("run", skip.alias("skip"), *[e[c].alias(c) for c in EVENT_COLUMNS]).withColumn("kind", kind)


def _mistyped(typed: Column, value: Column, present: Column, kind: str) -> Column:
    """Whether a field is present (not null) with a JSON type other than ``kind`` (:data:`FIELD_KINDS`); the same
    rules as :func:`zkcoord.runtime.journal.mistyped_fields`.

    ``typed`` is the field as from_json read it: null for a value of another type (a string, a boolean, a fraction
    or an integer beyond 64 bits where an integer is expected), and for strings the text of any value.  ``value`` is
    the field as a variant.  Each test looks at ``typed`` first, so the variant is consulted only when needed.
    """
    if kind in ("int", "bool"):  # from_json reads a value of another JSON type as null
        return typed.isNull() & present
    if kind == "float":  # from_json takes the strings "NaN" and "Infinity" as doubles: finite rules them out
        return (typed.isNull() & present) | F.isnan(typed) | (F.abs(typed) == F.lit(float("inf")))
    if kind == "str":
        # from_json renders a value of another JSON type as its JSON text, which starts with a digit, "-", "{", "["
        # or "t"/"f" (true, false): only text that starts so needs the variant's word on its type (the costly part)
        suspect = F.substring(typed, 1, 1).isin(*"0123456789-{[tf")
        return typed.isNotNull() & suspect & (F.schema_of_variant(value) != F.lit("STRING"))
    if kind == "counts":
        return (typed.isNull() & present) | F.exists(F.map_values(typed), lambda x: x.isNull())
    if kind == "int|list":
        return typed.isNull() & present & F.try_variant_get(value, "$", "array<variant>").isNull()
    return F.lit(False)  # text


def of_kind(classified: DataFrame, kind: str) -> DataFrame:
    """The usable events of one kind (``produced``, ``consumed``, ``processed``, ``other``), without the bookkeeping
    columns."""
    return classified.where(F.col("kind") == kind).drop("skip", "kind")


def read_summary(classified: DataFrame) -> DataFrame:
    """Everything the reader has to say about a run, in one small aggregation.

    One row per ``run, role, pid, skip, unknown_ev`` (``unknown_ev`` is the ``ev`` of an ``unknown_event`` line):
    ``lines``, ``seq_lines`` (lines with a sequence number), ``max_seq``, and over usable events ``first_ts``,
    ``last_ts`` and ``types`` (the event types).  :func:`fold_summary` turns it into counts per run.
    """
    ok = F.col("skip").isNull()
    unknown_ev = F.when(F.col("skip") == "unknown_event", F.col("ev"))
    return classified.groupBy("run", "role", "pid", "skip", unknown_ev.alias("unknown_ev")).agg(
        F.count(F.lit(1)).alias("lines"),
        F.count("seq").alias("seq_lines"),
        F.max("seq").alias("max_seq"),
        F.min(F.when(ok, F.col("ts"))).alias("first_ts"),
        F.max(F.when(ok, F.col("ts"))).alias("last_ts"),
        F.collect_set(F.when(ok, F.col("ev"))).alias("types"),
    )


def fold_summary(rows: Iterable[Row]) -> dict[str, dict[str, Any]]:
    """Per run: ``lines``, ``events``, a count per skip reason, ``unknown_types`` (ev -> count), ``seq_gaps``
    (sequence numbers missing per process: lost or unreadable lines), ``first_ts``, ``last_ts`` and ``types`` (the
    set of usable events' types)."""
    runs: dict[str, dict[str, Any]] = {}
    processes: dict[tuple[str, str, int], list[int]] = {}
    for row in rows:
        r = runs.setdefault(
            row["run"],
            {"lines": 0, "events": 0, "unknown_types": {}, "first_ts": None, "last_ts": None, "types": set()},
        )
        r["types"].update(row["types"] or ())
        r["lines"] += row["lines"]
        skip = row["skip"]
        if skip is None:
            r["events"] += row["lines"]
            for key, pick in (("first_ts", min), ("last_ts", max)):
                if row[key] is not None:
                    r[key] = row[key] if r[key] is None else pick(r[key], row[key])
        else:
            r[skip] = r.get(skip, 0) + row["lines"]
        if row["unknown_ev"] is not None:
            r["unknown_types"][row["unknown_ev"]] = r["unknown_types"].get(row["unknown_ev"], 0) + row["lines"]
        if row["role"] is not None and row["pid"] is not None and row["max_seq"] is not None:
            seen = processes.setdefault((row["run"], row["role"], row["pid"]), [0, 0])
            seen[0] = max(seen[0], row["max_seq"])
            seen[1] += row["seq_lines"]
    for (run, _role, _pid), (max_seq, seq_lines) in processes.items():
        runs[run]["seq_gaps"] = runs[run].get("seq_gaps", 0) + max(max_seq - seq_lines, 0)
    return runs
