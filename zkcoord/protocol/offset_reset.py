"""``auto.offset.reset`` for this project: what a consumer does with a position outside its partition's log.

Pure: :func:`out_of_range` and :func:`decide` (used by the fetchers and by ``zkcoord group describe``), and the record
a consumer leaves in ``/consumers/groups/<g>/resets/<t>/<p>`` after it reset (or held) a partition
(:class:`ResetRecord`, JSON).  Any thread.

A position is *in range* when ``log start <= position <= high water``, where the high water is the offset the next
record appended will get (the log's end, or higher if the log lost records that had been handed out: the writer
then skips past them, ``docs/partition-log.md``).  A position in range is never reset: a consumer waiting at the high
water of a log that lost its tail gets the next records appended.  Out of range:

* ``earliest``: move to the log's start (re-read what is there: duplicates, never loss);
* ``latest``: move to the high water (skip what is there: loss of the records between, never duplicates);
* ``none``: do not move; the partition is held (not fetched) and reported, so that a person decides.

Why two settings where Kafka has one.  Kafka's ``auto.offset.reset`` covers both "no committed offset" and "committed
offset out of range".  Here a partition with no committed offset is normal (a new group) and keeps its own
setting, ``start_from`` (``zkcoord consume --from``, default ``earliest``), with the meaning it always had.  An
out-of-range position only comes from damage or a hand edit (a committed offset set too high, a log that lost
segments), so it gets this separate policy, ``offset_reset`` (``--offset-reset``), whose ``none`` lets an operator be
told of damage without refusing new groups.  Its default is ``earliest``, not Kafka's ``latest``: the product's S3
says every record produced is consumed, and ``earliest`` never skips a record that is in the log (it costs
duplicates, which the reset's journal event accounts for); ``latest`` would silently skip everything between the
log's start and its end.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Literal, get_args

from zkcoord.errors import CodecError, ConfigurationError

OffsetReset = Literal["earliest", "latest", "none"]
POLICIES: tuple[str, ...] = get_args(OffsetReset)
DEFAULT: OffsetReset = "earliest"

BELOW_START = "below the log start"
BEYOND_END = "beyond the log end"


def check_policy(policy: str) -> OffsetReset:
    """``policy`` as an :data:`OffsetReset`.  :raises ConfigurationError: it is not one."""
    if policy == "earliest":
        return "earliest"
    if policy == "latest":
        return "latest"
    if policy == "none":
        return "none"
    raise ConfigurationError(f"offset reset policy must be one of {', '.join(POLICIES)}, got {policy!r}")


def out_of_range(position: int, start: int, high_water: int) -> str | None:
    """Why ``position`` lies outside ``[start, high_water]`` (:data:`BELOW_START`, :data:`BEYOND_END`), or None."""
    if position < start:
        return BELOW_START
    if position > high_water:
        return BEYOND_END
    return None


@dataclass(frozen=True, slots=True)
class Decision:
    """What to do with an out-of-range position: move to ``to``, or (``to`` None, policy ``none``) hold it."""

    to: int | None
    reason: str


def decide(position: int, start: int, high_water: int, policy: OffsetReset) -> Decision | None:
    """None if ``position`` is in range; else where the policy moves it (``to`` None: held, policy ``none``).

    ``start <= high_water`` is expected; if a log's listing raced with its end (``high_water < start``), the start
    wins, so the result is always a position the log can serve from.
    """
    high_water = max(high_water, start)
    reason = out_of_range(position, start, high_water)
    if reason is None:
        return None
    if policy == "none":
        return Decision(None, reason)
    return Decision(start if policy == "earliest" else high_water, reason)


@dataclass(frozen=True, slots=True)
class ResetRecord:
    """``/consumers/groups/<g>/resets/<t>/<p>``: the last time a consumer found the partition's position out of range.

    ``to`` is None when the policy was ``none`` (the partition is held, not fetched, until an operator fixes the
    committed offset and the group rebalances).
    """

    from_offset: int
    to: int | None
    policy: str
    reason: str
    log_start: int
    high_water: int
    consumer: str
    at_ms: int

    def encode(self) -> bytes:
        fields = asdict(self)
        fields["from"] = fields.pop("from_offset")
        return json.dumps({"version": 1, **fields}, sort_keys=True).encode()

    @classmethod
    def decode(cls, data: bytes, path: str) -> ResetRecord:
        """:raises CodecError: not such a record."""
        try:
            raw = json.loads(data)
            record = cls(
                from_offset=raw["from"],
                to=raw["to"],
                policy=raw["policy"],
                reason=raw["reason"],
                log_start=raw["log_start"],
                high_water=raw["high_water"],
                consumer=raw["consumer"],
                at_ms=raw["at_ms"],
            )
        except (ValueError, TypeError, KeyError) as e:
            raise CodecError("offset reset record", f"malformed: {e}", path) from e
        ints = (record.from_offset, record.log_start, record.high_water, record.at_ms)
        if not all(type(v) is int for v in ints) or not (record.to is None or type(record.to) is int):
            raise CodecError("offset reset record", "offsets must be integers", path)
        if not isinstance(record.policy, str) or not isinstance(record.reason, str):
            raise CodecError("offset reset record", "policy and reason must be strings", path)
        return record
