"""What ``zkcoord group reset-offsets`` is asked to do, parsed and validated before anything is read: the mode
(where each partition goes, Kafka's ``--to-earliest`` ... ``--to-datetime``, and ``--to-checkpoint``) and the
partitions (``--topic T[:P,...]``, ``--all-topics``).

Pure: no I/O.  Every function raises :class:`~zkcoord.errors.ConfigurationError` (one line) on bad input; nothing
here talks to ZooKeeper, so a typo is refused even when ZooKeeper is down.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from enum import Enum

from zkcoord.errors import ConfigurationError
from zkcoord.layout.checkpoints import validate_checkpoint
from zkcoord.layout.names import MAX_PARTITIONS, validate_topic
from zkcoord.layout.znodes import MAX_LONG

_INT = re.compile(r"[+-]?[0-9]+")
_PARTITIONS = re.compile(r"[0-9]+(?:,[0-9]+)*")


class Mode(Enum):
    """Where a reset moves each partition; the value is the option's name without ``--``."""

    EARLIEST = "to-earliest"
    LATEST = "to-latest"
    OFFSET = "to-offset"
    SHIFT = "shift-by"
    DATETIME = "to-datetime"
    CHECKPOINT = "to-checkpoint"


@dataclass(frozen=True, slots=True)
class ResetSpec:
    """One mode and its argument: ``number`` (an offset, a shift, epoch ms for ``to-datetime``), ``checkpoint``
    (its name), ``text`` the argument as given (for the plan's header)."""

    mode: Mode
    number: int | None = None
    checkpoint: str | None = None
    text: str | None = None

    def describe(self) -> str:
        return f"--{self.mode.value}" + ("" if self.text is None else f" {self.text}")


@dataclass(frozen=True, slots=True)
class TopicSelection:
    """A topic to reset: every partition (``partitions`` None) or those listed."""

    topic: str
    partitions: tuple[int, ...] | None = None


def parse_spec(
    *,
    to_earliest: bool,
    to_latest: bool,
    to_offset: str | None,
    shift_by: str | None,
    to_datetime: str | None,
    to_checkpoint: str | None,
) -> ResetSpec:
    """Exactly one mode, with its argument checked.  :raises ConfigurationError:"""
    raw: dict[Mode, str | None] = {
        Mode.OFFSET: to_offset,
        Mode.SHIFT: shift_by,
        Mode.DATETIME: to_datetime,
        Mode.CHECKPOINT: to_checkpoint,
    }
    flags = {Mode.EARLIEST: to_earliest, Mode.LATEST: to_latest}
    given = [m for m in Mode if flags.get(m) or raw.get(m) is not None]
    if len(given) != 1:
        options = ", ".join(f"--{m.value}" for m in Mode)
        what = "no reset mode given" if not given else f"one reset mode only, got {len(given)}"
        raise ConfigurationError(f"{what}: choose one of {options}")
    mode = given[0]
    text = raw.get(mode)
    if text is None:
        return ResetSpec(mode)
    if mode is Mode.OFFSET:
        offset = _integer("--to-offset", text)
        if offset < 0:
            raise ConfigurationError(f"--to-offset must not be negative, got {text}")
        return ResetSpec(mode, number=offset, text=text)
    if mode is Mode.SHIFT:
        return ResetSpec(mode, number=_integer("--shift-by", text), text=text)
    if mode is Mode.DATETIME:
        return ResetSpec(mode, number=parse_datetime(text), text=text)
    return ResetSpec(mode, checkpoint=validate_checkpoint(text), text=text)


def _integer(option: str, text: str) -> int:
    if not _INT.fullmatch(text.strip()) or abs(int(text)) > MAX_LONG:
        raise ConfigurationError(f"{option} needs a whole number in -2^63+1..2^63-1, got {text[:40]!r}")
    return int(text)


def parse_datetime(text: str) -> int:
    """ISO 8601 (``2025-11-21T16:00:00``, ``...:00.250``, ``...Z``, ``...+01:00``, or a date alone) as epoch ms.
    Without a zone it is local time, as Kafka's ``--to-datetime`` reads it.  :raises ConfigurationError:"""
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError as e:
        raise ConfigurationError(
            f"--to-datetime needs an ISO 8601 date-time such as 2025-11-21T16:00:00.000 or "
            f"2025-11-21T16:00:00Z, got {text[:60]!r}"
        ) from e
    try:
        ms = round(when.timestamp() * 1000)  # a naive datetime's timestamp() is local time
    except (ValueError, OverflowError, OSError):  # year 1 or 9999 moved out of datetime's range by the local zone
        ms = -1 if when.year < 1970 else MAX_LONG
    if ms < 0:
        raise ConfigurationError(f"--to-datetime must not be before 1970-01-01T00:00:00Z, got {text[:60]!r}")
    return ms


def parse_topics(values: tuple[str, ...], all_topics: bool) -> tuple[TopicSelection, ...] | None:
    """``--topic T`` / ``--topic T:P,P,...`` (repeatable), or ``--all-topics`` (``None``: the group's own topics).
    :raises ConfigurationError: neither or both given, a bad topic name, a malformed partition list."""
    if all_topics and values:
        raise ConfigurationError("give --topic or --all-topics, not both")
    if all_topics:
        return None
    if not values:
        raise ConfigurationError("no partitions chosen: give --topic T[:P,...] (repeatable) or --all-topics")
    chosen: dict[str, set[int] | None] = {}
    for value in values:
        topic, colon, parts = value.partition(":")
        validate_topic(topic)
        if not colon:
            chosen[topic] = None
            continue
        if not _PARTITIONS.fullmatch(parts):
            raise ConfigurationError(f"--topic {value[:80]!r}: expected T or T:P[,P...] with partition numbers")
        numbers = {int(p) for p in parts.split(",")}
        if max(numbers) >= MAX_PARTITIONS:
            raise ConfigurationError(f"--topic {value[:80]!r}: partition {max(numbers)} is out of range")
        if topic in chosen:
            before = chosen[topic]
            chosen[topic] = None if before is None else before | numbers
        else:
            chosen[topic] = numbers
    return tuple(TopicSelection(t, None if p is None else tuple(sorted(p))) for t, p in sorted(chosen.items()))
