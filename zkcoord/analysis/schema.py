"""The journal's line format as Spark types (docs/journal.md, schema version 1).

One explicit schema for every event type, built from :data:`zkcoord.runtime.journal.FIELD_KINDS`: a field that one type
writes as a number and another as a list (``members`` of ``rebalance.started`` is a list, of ``rebalance.completed`` a
count) is ``text``, read as a string, which Spark's JSON parser fills with the raw JSON text of any value.  Fields this
pipeline does not use are not parsed at all.
"""

from __future__ import annotations

from pyspark.sql import types as T

from zkcoord.runtime.journal import EVENTS, FIELD_KINDS, SCHEMA_VERSION

#: The newest schema version this reader understands; lines with a larger ``v`` are skipped and counted.
MAX_VERSION = SCHEMA_VERSION

#: Every event type of the catalogue (zkcoord.runtime.journal.EVENTS); other ``ev`` values are counted and ignored.
KNOWN_EVENTS: tuple[str, ...] = tuple(sorted(EVENTS))

CORE_FIELDS: tuple[str, ...] = ("v", "ts", "mono", "seq", "role", "pid", "ev")

__all__ = ["CORE_FIELDS", "EVENT_COLUMNS", "EVENT_SCHEMA", "FIELD_KINDS", "KNOWN_EVENTS", "MAX_VERSION"]

_SPARK_TYPES: dict[str, T.DataType] = {
    "int": T.LongType(),
    "float": T.DoubleType(),
    "str": T.StringType(),
    "bool": T.BooleanType(),
    "text": T.StringType(),
    "counts": T.MapType(T.StringType(), T.LongType()),
    "int|list": T.LongType(),  # the count; a list is read as null (not used by the analysis)
}

EVENT_SCHEMA = T.StructType([T.StructField(name, _SPARK_TYPES[kind]) for name, kind in FIELD_KINDS.items()])

#: Event columns after parsing (the core fields and every event field), in schema order.
EVENT_COLUMNS: tuple[str, ...] = tuple(f.name for f in EVENT_SCHEMA.fields)
