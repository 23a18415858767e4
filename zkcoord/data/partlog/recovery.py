"""Recovery of a segment's tail and of its index: the part of a writer that runs only while it holds the lock.

The argument (``docs/partition-log.md`` has it in full): a writer appends a batch with one ``pwrite`` at the end of
the last segment and writes an index entry only after that.  A crash of the writing process therefore leaves every
byte of the log valid except, possibly, a prefix of the last batch.  So recovery need not read the whole segment:
it takes the last index entry whose batch verifies (CRC included) as a trusted boundary, verifies forward from it
to the end of the file, and cuts the file at the first byte that is not part of a complete, valid batch.  Index
entries at or beyond the trusted boundary that do not point at a verified batch are dropped, missing ones are
added, so the index is never trusted past the verified end.

Every function here must be called holding the partition lock: they cut and rewrite files.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from zkcoord.data.partlog import index as idx
from zkcoord.data.partlog.layout import index_path, log_path
from zkcoord.data.partlog.scan import SegmentScanner, Stop, valid_batch_at
from zkcoord.errors import CorruptLogError


@dataclass(frozen=True, slots=True)
class TailTruncation:
    """Bytes cut from the end of a segment because they were not a complete, valid batch (a crashed writer's)."""

    segment: Path
    position: int  # the new size of the segment file
    bytes_cut: int
    end_offset: int  # the log's end offset after the cut
    reason: str


@dataclass(slots=True)
class ActiveSegment:
    """A writer's open last segment and what it knows about it (valid while it holds the lock)."""

    directory: Path
    base: int
    log_fd: int
    index_fd: int
    size: int = 0  # verified end of the file
    end_offset: int = 0  # offset after the last batch
    last_index_pos: int = 0  # position of the last index entry (0: none, the implicit segment start)

    @property
    def log_path(self) -> Path:
        return log_path(self.directory, self.base)


def _entry(index_fd: int, i: int) -> tuple[int, int]:
    relative, position = idx.ENTRY.unpack(os.pread(index_fd, idx.ENTRY_SIZE, i * idx.ENTRY_SIZE))
    return relative, position


def trusted_entry(segment: ActiveSegment) -> tuple[int, int]:
    """The last index entry whose batch verifies, as ``(position, offset)``; the segment start if there is none.

    Usually reads one entry and one batch.
    """
    log_size = os.fstat(segment.log_fd).st_size
    for i in range(idx.entry_count(segment.index_fd) - 1, -1, -1):
        relative, position = _entry(segment.index_fd, i)
        offset = segment.base + relative
        if position < log_size and SegmentScanner(segment.log_fd, position, offset).next_batch() is not None:
            return position, offset
    return 0, segment.base


def recover_tail(segment: ActiveSegment, position: int, offset: int, interval: int) -> TailTruncation | None:
    """Verify from the trusted boundary ``(position, offset)`` to the end, cut what fails, repair the index.

    Updates ``segment``'s size and end offset.  Returns what was cut, if anything.

    :raises CorruptLogError: a batch fails verification but a valid batch follows it.
    """
    scanner = SegmentScanner(segment.log_fd, position, offset)
    boundaries: dict[int, int] = {}  # position -> base offset of each verified batch
    while (batch := scanner.next_batch()) is not None:
        boundaries[scanner.position - batch.size_bytes] = batch.base_offset
    if scanner.stop is Stop.UNSUPPORTED:
        # A log written by an older zkcoord: not a torn tail, and not ours to cut.
        raise CorruptLogError(f"{segment.log_path}: position {scanner.position}: {scanner.problem}")
    size = os.fstat(segment.log_fd).st_size
    if (
        scanner.invalid_end is not None
        and scanner.invalid_end < size
        and valid_batch_at(segment.log_fd, scanner.invalid_end)
    ):
        # A crashed writer leaves a damaged *last* batch; a valid batch after the damage means the log was
        # corrupted, and cutting there would destroy records that were acknowledged.  Refuse; a human decides.
        raise CorruptLogError(
            f"{segment.log_path}: invalid batch at position {scanner.position} (offset {scanner.next_offset}): "
            f"{scanner.problem}; valid data follows it, so it is not a torn tail"
        )
    segment.size = scanner.position
    segment.end_offset = scanner.next_offset
    cut = None
    if size > scanner.position:
        os.ftruncate(segment.log_fd, scanner.position)
        reason = scanner.problem if scanner.stop is Stop.INVALID else "incomplete batch"
        cut = TailTruncation(segment.log_path, scanner.position, size - scanner.position, scanner.next_offset, reason)
    repair_index(segment, position, boundaries, interval)
    return cut


def repair_index(segment: ActiveSegment, verified_from: int, boundaries: dict[int, int], interval: int) -> None:
    """Drop entries at or after ``verified_from`` that point at no verified batch, then add the missing ones.

    :param boundaries: position -> base offset of every batch verified from ``verified_from`` on, ascending.
    """
    keep = idx.entry_count(segment.index_fd)
    last_pos = 0
    while keep > 0:
        relative, position = _entry(segment.index_fd, keep - 1)
        if position < verified_from or boundaries.get(position) == segment.base + relative:
            last_pos = position
            break
        keep -= 1
    if os.fstat(segment.index_fd).st_size != keep * idx.ENTRY_SIZE:  # also drops a torn last entry
        os.ftruncate(segment.index_fd, keep * idx.ENTRY_SIZE)
    missing = []
    for position, offset in boundaries.items():
        if position > last_pos and idx.due(position, last_pos, interval):
            missing.append((offset - segment.base, position))
            last_pos = position
    if missing:
        os.write(segment.index_fd, idx.encode_entries(missing))
    segment.last_index_pos = last_pos


def refuse_older_format(directory: Path, base: int) -> None:
    """Raise :class:`CorruptLogError` if the first batch of segment ``base`` is of an older format version.

    Reads one batch.  A writer opening a log checks its first segment this way too, not only the last one it
    recovers: a log whose last segment is still empty must not get batches of a newer format after older ones.
    """
    fd = os.open(log_path(directory, base), os.O_RDONLY)
    try:
        scanner = SegmentScanner(fd, 0, base)
        if scanner.next_batch() is None and scanner.stop is Stop.UNSUPPORTED:
            raise CorruptLogError(f"{log_path(directory, base)}: position 0: {scanner.problem}")
    finally:
        os.close(fd)


def rebuild_closed_segment(directory: Path, base: int, interval: int) -> tuple[int, int]:
    """Verify a segment that is not the last one from its start and rewrite its index.

    :returns: ``(end offset, number of index entries)``.
    :raises CorruptLogError: the segment does not end on a clean batch boundary.
    """
    path = log_path(directory, base)
    fd = os.open(path, os.O_RDONLY)
    try:
        scanner = SegmentScanner(fd, 0, base)
        entries: list[tuple[int, int]] = []
        last_pos = 0
        while (batch := scanner.next_batch()) is not None:
            position = scanner.position - batch.size_bytes
            if idx.due(position, last_pos, interval):
                entries.append((batch.base_offset - base, position))
                last_pos = position
        if scanner.stop is not Stop.END:
            detail = f": {scanner.problem}" if scanner.problem else ""
            raise CorruptLogError(
                f"{path}: {scanner.stop.value if scanner.stop else '?'} batch at position {scanner.position} "
                f"(offset {scanner.next_offset}) in a closed segment{detail}"
            )
    finally:
        os.close(fd)
    # In place rather than by rename: other writers keep the index open with O_APPEND.
    fd = os.open(index_path(directory, base), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.ftruncate(fd, 0)
        os.write(fd, idx.encode_entries(entries))
    finally:
        os.close(fd)
    return scanner.next_offset, len(entries)
