"""Reading a partition log: :class:`PartitionReader`, for fetchers in any process, concurrent with writers.

A reader never takes a lock and never writes.  It sees what writers have completed: a batch is appended with one
``pwrite``, so a concurrent read sees it whole or as a prefix (an *incomplete* batch), and an incomplete batch at the
end of the last segment is simply "not written yet".  Damage that a writer in progress or a crashed writer cannot
explain is :class:`~zkcoord.errors.CorruptLogError`.

To find an offset the reader picks the segment by binary search over the base offsets, then the nearest boundary
at or before the offset among the segment's sparse index (binary search), the end of its previous read and the end
it last saw; it then reads forward from there, never from the start of the file.

Those remembered positions are valid only while the files keep every byte they had.  A writer that finds the log
shorter than its high-water mark (complete batches lost, :mod:`zkcoord.data.partlog.highwater`) bumps the log's epoch
before it appends anything; every read looks at the epoch first and, when it changed, forgets every position it
knew (and retries once a read that met damage, in case it raced with such a writer).
"""

from __future__ import annotations

import logging
import os
from bisect import bisect_right
from collections import OrderedDict
from types import TracebackType
from typing import NamedTuple, Self

from zkcoord.data.partlog import highwater as hw
from zkcoord.data.partlog.format import UNLIMITED, Record, RecordBatch
from zkcoord.data.partlog.index import OffsetIndex, last_entry
from zkcoord.data.partlog.layout import PathLike, index_path, list_segments, log_path, partition_dir, segment_exists
from zkcoord.data.partlog.scan import FIRST_CHUNK, SegmentScanner, Stop
from zkcoord.errors import CorruptLogError, LogError, OffsetOutOfRangeError

logger = logging.getLogger(__name__)

DEFAULT_MAX_BYTES = 1024 * 1024
DEFAULT_MAX_RECORDS = 500
_NO_OFFSET = 1 << 63
_MAX_FIRST_CHUNK = 8 * 1024 * 1024


class _Boundary(NamedTuple):
    """A verified batch boundary: ``offset`` is the base offset of the batch that starts (or will start) there."""

    base: int  # the segment
    position: int
    offset: int


