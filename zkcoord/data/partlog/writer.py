"""Appending to a partition log: :class:`PartitionWriter`, segment rolls, and recovery of a torn tail.

Concurrency model (see ``docs/partition-log.md``):

* Any number of writers, in any number of processes, may append to one partition.  Each append takes
  ``fcntl.flock(LOCK_EX)`` on the partition's ``.lock`` file for the duration of that one batch.  Holding it, the
  writer first *catches up*: if the active segment grew or a newer segment appeared since its own last append,
  another process appended, and the writer verifies only those new bytes to learn the end offset.
* A writer appends a batch with one ``pwrite`` at the verified end, then (if due) one 8-byte index entry.  A reader
  in another process therefore sees each batch either whole or as a prefix, never reordered.
* A crashed writer leaves at worst a prefix of one batch (or, after a machine crash without fsync, any damage
  after the last synced byte).  Whoever takes the lock next cuts it: at :meth:`PartitionWriter.open` (which
  verifies from the last index entry that checks out to the end of the last segment) or while catching up.
  Every cut is logged as a warning, appended to :attr:`PartitionWriter.truncations` and passed to
  ``on_truncation``, so a producer can journal it.
* Offsets are never used twice.  After every append the writer records the log's end in the partition's
  high-water file (:mod:`zkcoord.data.partlog.highwater`).  A writer that finds the log ending below that mark (complete
  batches lost: a damaged disk, a machine crash, a person) bumps the file's epoch, reports a :class:`LogRewound`
  (``on_rewind``), and gives its next batch the mark as base offset, flagged as following a gap.  That state and
  check are :class:`~zkcoord.data.partlog.rewind.WriterMark`'s, which the writer owns.

May import the rest of :mod:`zkcoord.data.partlog` and :mod:`zkcoord.errors`.
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from types import TracebackType
from typing import Self

from zkcoord.data.partlog import highwater as hw
from zkcoord.data.partlog import index as idx
from zkcoord.data.partlog.config import BatchItem, WriterConfig, wall_clock_ms
from zkcoord.data.partlog.format import RecordTooLargeError, encode_batch, seal_batch
from zkcoord.data.partlog.layout import (
    LOCK_FILE,
    PathLike,
    index_path,
    list_segments,
    log_path,
    partition_dir,
    segment_exists,
)
from zkcoord.data.partlog.recovery import (
    ActiveSegment,
    TailTruncation,
    rebuild_closed_segment,
    recover_tail,
    refuse_older_format,
    trusted_entry,
)
from zkcoord.data.partlog.rewind import LogRewound, WriterMark
from zkcoord.errors import CorruptLogError, LogError, LogLockedError

logger = logging.getLogger(__name__)


class PartitionWriter:
    """Appends records to one partition's log.

    Call :meth:`open` (or use ``with``) before appending.  An instance may be shared by the threads of one process
    (an internal lock serialises them); other processes use their own instances.  Appends block while another
    writer holds the partition lock, which it does only for one batch (or for its lifetime with
    ``WriterConfig.exclusive``), so a *paused* writer process blocks the others until it resumes.

    Writes go straight to the file with ``pwrite`` (no user-space buffer), so a record is visible to readers and
    survives the death of this process as soon as ``append`` returns; :meth:`flush` with ``fsync=True`` makes it
    survive a machine crash too.

    :param clock: milliseconds since the epoch, for records appended without a timestamp.
    :param on_truncation: called (holding the partition lock; keep it short) for every torn tail cut.
    :param on_rewind: called (holding the partition lock; keep it short) when the log is found shorter than its
        high-water mark (:class:`LogRewound`).
    """

    def __init__(
        self,
        data_dir: PathLike,
        topic: str,
        partition: int,
        *,
        config: WriterConfig | None = None,
        clock: Callable[[], int] = wall_clock_ms,
        on_truncation: Callable[[TailTruncation], None] | None = None,
        on_rewind: Callable[[LogRewound], None] | None = None,
    ) -> None:
        self.directory = partition_dir(data_dir, topic, partition)
        self._directory_name = str(self.directory)
        self.topic = topic
        self.partition = partition
        self.config = config or WriterConfig()
        self._clock = clock
        self._on_truncation = on_truncation
        #: Every tail cut this writer made, oldest first.
        self.truncations: list[TailTruncation] = []
        self._hw = WriterMark(self.directory, on_rewind)
        #: Every rewind this writer found, oldest first (the list :class:`WriterMark` appends to).
        self.rewinds: list[LogRewound] = self._hw.rewinds
        self._mutex = threading.Lock()
        self._lock_fd: int | None = None
        self._active: ActiveSegment | None = None
        self._start_offset = 0

    # --- life cycle ------------------------------------------------------------------------------------------

    def open(self) -> Self:
        """Create the partition directory if needed, then recover the log's tail (under the partition lock).

        Returns the writer, so that ``writer = PartitionWriter(...).open()`` works; bytes cut by the recovery are in
        :attr:`truncations` and :attr:`recovered_bytes`.

        Blocks while another writer holds the lock (non-exclusive mode).

        :raises LogLockedError: ``exclusive`` is set and another writer holds the lock.
        :raises CorruptLogError: damage that a crashed writer cannot explain, or a log written in an older format
            version (nothing is changed then).
        :raises LogError: the writer is already open, or a file operation failed.
        """
        with self._mutex:
            if self._lock_fd is not None:
                raise LogError(f"writer of {self.directory} is already open")
            try:
                self.directory.mkdir(parents=True, exist_ok=True)
                lock_fd = os.open(self.directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as e:
                raise LogError(f"cannot open partition log {self.directory}: {e}") from e
            try:
                self._take_lock(lock_fd)
                try:
                    segments = list_segments(self.directory) or [0]
                    self._start_offset = segments[0]
                    if len(segments) > 1:
                        refuse_older_format(self.directory, segments[0])
                    self._hw.open()
                    self._switch_to(segments[-1])
                    self._follow_rolls()
                    self._check_rewound()
                except OSError as e:
                    raise LogError(f"cannot recover partition log {self.directory}: {e}") from e
                finally:
                    if not self.config.exclusive:
                        fcntl.flock(lock_fd, fcntl.LOCK_UN)
            except BaseException:
                self._close_active()
                self._hw.close()
                os.close(lock_fd)  # also releases an exclusive lock
                raise
            self._lock_fd = lock_fd
        return self

    def _take_lock(self, lock_fd: int) -> None:
        if not self.config.exclusive:
            fcntl.flock(lock_fd, fcntl.LOCK_EX)
            return
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as e:
            raise LogLockedError(f"another writer holds the lock of {self.directory}") from e

    def close(self) -> None:
        """Close the files (and release an exclusive lock).  Idempotent.  Does not fsync: see :meth:`flush`."""
        with self._mutex:
            self._close_active()
            self._hw.close()
            if self._lock_fd is not None:
                os.close(self._lock_fd)
                self._lock_fd = None

    def __enter__(self) -> Self:
        """Open the writer unless it is open already (so ``with open_writer(...) as w:`` works), return it."""
        if self._lock_fd is None:
            self.open()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # --- appending -------------------------------------------------------------------------------------------

    @property
    def end_offset(self) -> int:
        """The offset the next record appended by *this* writer would get if no one else appends first (past a
        gap, if the log lost records: see :class:`LogRewound`)."""
        return max(self._active.end_offset, self._hw.mark.offset) if self._active else 0

    @property
    def start_offset(self) -> int:
        """The first offset of the log (the base of its first segment)."""
        return self._start_offset

    @property
    def recovered_bytes(self) -> int:
        """Bytes of torn tails this writer has cut so far (the sum over :attr:`truncations`)."""
        return sum(cut.bytes_cut for cut in self.truncations)

    def append(self, value: bytes, key: bytes | None = None, timestamp_ms: int | None = None) -> int:
        """Append one record (a batch of one) and return its offset.  See :meth:`append_batch`."""
        first, _ = self._append([key], [value], [self._clock() if timestamp_ms is None else timestamp_ms])
        return first

    def append_batch(self, records: Iterable[BatchItem], timestamp_ms: int | None = None) -> tuple[int, int]:
        """Append records as one batch and return ``(first_offset, last_offset)``.

        The batch is atomic: after a crash either all its records are in the log or none.  Items are
        ``(key, value)``, which get ``timestamp_ms`` (default: the clock, read once), or ``(key, value, ts)``.

        Blocks while another writer holds the partition lock.

        :raises ValueError: no records.
        :raises RecordTooLargeError: the encoded batch exceeds ``max_batch_bytes``.
        :raises LogError: the writer is not open, or writing failed (nothing of the batch is in the log then).
        """
        items = records if isinstance(records, list | tuple) else list(records)
        default_ts = self._clock() if timestamp_ms is None else timestamp_ms
        keys: Sequence[bytes | None]
        values: Sequence[bytes]
        stamps: Sequence[int]
        if items and set(map(len, items)) == {2}:
            # The common shape, unpacked by zip() in C rather than by a Python loop per record.
            keys, values = zip(*items, strict=True)
            stamps = [default_ts] * len(items)
        else:
            key_list: list[bytes | None] = []
            value_list: list[bytes] = []
            stamp_list: list[int] = []
            for item in items:
                if not 2 <= len(item) <= 3:
                    raise ValueError(f"a batch item is (key, value) or (key, value, timestamp_ms), not {item!r:.60}")
                key, value, *stamp = item
                key_list.append(key)
                value_list.append(value)
                stamp_list.append(stamp[0] if stamp else default_ts)
            keys, values, stamps = key_list, value_list, stamp_list
        return self._append(keys, values, stamps)

    def _append(self, keys: Sequence[bytes | None], values: Sequence[bytes], stamps: Sequence[int]) -> tuple[int, int]:
        # Encoding happens before taking the lock; only the seal (one CRC pass) and the write happen under it.
        buf = encode_batch(keys, values, stamps)
        if len(buf) > self.config.max_batch_bytes:
            raise RecordTooLargeError(len(buf), self.config.max_batch_bytes)
        with self._locked() as current:
            active = current
            if active.size > 0 and active.size + len(buf) > self.config.segment_bytes:
                active = self._roll()
            # Past offsets that a lost part of the log handed out (a gap), never over them again.
            base = max(active.end_offset, self._hw.mark.offset)
            seal_batch(buf, base, after_gap=base > active.end_offset)
            self._write_batch(active, buf, base, len(values))
            self._hw.set(hw.HighWater(active.end_offset, self._hw.mark.epoch, self._hw.mark.lost))
        return base, base + len(values) - 1

    def _write_batch(self, active: ActiveSegment, buf: bytearray, base: int, count: int) -> None:
        pos = active.size
        try:
            written = 0
            while written < len(buf):
                written += os.pwrite(active.log_fd, memoryview(buf)[written:], pos + written)
        except OSError as e:
            try:
                os.ftruncate(active.log_fd, pos)
            except OSError:
                # The next writer to take the lock sees the file longer than the log and cuts it.
                logger.warning("could not cut a failed append from %s", active.log_path, exc_info=True)
            raise LogError(f"append to {active.log_path} failed: {e}") from e
        active.size = pos + len(buf)
        active.end_offset = base + count
        if idx.due(pos, active.last_index_pos, self.config.index_interval_bytes):
            try:
                os.write(active.index_fd, idx.ENTRY.pack(base - active.base, pos))
                active.last_index_pos = pos
            except OSError:
                # The record is in the log; failing the append now would make the producer send it twice.  The
                # index is a hint that recovery recomputes, so log and carry on.
                logger.warning("could not write an index entry of %s", active.log_path, exc_info=True)

    def flush(self, fsync: bool = False) -> None:
        """Make appended records durable.

        Appends are already in the operating system's cache when they return (visible to readers, safe from a
        crash of this process), so without ``fsync`` this does nothing.  With it, it fsyncs the active segment and
        the directory: the records then survive a machine crash.  Blocks for the disk.
        """
        if not fsync:
            return
        with self._mutex:
            if self._active is None:
                raise LogError(f"writer of {self.directory} is not open")
            os.fsync(self._active.log_fd)
            self._fsync_directory()

    def rebuild_index(self) -> int:
        """Verify every segment from its start, rewrite every index and cut a torn tail; return the entry count.

        Takes the partition lock; reads the whole log (a repair tool, not for the hot path).

        :raises CorruptLogError: a segment other than the last is damaged, or the segments do not follow on.
        """
        total = 0
        with self._locked() as current:
            segments = list_segments(self.directory)
            expected = segments[0] if segments else current.base
            for base in segments:
                if base != expected:
                    raise CorruptLogError(f"{self.directory}: segment {base} follows one that ends at {expected}")
                if base == current.base:
                    break
                expected, entries = rebuild_closed_segment(self.directory, base, self.config.index_interval_bytes)
                total += entries
            total += idx.entry_count(self._switch_to(current.base, rebuild=True).index_fd)
            self._check_rewound()
        return total

    # --- internals (all called holding self._mutex and the partition lock) ------------------------------------

    @contextmanager
    def _locked(self) -> Iterator[ActiveSegment]:
        """Hold the thread mutex and (unless exclusive) the partition lock, caught up with other writers."""
        with self._mutex:
            if self._active is None or self._lock_fd is None:
                raise LogError(f"writer of {self.directory} is not open")
            if not self.config.exclusive:
                fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
            try:
                if not self.config.exclusive:
                    self._catch_up()
                yield self._require_active()
            except OSError as e:
                raise LogError(f"partition log {self.directory}: {e}") from e
            finally:
                if not self.config.exclusive:
                    fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    def _catch_up(self) -> None:
        """Notice appends by other processes since our last one, verifying only the new bytes; notice a log that
        lost data (another writer's rewind, a segment file deleted under us)."""
        active = self._require_active()
        stat = os.fstat(active.log_fd)
        size = stat.st_size
        # Another writer can only have moved the mark by appending or cutting (the size changed) or by recovering a
        # file deleted under us (nlink 0): otherwise the mark is ours, and the read is saved.
        changed = size != active.size or stat.st_nlink == 0
        mark = self._hw.read() if changed else None
        if mark is not None and (mark.epoch != self._hw.mark.epoch or mark.offset > self._hw.mark.offset):
            rewound_elsewhere = mark.epoch != self._hw.mark.epoch
            self._hw.mark = mark if mark.epoch >= self._hw.mark.epoch else self._hw.mark._replace(offset=mark.offset)
            if rewound_elsewhere:
                # Another writer found the log shorter than it was: what we verified may be gone.  Start over.
                self._switch_to(active.base)
                self._follow_rolls()
                return
        if stat.st_nlink == 0:
            # Our segment file was deleted: appending to it would write where no reader looks.
            logger.warning("%s was deleted; recovering the partition again", active.log_path)
            segments = list_segments(self.directory)
            self._switch_to(segments[-1] if segments else active.base)
            self._follow_rolls()
            self._check_rewound()
            return
        if size > active.size:
            self._recover(active, active.size, active.end_offset)
        elif size < active.size:
            # Only a recovery cuts a file, and it cuts only bytes no one verified; we did verify these.
            logger.warning("%s shrank from %d to %d bytes; recovering it again", active.log_path, active.size, size)
            self._switch_to(active.base)
        self._follow_rolls()
        self._check_rewound()

    def _follow_rolls(self) -> None:
        """Move on to the segments that other writers rolled to (each starts at the previous one's end)."""
        active = self._require_active()
        while active.end_offset != active.base and segment_exists(self._directory_name, active.end_offset):
            active = self._switch_to(active.end_offset)

    def _roll(self) -> ActiveSegment:
        active = self._require_active()
        if self.config.fsync_on_roll:
            os.fsync(active.log_fd)
        new = self._switch_to(active.end_offset)
        if self.config.fsync_on_roll:
            self._fsync_directory()
        logger.debug("rolled %s to a new segment at offset %d", self.directory, new.base)
        return new

    def _switch_to(self, base: int, rebuild: bool = False) -> ActiveSegment:
        """Make segment ``base`` (created if missing) the active one, with its tail recovered.

        The current segment stays active if this fails, so a failed roll leaves a usable writer.
        """
        log_fd = os.open(log_path(self.directory, base), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            index_fd = os.open(index_path(self.directory, base), os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        except BaseException:
            os.close(log_fd)
            raise
        segment = ActiveSegment(self.directory, base, log_fd, index_fd, end_offset=base)
        try:
            if rebuild:
                os.ftruncate(index_fd, 0)
                position, offset = 0, base
            else:
                position, offset = trusted_entry(segment)
            self._recover(segment, position, offset)
        except BaseException:
            os.close(log_fd)
            os.close(index_fd)
            raise
        self._close_active()
        self._active = segment
        return segment

    def _recover(self, active: ActiveSegment, position: int, offset: int) -> None:
        cut = recover_tail(active, position, offset, self.config.index_interval_bytes)
        if cut is not None:
            logger.warning(
                "cut %d bytes (%s) from the tail of %s at position %d; the log ends at offset %d",
                cut.bytes_cut,
                cut.reason,
                cut.segment,
                cut.position,
                cut.end_offset,
            )
            self.truncations.append(cut)
            if self._on_truncation is not None:
                try:
                    self._on_truncation(cut)
                except Exception:
                    # A user callback must not fail the append or the open that found the torn tail.
                    logger.exception("on_truncation callback failed for %s", cut)

    def _check_rewound(self) -> None:
        """Report a log found ending below its high-water mark (:meth:`WriterMark.check`)."""
        self._hw.check(self._require_active().end_offset)

    def _require_active(self) -> ActiveSegment:
        if self._active is None:
            raise LogError(f"writer of {self.directory} is not open")
        return self._active

    def _close_active(self) -> None:
        if self._active is not None:
            os.close(self._active.log_fd)
            os.close(self._active.index_fd)
            self._active = None

    def _fsync_directory(self) -> None:
        fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def open_writer(
    data_dir: PathLike,
    topic: str,
    partition: int,
    *,
    config: WriterConfig | None = None,
    clock: Callable[[], int] = wall_clock_ms,
) -> PartitionWriter:
    """Create and :meth:`~PartitionWriter.open` a writer of ``<data_dir>/<topic>-<partition>``."""
    return PartitionWriter(data_dir, topic, partition, config=config, clock=clock).open()
