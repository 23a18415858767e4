"""Forward reading of verified batches in one segment file: the loop shared by readers, recovery and index rebuilds.

A :class:`SegmentScanner` starts at a known batch boundary (a position and the offset expected there) and yields
one verified :class:`~zkcoord.data.partlog.format.RecordBatch` after another, reading the file with ``os.pread`` in
chunks that start small (a lookup near an index entry touches little) and double up to :data:`MAX_CHUNK` (a long
sequential read costs few system calls).  It never writes.  When it cannot go on it sets :attr:`SegmentScanner.stop`:

* ``END``: the file ends exactly at a batch boundary;
* ``INCOMPLETE``: the file ends inside a batch.  Writers append a batch with one ``pwrite`` and a concurrent
  ``pread`` sees a prefix of it, so this is "not yet written" (or the torn tail of a crashed writer);
* ``INVALID``: the bytes at the boundary are not a valid batch (bad header, wrong base offset, CRC, structure).
  What that means (a torn tail to cut, or corruption) depends on where it is, which the caller knows;
* ``UNSUPPORTED``: a whole, valid batch of an older format version (written by an older zkcoord).  Never a torn
  tail: every caller refuses it with :attr:`SegmentScanner.problem` as the reason, and nothing is cut.

Batches are verified on the fast path (:func:`~zkcoord.data.partlog.format.serve_batches`: one loop over the batches
already whole in the buffer) as long as it goes; the batch where it stops (one that straddles the end of the
buffer, the end of the file, damage) goes through the careful path, which reads what it needs and finds out why.
Both accept exactly the same batches.  Every read is into a fresh ``bytes`` object, never into a reused buffer:
batches handed out keep referring to the bytes they were verified in.

Before reporting ``INVALID`` the scanner reads the same bytes again once: a writer's recovery may just have cut a
torn tail and appended a new batch in its place, and a reader must not call that corruption.
"""

from __future__ import annotations

import enum
import os

from zkcoord.data.partlog.format import (
    HEADER_SIZE,
    LEGACY_MAGIC,
    MAGIC,
    MAX_BATCH_SIZE,
    MIN_BATCH_SIZE,
    UNLIMITED,
    BatchFormatError,
    BatchHeader,
    RecordBatch,
    header_problem,
    is_legacy_batch,
    parse_header,
    serve_batches,
)

FIRST_CHUNK = 16 * 1024
MAX_CHUNK = 1024 * 1024
_EMPTY = b""
_EMPTY_VIEW = memoryview(_EMPTY)


def valid_batch_at(fd: int, position: int) -> bool:
    """Whether a complete batch that passes every check except offset continuity starts at ``position``.

    Tells damage followed by good data (corruption) from damage at the end (a torn tail).
    """
    header_bytes = os.pread(fd, HEADER_SIZE, position)
    if len(header_bytes) < HEADER_SIZE:
        return False
    base_offset = parse_header(header_bytes, 0).base_offset
    return SegmentScanner(fd, position, base_offset).next_batch() is not None


class Stop(enum.Enum):
    END = "end"
    INCOMPLETE = "incomplete"
    INVALID = "invalid"
    UNSUPPORTED = "unsupported"