class PartitionReader:
    """Reads records of one partition, lock-free, while writers in other processes append.

    Not thread-safe: use one reader per thread (they are cheap).  Calls block only on file reads.  A partition
    that no writer has created yet reads as empty.  The first read opens the reader if :meth:`open` was not called;
    :meth:`close` (or ``with``) releases its files.

    :param max_open_segments: how many segment files to keep open between calls (least recently used first out).
    """

    def __init__(self, data_dir: PathLike, topic: str, partition: int, *, max_open_segments: int = 8) -> None:
        self.directory = partition_dir(data_dir, topic, partition)
        self._directory_name = str(self.directory)
        self.topic = topic
        self.partition = partition
        #: Bytes read from segment files so far (statistics; tests use it to check that lookups are bounded).
        self.bytes_read = 0
        self._max_open = max(1, max_open_segments)
        self._segments: list[int] = []
        self._fds: OrderedDict[int, int] = OrderedDict()
        self._indexes: dict[int, OffsetIndex] = {}
        self._resume: _Boundary | None = None  # where the previous read stopped
        self._tail: _Boundary | None = None  # the end of the log as last seen
        # What the last scanner read beyond what it consumed: (segment, file position, bytes).  Bytes of complete
        # batches never change; a stale copy of a torn tail fails verification and the scanner reads it again.
        self._readahead: tuple[int, int, bytes] | None = None
        self._last_batch_start: _Boundary | None = None  # where the last batch served starts
        self._open = False
        self._hw_fd: int | None = None
        self._mark: hw.HighWater | None = None  # the high-water record as of the last read

    def open(self) -> Self:
        """List the segments and return the reader.  Never creates anything.

        Optional: the first read opens the reader.  :meth:`close` releases the open segment files.
        """
        self._relist()
        self._open = True
        return self

    def close(self) -> None:
        """Close the files.  Idempotent."""
        while self._fds:
            os.close(self._fds.popitem()[1])
        if self._hw_fd is not None:
            os.close(self._hw_fd)
            self._hw_fd = None
        self._open = False

    def __enter__(self) -> Self:
        """Open the reader unless it is open already, and return it."""
        if not self._open:
            self.open()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # --- public reads ----------------------------------------------------------------------------------------

    @property
    def start_offset(self) -> int:
        """The first offset in the log (0 for an empty or missing log), as of the last listing of the segments."""
        if not self._open:
            self.open()
        return self._segments[0] if self._segments else 0

    def end_offset(self) -> int:
        """The offset after the last complete batch visible now.

        Reads from the end it last saw (or the last index entry of the last segment) to the end of the log.

        :raises CorruptLogError: see :meth:`read_batches`.
        """
        self._collect(_NO_OFFSET, _NO_OFFSET)
        return self._tail.offset if self._tail else self.start_offset

    def high_water(self) -> int:
        """The offset the next record appended will get at least: :meth:`end_offset`, or the high-water mark the
        writers recorded if that is higher (the log lost records that had been handed out, and the next append
        skips past them).  A position at or below this is not out of range: records will come from it on.

        :raises CorruptLogError: see :meth:`read_batches`.
        """
        end = self.end_offset()
        return max(end, self._mark.offset) if self._mark is not None else end

    @property
    def epoch(self) -> int:
        """The log's rewind epoch as of the last read (0 if it never lost data, or has no high-water file)."""
        return self._mark.epoch if self._mark is not None else 0

    def read_batches(self, offset: int, max_bytes: int = DEFAULT_MAX_BYTES) -> list[RecordBatch]:
        """Return the verified batches from the one holding ``offset`` on, up to ``max_bytes`` of them.

        The first batch is returned even when it is larger than ``max_bytes`` (so a caller always progresses);
        later batches only while the total stays within it.  In the first batch, records before ``offset`` are
        skipped (:attr:`RecordBatch.first_offset`).  Records are decoded only when the batches are iterated.

        :returns: an empty list when ``offset`` is at or beyond the end.
        :raises OffsetOutOfRangeError: ``offset`` is below :attr:`start_offset`.
        :raises CorruptLogError: the batch at which this read would start is damaged and more data follows it, or
            the log was written in an older format version (a read that meets damage after some valid batches
            returns those; the next read raises).
        :raises LogError: a segment file could not be opened.
        """
        # The caller takes every batch up to max_bytes: read that much at once rather than in growing chunks.
        return self._collect(offset, max_bytes, first_chunk=min(max(max_bytes, FIRST_CHUNK), _MAX_FIRST_CHUNK))

    def read(
        self, offset: int, max_records: int = DEFAULT_MAX_RECORDS, max_bytes: int = DEFAULT_MAX_BYTES
    ) -> list[Record]:
        """Return up to ``max_records`` decoded records from ``offset`` on (within ``max_bytes``, as
        :meth:`read_batches`).  Same errors as :meth:`read_batches`.
        """
        if max_records < 1:
            raise ValueError(f"max_records must be positive, got {max_records}")
        batches = self._collect(offset, max_bytes, max_records)
        records: list[Record] = []
        for batch in batches:
            records += batch.records(max_records - len(records))
        if batches and records[-1].offset != batches[-1].last_offset:
            # The last batch was served in part: the next read starts inside it, so resume from its start.
            self._resume = self._last_batch_start
        return records

    # --- internals -------------------------------------------------------------------------------------------

    def _collect(
        self, offset: int, max_bytes: int, max_records: int = UNLIMITED, first_chunk: int = FIRST_CHUNK
    ) -> list[RecordBatch]:
        """The verified batches that end at or after ``offset``, within the limits; track where reading stopped.

        ``offset == _NO_OFFSET`` walks from the last known end to the end of the log and returns nothing.
        """
        self._refresh_mark()
        try:
            return self._collect_once(offset, max_bytes, max_records, first_chunk)
        except CorruptLogError:
            if not self._refresh_mark():
                raise
            # The log was rewound while we read (a writer cut lost records and appended in their place): what we
            # met was our stale idea of the files, not damage.  Once more, from fresh positions.
            return self._collect_once(offset, max_bytes, max_records, first_chunk)

    def _refresh_mark(self) -> bool:
        """Read the high-water record; if the epoch changed, forget every position known.  Whether it changed."""
        if self._hw_fd is None:
            self._hw_fd = hw.open_for_reading(self.directory)
            if self._hw_fd is None:
                return False
        mark = hw.read(self._hw_fd, hw.path(self.directory))
        changed = mark is not None and mark.epoch != self.epoch
        if mark is not None:
            self._mark = mark
        if changed:
            logger.info("%s was rewound (epoch %d): reading from fresh positions", self.directory, self.epoch)
            self._resume = self._tail = self._last_batch_start = None
            self._readahead = None
            self._indexes.clear()
            self._relist()
        return changed

    def _collect_once(self, offset: int, max_bytes: int, max_records: int, first_chunk: int) -> list[RecordBatch]:
        located = self._locate(offset)
        if located is None:
            return []
        start, from_index = located
        batches: list[RecordBatch] = []
        while True:
            scanner = SegmentScanner(self._fd(start.base), start.position, start.offset, first_chunk)
            if self._readahead is not None:
                if self._readahead[0] == start.base:
                    scanner.seed(self._readahead[1], self._readahead[2])
                self._readahead = None  # the scanner's now: it lets go of it before its next read
            try:
                taken = scanner.take(offset, max_bytes, first=not batches, max_records=max_records)
            finally:
                self.bytes_read += scanner.bytes_read
                self._readahead = (start.base, *scanner.buffer)
            if scanner.position != start.position:  # a boundary after a verified batch
                self._resume = _Boundary(start.base, scanner.position, scanner.next_offset)
            if taken:
                batches += taken
                max_bytes -= scanner.served_bytes
                max_records -= scanner.served_records
                last = taken[-1]
                self._last_batch_start = _Boundary(start.base, scanner.position - last.size_bytes, last.base_offset)
            if scanner.stop is None:
                return batches  # a limit was reached
            if from_index and scanner.position == start.position:
                # The index entry does not point at a batch with its offset: a stale hint (e.g. written before a
                # machine crash lost the log bytes).  Correct but slower: read the segment from its start.
                logger.warning(
                    "index entry of %s at position %d is stale; reading from the segment start",
                    log_path(self.directory, start.base),
                    start.position,
                )
                self._indexes.pop(start.base, None)
                start, from_index = _Boundary(start.base, 0, start.base), False
                continue
            try:
                following = self._after_stop(scanner, start.base)
            except CorruptLogError:
                if batches:
                    return batches  # serve the valid batches before the damage; the next read starts at it and raises
                raise
            if following is None:
                return batches
            start, from_index = following, False

    def _after_stop(self, scanner: SegmentScanner, base: int) -> _Boundary | None:
        """Where to go on after ``scanner`` stopped in segment ``base``: the next segment, or None at the end.

        :raises CorruptLogError: the stop is not one that a writer in progress or a crashed writer explains.
        """
        end = _Boundary(base, scanner.position, scanner.next_offset)
        following = self._next_segment(base, end.offset)
        if scanner.stop is Stop.END and following is not None:
            return _Boundary(following, 0, end.offset)
        if following is None and (
            scanner.stop in (Stop.END, Stop.INCOMPLETE)
            or (scanner.stop is Stop.INVALID and scanner.invalid_end == os.fstat(scanner.fd).st_size)
        ):
            # The end of the log: a clean end, a batch being written, or a crashed writer's torn batch (complete
            # in length but failing its CRC, with nothing after it) that the next writer will cut.
            self._tail = end
            return None
        stop = scanner.stop.value if scanner.stop else "?"
        detail = f": {scanner.problem}" if scanner.problem else ""
        where = "" if following is None else f" before the next segment {following}"
        raise CorruptLogError(
            f"{log_path(self.directory, base)}: {stop} batch at position {end.position} (offset {end.offset}){where}"
            f"{detail}"
        )

    def _locate(self, offset: int) -> tuple[_Boundary, bool] | None:
        """The nearest known boundary at or before ``offset``, and whether it came from the index; None if the
        log has no segment.
        """
        if not self._open:
            self.open()
        if offset < self.start_offset or offset < 0:
            self._relist()
            if offset < self.start_offset or offset < 0:
                raise OffsetOutOfRangeError(offset, self.start_offset, self.end_offset())
        if not self._segments or (offset != _NO_OFFSET and (self._tail is None or offset > self._tail.offset)):
            self._relist()  # new segments may have appeared beyond what this reader knows
        if not self._segments:
            return None
        if offset == _NO_OFFSET:
            base = self._segments[-1]
        else:
            base = self._segments[max(0, bisect_right(self._segments, offset) - 1)]
        # The segment's start, or where a sequential reader's previous read stopped: no index lookup needed.
        for hint in (_Boundary(base, 0, base), self._resume, self._tail):
            if hint is not None and hint.base == base and hint.offset == offset:
                return hint, False
        entry_offset, position = self._index_entry(base, offset)
        best, from_index = _Boundary(base, position, entry_offset), position > 0
        for hint in (self._resume, self._tail):
            if hint is not None and hint.base == base and best.offset < hint.offset <= offset:
                best, from_index = hint, False
        return best, from_index

    def _index_entry(self, base: int, offset: int) -> tuple[int, int]:
        """The index entry of segment ``base`` nearest before ``offset`` (the last one for ``_NO_OFFSET``)."""
        index = self._indexes.get(base)
        if offset == _NO_OFFSET and index is None:
            # Only the end is wanted: the last entry will do, without loading (and checking) the whole index.
            return last_entry(index_path(self.directory, base), base)
        if index is None:
            index = self._indexes[base] = OffsetIndex(index_path(self.directory, base), base)
        index.final = base != self._segments[-1]
        index.refresh()
        return index.last() if offset == _NO_OFFSET else index.lookup(offset)

    def _next_segment(self, base: int, end_offset: int) -> int | None:
        """The segment after ``base`` (which ends at ``end_offset``), if there is one."""
        i = bisect_right(self._segments, base)
        if i < len(self._segments):
            return self._segments[i]
        # A writer rolls to a segment named after the end offset of the previous one.
        if end_offset != base and segment_exists(self._directory_name, end_offset):
            self._segments.append(end_offset)
            return end_offset
        return None

    def _relist(self) -> None:
        self._segments = list_segments(self.directory)

    def _fd(self, base: int) -> int:
        fd = self._fds.get(base)
        if fd is not None:
            self._fds.move_to_end(base)
            return fd
        try:
            fd = os.open(log_path(self.directory, base), os.O_RDONLY)
        except OSError as e:
            raise LogError(f"cannot open segment {log_path(self.directory, base)}: {e}") from e
        self._fds[base] = fd
        if len(self._fds) > self._max_open:
            os.close(self._fds.popitem(last=False)[1])
        return fd


def open_reader(data_dir: PathLike, topic: str, partition: int) -> PartitionReader:
    """Create and :meth:`~PartitionReader.open` a reader of ``<data_dir>/<topic>-<partition>``."""
    return PartitionReader(data_dir, topic, partition).open()


def log_offsets(data_dir: PathLike, topic: str, partition: int) -> tuple[int, int]:
    """``(start_offset, end_offset)`` of a partition's log as visible now; ``(0, 0)`` if it has no files.

    :raises CorruptLogError: the tail of the log is damaged.
    """
    with PartitionReader(data_dir, topic, partition) as reader:
        return reader.start_offset, reader.end_offset()
