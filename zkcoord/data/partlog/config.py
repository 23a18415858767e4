"""How a partition writer is configured, and its default clock."""

from __future__ import annotations

import time
from dataclasses import dataclass

from zkcoord.data.partlog.format import MAX_BATCH_SIZE
from zkcoord.errors import ConfigurationError

#: One item of ``PartitionWriter.append_batch``: ``(key, value)``, or ``(key, value, timestamp_ms)``.
BatchItem = tuple[bytes | None, bytes] | tuple[bytes | None, bytes, int]


def wall_clock_ms() -> int:
    """Milliseconds since the epoch: the default record timestamp clock."""
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class WriterConfig:
    """How a writer lays out and protects the log.  Writers of one partition may disagree; the log stays valid.

    :ivar segment_bytes: roll to a new segment before a batch would grow the active one beyond this (a batch larger
        than this gets a segment of its own).  At most 1 GiB, so index positions fit 32 bits.
    :ivar index_interval_bytes: add a sparse index entry about every this many bytes of log.
    :ivar max_batch_bytes: refuse (:class:`~zkcoord.data.partlog.format.RecordTooLargeError`) a batch bigger than this.
    :ivar fsync_on_roll: fsync a segment and the directory when rolling, so that after a machine crash only the
        last segment can need recovery.  Tests with tiny segments turn it off.
    :ivar exclusive: hold the partition lock from the writer's ``open()`` to its ``close()`` instead of per batch
        (``open()`` raises :class:`~zkcoord.errors.LogLockedError` if another writer holds it).  Saves the lock
        and unlock and the catch-up check of every append.
    """

    segment_bytes: int = 64 * 1024 * 1024
    index_interval_bytes: int = 4096
    max_batch_bytes: int = 16 * 1024 * 1024
    fsync_on_roll: bool = True
    exclusive: bool = False

    def __post_init__(self) -> None:
        if not 1 <= self.segment_bytes <= 1 << 30:
            raise ConfigurationError(f"segment_bytes must be between 1 and {1 << 30}, got {self.segment_bytes}")
        if self.index_interval_bytes < 1:
            raise ConfigurationError(f"index_interval_bytes must be positive, got {self.index_interval_bytes}")
        if not 1 <= self.max_batch_bytes <= MAX_BATCH_SIZE:
            raise ConfigurationError(f"max_batch_bytes must be between 1 and {MAX_BATCH_SIZE}")
