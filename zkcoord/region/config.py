"""A region member's settings.  Frozen; validates itself (:class:`~zkcoord.errors.ConfigurationError`, one line)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from zkcoord.errors import ConfigurationError
from zkcoord.layout.region import validate_member, validate_region

StartPosition = Literal["beginning", "end", "committed", "timestamp"]
START_POSITIONS: tuple[StartPosition, ...] = ("beginning", "end", "committed", "timestamp")
#: the seed's message queue holds 100 x max.poll.records
QUEUE_FACTOR = 100
#: the seed's bound on the merge wait, whatever the timeouts
MERGE_WAIT_CAP_S = 15.0


@dataclass(frozen=True, slots=True)
class RegionConfig:
    """:param region: the region id; the group's first member records it, a member of another region is refused.
    :param member: this member's name (the seed's operator name): unique in the region, stable across restarts (its
        local checkpoints are kept under it).
    :param store_dir: the local checkpoint store's directory (``docs/regions.md``, "Local store").
    :param start_position: where a partition with no control variable starts: ``beginning``, ``end``,
        ``committed`` (the group's committed offset, else the log start) or ``timestamp`` (the first record at or
        after ``start_timestamp_ms``, else the log end).  Never a fixed offset: an offset belongs to a partition.
    :param reset_timeout_s: the region's reset timeout (the seed's ``CR_resetTimeout``); the merge wait is
        ``min(reset_timeout_s / 2, max_poll_interval_s / 2, 15 s)``.
    :param throttle_s: after a reset, polling is throttled for this long (one poll per ``throttle_poll_s``).
    """

    region: str
    member: str
    store_dir: Path
    start_position: StartPosition = "beginning"
    start_timestamp_ms: int | None = None
    reset_timeout_s: float = 30.0
    poll_timeout_s: float = 0.05
    throttle_s: float = 1.0
    throttle_poll_s: float = 0.05

    def __post_init__(self) -> None:
        validate_region(self.region)
        validate_member(self.member)
        if self.start_position not in START_POSITIONS:
            raise ConfigurationError(
                f"start position must be one of {', '.join(START_POSITIONS)}, got {self.start_position!r}"
            )
        if (self.start_position == "timestamp") != (self.start_timestamp_ms is not None):
            raise ConfigurationError("a timestamp is given with start position 'timestamp', and only then")
        if self.start_timestamp_ms is not None and self.start_timestamp_ms < 0:
            raise ConfigurationError(f"start timestamp must not be negative, got {self.start_timestamp_ms}")
        if not 0.5 <= self.reset_timeout_s <= 3600:
            raise ConfigurationError(f"reset timeout must be within 0.5..3600 s, got {self.reset_timeout_s}")
        for name, value in (("poll timeout", self.poll_timeout_s), ("throttle poll", self.throttle_poll_s)):
            if not 0.001 <= value <= 10:
                raise ConfigurationError(f"{name} must be within 0.001..10 s, got {value}")
        if not 0 <= self.throttle_s <= 60:
            raise ConfigurationError(f"throttle must be within 0..60 s, got {self.throttle_s}")

    def merge_wait_s(self, max_poll_interval_s: float) -> float:
        """The seed's bound on waiting for a merge: min(reset timeout / 2, max poll interval / 2, 15 s)."""
        return min(self.reset_timeout_s / 2, max_poll_interval_s / 2, MERGE_WAIT_CAP_S)
