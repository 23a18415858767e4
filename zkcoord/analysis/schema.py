"""The journal's line format as Spark types (docs/journal.md, schema version 1).

One explicit schema for every event type: a field that one type writes as a number and another as a list (``members``
of ``rebalance.started`` is a list, of ``rebalance.completed`` a count) is read as a string, which Spark's JSON parser
fills with the raw JSON text of any value.  Fields this pipeline does not use are not parsed at all.
"""

from __future__ import annotations

from pyspark.sql import types as T

from zkcoord.journal import EVENTS, SCHEMA_VERSION

#: The newest schema version this reader understands; lines with a larger ``v`` are skipped and counted.
MAX_VERSION = SCHEMA_VERSION

#: Every event type of the catalogue (zkcoord.journal.EVENTS); other ``ev`` values are counted and ignored.
KNOWN_EVENTS: tuple[str, ...] = tuple(sorted(EVENTS))

CORE_FIELDS: tuple[str, ...] = ("v", "ts", "mono", "seq", "role", "pid", "ev")

_LONG = T.LongType()
_STR = T.StringType()
_DOUBLE = T.DoubleType()

EVENT_SCHEMA = T.StructType(
    [
        # core fields
        T.StructField("v", _LONG),
        T.StructField("ts", _LONG),
        T.StructField("mono", _LONG),
        T.StructField("seq", _LONG),
        T.StructField("role", _STR),
        T.StructField("pid", _LONG),
        T.StructField("ev", _STR),
        # who and where
        T.StructField("group", _STR),
        T.StructField("consumer", _STR),
        T.StructField("thread", _STR),
        T.StructField("topic", _STR),
        T.StructField("partition", _LONG),
        T.StructField("broker", _STR),
        # ranges and offsets
        T.StructField("first", _LONG),
        T.StructField("last", _LONG),
        T.StructField("count", _LONG),
        T.StructField("offset", _LONG),
        T.StructField("at_ms", _DOUBLE),
        # coordination
        T.StructField("epoch", _LONG),
        T.StructField("generation", _LONG),
        T.StructField("attempt", _LONG),
        T.StructField("attempts", _LONG),
        T.StructField("retry", _LONG),
        T.StructField("retries", _LONG),
        T.StructField("option", _STR),
        T.StructField("name", _STR),
        T.StructField("reason", _STR),
        T.StructField("trigger", _STR),
        T.StructField("members", _STR),
        T.StructField("partitions", _LONG),
        T.StructField("moved", _LONG),
        T.StructField("latency_ms", _DOUBLE),
        T.StructField("stop_ms", _DOUBLE),
        T.StructField("start_ms", _DOUBLE),
        # membership, faults
        T.StructField("pattern", _STR),
        T.StructField("subscription", T.MapType(_STR, _LONG)),
        T.StructField("fault", _STR),
        T.StructField("target", _STR),
        T.StructField("detail", _STR),
    ]
)

#: Event columns after parsing (the core fields and every event field), in schema order.
EVENT_COLUMNS: tuple[str, ...] = tuple(f.name for f in EVENT_SCHEMA.fields)
