"""The data format every znode of the layout shares (``docs/zookeeper-layout.md``), and the integer znodes.

Where Kafka 0.8 had a format we use it byte for byte in spirit (``reference/legacy-kafka-zk.md`` §1): JSON objects
with a ``version`` field, ``timestamp`` as a *string* of epoch milliseconds, offsets and epochs as plain decimal
strings.  Every ``decode`` validates and raises :class:`~zkcoord.errors.CodecError` on anything malformed, so a bad
znode written by a buggy or hostile client is refused with a reason (S7) instead of crashing the reader.

This module holds the JSON object framing and field readers every record codec uses (:func:`load_object`,
:func:`dump_object`, :func:`get_field`, :func:`nonneg_int`, :func:`timestamp_field`) and the codec of the integer
znodes (offsets, epochs: :func:`encode_int`, :func:`decode_int`).  The records themselves live beside it:
:mod:`~zkcoord.layout.registrations` (brokers, topics, the coordinator, group members),
:mod:`~zkcoord.layout.commands` (the command channel) and :mod:`~zkcoord.layout.group_state` (a group's persisted
state and its owner znodes).  It keeps the name ``znodes`` (and its history) because the format is what the name
always described; the records were split out of it when it reached 600 lines.

Codecs are pure: no I/O, no clock (callers pass timestamps), so they are property-tested in isolation.  May import
only :mod:`zkcoord.errors` and the standard library.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from zkcoord.errors import CodecError

#: The only ``version`` value this release writes and reads for Kafka-format znodes.
FORMAT_VERSION = 1

INT_TEXT = re.compile(r"(0|[1-9][0-9]*)")


def load_object(what: str, data: bytes | None, path: str | None) -> dict[str, Any]:
    if data is None or not data:
        raise CodecError(what, "empty data", path)
    try:
        obj = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CodecError(what, f"not JSON ({e})", path) from e
    except ValueError as e:
        # Python's own limit on converting a number (4300 digits): valid JSON, but no field of ours is near it
        raise CodecError(what, "a number too long to be any field", path) from e
    except RecursionError as e:
        # the decoder recurses once per nesting level, and a znode holds a megabyte of brackets
        raise CodecError(what, "nested too deep", path) from e
    if not isinstance(obj, dict):
        raise CodecError(what, f"expected a JSON object, got {type(obj).__name__}", path)
    version = obj.get("version")
    # `type() is int`: True and 1.0 equal 1 in Python, but are not the version this release writes
    if type(version) is not int or version != FORMAT_VERSION:
        raise CodecError(what, f"unsupported version {version!r} (this release reads version {FORMAT_VERSION})", path)
    return obj


def dump_object(obj: Mapping[str, Any]) -> bytes:
    # Compact and key-sorted: byte-identical encodings make znode contents comparable and diffable.
    return json.dumps(obj, separators=(",", ":"), sort_keys=True).encode("utf-8")


def get_field(obj: Mapping[str, Any], key: str, kind: type | tuple[type, ...], what: str, path: str | None) -> Any:
    if key not in obj:
        raise CodecError(what, f"missing field {key!r}", path)
    value = obj[key]
    # bool is an int in Python, never a valid integer field here.
    if isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)):
        raise CodecError(what, f"field {key!r} must be {_kind_name(kind)}, got a boolean", path)
    if not isinstance(value, kind):
        raise CodecError(what, f"field {key!r} must be {_kind_name(kind)}, got {type(value).__name__}", path)
    return value


def _kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(k.__name__ for k in kinds)


#: Every integer the layout stores (epochs, generations, offsets, ids) is a Java long in Kafka; a larger one was not
#: written by any part of the system, and accepting it would let one forged command raise a consumer's newest
#: epoch past anything a real coordinator can reach.
MAX_LONG = 2**63 - 1


def nonneg_int(obj: Mapping[str, Any], key: str, what: str, path: str | None) -> int:
    value: int = get_field(obj, key, int, what, path)
    if not 0 <= value <= MAX_LONG:
        raise CodecError(what, f"field {key!r} must be an integer in 0..2^63-1, got {str(value)[:40]}", path)
    return value


def timestamp_field(obj: Mapping[str, Any], what: str, path: str | None) -> int:
    raw = get_field(obj, "timestamp", str, what, path)
    if not INT_TEXT.fullmatch(raw):
        raise CodecError(what, f"timestamp must be a decimal string of epoch ms, got {raw!r}", path)
    return int(raw)


def encode_int(value: int) -> bytes:
    """Encode an offset or an epoch as Kafka does: a plain decimal string."""
    if value < 0:
        raise ValueError(f"cannot encode negative value {value}")
    return str(value).encode("ascii")


def decode_int(what: str, data: bytes | None, path: str | None = None) -> int:
    """Decode a plain decimal string (offsets, the coordinator epoch); raise CodecError if it is anything else."""
    try:
        text = (data or b"").decode("ascii").strip()
    except UnicodeDecodeError as e:
        raise CodecError(what, "not ASCII", path) from e
    if not INT_TEXT.fullmatch(text) or len(text) > 19 or int(text) > MAX_LONG:
        raise CodecError(what, f"expected a decimal integer in 0..2^63-1, got {text[:40]!r}", path)
    return int(text)