class SegmentScanner:
    """Reads verified batches forward from a batch boundary of one open segment file.

    Owned by one call of one reader or writer (not thread-safe).  Never writes or closes ``fd``.

    :param fd: the segment's ``.log``, open for reading.
    :param position: a batch boundary in the file.
    :param next_offset: the base offset the batch at ``position`` must have.
    :param first_chunk: the size of the first read; a caller that will consume that much says so.
    """

    def __init__(self, fd: int, position: int, next_offset: int, first_chunk: int = FIRST_CHUNK) -> None:
        self.fd = fd
        #: The boundary after the last batch returned (where the next one starts).
        self.position = position
        #: The offset after the last batch returned.
        self.next_offset = next_offset
        #: Why the scan ended, once it has.
        self.stop: Stop | None = None
        #: For ``INVALID`` and ``UNSUPPORTED``: what was wrong, for messages.
        self.problem = ""
        #: For ``INVALID`` with a readable header: where the bad batch claims to end; otherwise None.
        self.invalid_end: int | None = None
        #: Bytes read from the file so far (for statistics and tests).
        self.bytes_read = 0
        #: What :meth:`take` served so far: bytes of batches and records (from its ``offset`` on).
        self.served_bytes = 0
        self.served_records = 0
        self._buf = _EMPTY
        self._view = _EMPTY_VIEW  # of self._buf, for CRCs without copies
        self._buf_pos = position  # file position of self._buf[0]
        self._reads = 0  # how many times the buffer was read
        self._chunk = max(HEADER_SIZE, first_chunk)
        self._max_chunk = max(MAX_CHUNK, first_chunk)
        self._header: BatchHeader | None = None  # the header _attempt() last parsed

    def seed(self, position: int, data: bytes) -> None:
        """Start from bytes read earlier from ``position`` of the same file, if they cover :attr:`position`.

        Safe because the scanner reads again whatever fails verification (see the module docstring).
        """
        if position <= self.position < position + len(data):
            self._set_buffer(data, position)

    @property
    def buffer(self) -> tuple[int, bytes]:
        """The bytes read last, with their file position (for :meth:`seed`)."""
        return self._buf_pos, self._buf

    def _set_buffer(self, data: bytes, position: int) -> None:
        # A buffer is never written to: batches cut from it keep referring to it after the scanner moved on.
        self._buf, self._view, self._buf_pos = data, memoryview(data), position

    def _available(self, needed: int, want: int) -> int:
        """Make the buffer start at ``position`` with ``needed`` bytes if the file has them; return what it has."""
        have = len(self._buf) - (self.position - self._buf_pos)
        if have >= needed:
            return have
        if needed > MAX_CHUNK and os.fstat(self.fd).st_size < self.position + needed:
            # Do not allocate a large buffer for a batch the file does not hold (yet): it is incomplete.  Drop what
            # we have, so that a header read before a writer's recovery is read again.
            self._set_buffer(_EMPTY, self.position)
            return 0
        size = max(needed, min(want, self._chunk) if want > 0 else self._chunk)
        # A fresh bytes object per read (os.pread allocates it and reads into it: one copy, as a plain read), never
        # a reused buffer: batches cut from the previous one may still be in a caller's hands, and they must keep
        # the bytes that were verified.  Let go of the previous one first: if no batch holds it, it is freed and its
        # memory (still in the CPU caches) is what the new read gets.
        self._set_buffer(_EMPTY, self.position)
        self._set_buffer(os.pread(self.fd, size, self.position), self.position)
        self._reads += 1
        self.bytes_read += len(self._buf)
        self._chunk = min(2 * self._chunk, self._max_chunk)
        # pread of a regular file is short only at the end of the file.
        return len(self._buf)

    def next_batch(self) -> RecordBatch | None:
        """Return the next verified batch, or None when the scan stops (see :attr:`stop`)."""
        batches = self.take(-1, UNLIMITED, max_records=1)
        return batches[0] if batches else None

    def take(self, offset: int, budget: int, *, first: bool = True, max_records: int = UNLIMITED) -> list[RecordBatch]:
        """Verified batches from :attr:`position` on, as a reader serves them; adds to :attr:`served_bytes` and
        :attr:`served_records`.

        Batches that end before ``offset`` are verified and skipped (they are not served and do not count).  The
        first batch served may be larger than ``budget`` if ``first`` is set; after it, batches are served while
        their total size stays within ``budget`` and until they hold ``max_records`` records (counted from
        ``offset``).  A batch over the budget is not read beyond its header.  Returns when a limit is reached
        (:attr:`stop` stays None) or the scan stops; :attr:`position` is the boundary after the last batch served
        or skipped.
        """
        batches: list[RecordBatch] = []
        if self.stop is not None:
            return batches
        limited = not first  # whether the budget applies to the next batch served
        unspent, served = budget, 0
        expected, start = self.next_offset, self.position - self._buf_pos  # position = _buf_pos + start
        while True:
            # The fast path: every batch already whole in the buffer, verified in one loop.
            start, expected, unspent, records = serve_batches(
                self._buf,
                self._view,
                start,
                expected,
                first_offset=offset,
                out=batches,
                budget=unspent,
                limited=limited,
                max_records=max_records - served,
            )
            served += records
            limited = limited or bool(batches)
            if served >= max_records or (limited and unspent < MIN_BATCH_SIZE):
                break  # a limit is reached (no batch can fit: do not even read its header)
            # The careful path for the batch at the boundary: read it (or more), or find out why it is not valid.
            self.position, self.next_offset = self._buf_pos + start, expected
            batch = self._careful(offset, unspent, unspent if limited else UNLIMITED)
            start = self.position - self._buf_pos  # it may have read a new buffer
            if batch is None:
                break  # the scan stopped, or the batch is over the budget
            size, expected = batch.size_bytes, batch.next_offset
            if expected > offset:
                batches.append(batch)
                unspent -= size
                served += expected - batch.first_offset
                limited = True
            start += size
            if served >= max_records:
                break
        self.position, self.next_offset = self._buf_pos + start, expected
        self.served_bytes += budget - unspent
        self.served_records += served
        return batches

    def _careful(self, first_offset: int | None, want: int, limit: int) -> RecordBatch | None:
        """The batch at :attr:`position`, reading what it needs, or None: the scan stopped (:attr:`stop` is set),
        or the batch would be served and is larger than ``limit`` (then only its header was read).

        Does not advance :attr:`position`.
        """
        result = self._attempt(first_offset, want, limit)
        if isinstance(result, str):
            self._set_buffer(_EMPTY, self.position)  # read the bytes again, once: see the module docstring
            result = self._attempt(first_offset, want, limit)
        if result is None or isinstance(result, RecordBatch):
            return result
        if isinstance(result, Stop):
            self.stop = result
            return None
        self.stop = Stop.INVALID
        self.problem = result
        header = self._header
        if header is not None and header.magic == MAGIC and HEADER_SIZE <= header.size <= MAX_BATCH_SIZE:
            self.invalid_end = self.position + header.size
        return None

    def _attempt(self, first_offset: int | None, want: int, limit: int) -> RecordBatch | Stop | str | None:
        """The batch at :attr:`position`, or why there is none: a :class:`Stop`, a problem (INVALID), or None if
        the batch would be served and is larger than ``limit``.
        """
        self._header = None
        complete = False
        for parse in range(2):
            available = self._available(HEADER_SIZE, want)
            if available < HEADER_SIZE:
                return Stop.INCOMPLETE if available else Stop.END
            header = self._header = parse_header(self._buf, self.position - self._buf_pos)
            problem = header_problem(header, self.next_offset)
            if problem is not None:
                return Stop.UNSUPPORTED if header.magic == LEGACY_MAGIC and self._legacy(header, want) else problem
            if header.size > limit and (first_offset is None or header.last_offset >= first_offset):
                return None
            reads = self._reads
            complete = self._available(header.size, want) >= header.size
            if self._reads == reads or parse:
                break
            # Reading the body meant reading again from this header on.  The header may have changed since the
            # first read (a writer's recovery replaced a torn tail): parse it again from the fresh bytes.
        if not complete:
            return Stop.INCOMPLETE
        try:
            return RecordBatch.verified(self._buf, self.position - self._buf_pos, header, first_offset)
        except BatchFormatError as e:
            return str(e)

    def _legacy(self, header: BatchHeader, want: int) -> bool:
        """Whether a whole, valid batch of format version 1 starts at :attr:`position`; if so, say so in
        :attr:`problem`.
        """
        if not HEADER_SIZE <= header.size <= MAX_BATCH_SIZE or self._available(header.size, want) < header.size:
            return False
        start = self.position - self._buf_pos
        if not is_legacy_batch(self._buf, start, parse_header(self._buf, start), self.next_offset):
            return False
        self.problem = (
            f"a batch of format version {LEGACY_MAGIC} (CRC-32), written by an older zkcoord; this one reads and "
            f"writes format version {MAGIC} (CRC-32C) only.  Nothing was changed: read this log with the zkcoord "
            "that wrote it, or remove the partition directory to start it afresh"
        )
        return True
