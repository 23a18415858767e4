"""The sparse offset index of a segment: a hint that maps offsets to file positions.

An ``.index`` file is a sequence of fixed 8-byte entries ``(relative_offset: uint32, position: uint32)``, big-endian,
ascending in both fields.  Entry ``(r, p)`` says "the batch whose base offset is ``segment base + r`` starts at byte
``p`` of the ``.log``".  The segment start ``(0, 0)`` is implicit and never stored.

Policy (:func:`due`): a writer adds an entry for the batch it appends at position ``p`` when
``p - (position of the last entry, or 0) >= index_interval_bytes``; so a lookup is followed by a forward read of at
most about one interval plus one batch.  Because the rule depends on positions only, recovery recomputes missing
entries deterministically.

The index is only a hint.  Writers write an entry *after* the batch it points at is complete, recovery trusts an
entry only after the batch at its position verifies, and readers fall back to the segment start when the batch at
an entry does not match it.  32-bit fields suffice because a batch starts below ``segment_bytes`` (<= 1 GiB) and a
record takes at least 8 bytes.
"""

from __future__ import annotations

import operator
import os
import struct
import sys
from array import array
from bisect import bisect_right
from itertools import chain
from pathlib import Path

ENTRY = struct.Struct(">II")
ENTRY_SIZE = ENTRY.size  # 8
_SWAP = sys.byteorder == "little"


def due(position: int, last_indexed_position: int, interval: int) -> bool:
    """Whether the batch appended at ``position`` gets an index entry (see the module docstring)."""
    return position - last_indexed_position >= interval


def _ascending_prefix(values: array[int], previous: int) -> int:
    """How many of ``values`` from the start are each greater than the one before (the first: than ``previous``)."""
    rising = list(map(operator.lt, chain((previous,), values), values))
    try:
        return rising.index(False)
    except ValueError:
        return len(values)


def encode_entries(entries: list[tuple[int, int]]) -> bytes:
    """Encode ``(relative_offset, position)`` pairs."""
    return b"".join(ENTRY.pack(r, p) for r, p in entries)


def read_entries(fd: int, first: int = 0) -> list[tuple[int, int]]:
    """Read the complete entries from entry number ``first`` to the end of the file (a torn last entry is ignored)."""
    size = os.fstat(fd).st_size
    start = first * ENTRY_SIZE
    data = os.pread(fd, max(0, size - start), start)
    whole = len(data) - len(data) % ENTRY_SIZE
    return list(ENTRY.iter_unpack(data[:whole]))


def last_entry(path: Path, base_offset: int) -> tuple[int, int]:
    """The last complete entry of the index at ``path``, as ``(offset, position)``; ``(base, 0)`` if none.

    One small read, for a reader that wants the end of the log and has not loaded the index (``end_offset()`` of a
    fresh reader, ``log_offsets()``).  Unlike :class:`OffsetIndex` it does not check the order of the entries: the
    reader verifies the batch at the entry either way (and reads the segment from its start if it is stale), so an
    entry that would fail the order check costs time, never correctness.
    """
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return base_offset, 0
    try:
        usable = os.fstat(fd).st_size // ENTRY_SIZE * ENTRY_SIZE
        data = os.pread(fd, ENTRY_SIZE, usable - ENTRY_SIZE) if usable else b""
    finally:
        os.close(fd)
    if len(data) < ENTRY_SIZE:
        return base_offset, 0
    relative, position = ENTRY.unpack(data)
    if relative == 0 or position == 0:  # never written: the segment start is implicit
        return base_offset, 0
    return base_offset + relative, position


def entry_count(fd: int) -> int:
    """Number of complete entries in the file."""
    return os.fstat(fd).st_size // ENTRY_SIZE


class OffsetIndex:
    """A reader's in-memory copy of one segment's index, refreshed incrementally as the writer appends to it.

    Used by one :class:`~zkcoord.data.partlog.reader.PartitionReader` (so by one thread at a time).  Never writes.
    Entries that break the ascending order are dropped with everything after them until the file shrinks (recovery
    rewrote it); a wrong but ordered entry is caught by the reader's check of the batch it points at.
    """

    def __init__(self, path: Path, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        #: Set by the reader once the segment is no longer the last one: its index will not change any more.
        self.final = False
        self._relative = array("I")
        self._positions = array("I")
        self._loaded = 0  # bytes of the file already parsed
        self._out_of_order = False  # an entry broke the order: ignore appended entries until the file shrinks
        self._refreshed_final = False

    def __len__(self) -> int:
        return len(self._relative)

    def refresh(self) -> None:
        """Read entries appended since the last refresh; reload everything if the file shrank."""
        if self._refreshed_final:
            return
        self._refreshed_final = self.final
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            self._reset()
            return
        try:
            size = os.fstat(fd).st_size
            if size < self._loaded:
                self._reset()
            usable = size - size % ENTRY_SIZE
            if usable > self._loaded:
                if not self._out_of_order:
                    self._extend(os.pread(fd, usable - self._loaded, self._loaded))
                self._loaded = usable
        finally:
            os.close(fd)

    def _reset(self) -> None:
        self._relative = array("I")
        self._positions = array("I")
        self._loaded = 0
        self._out_of_order = False

    def _extend(self, data: bytes) -> None:
        flat = array("I", data)
        if _SWAP:
            flat.byteswap()
        relative, positions = flat[0::2], flat[1::2]
        last_r = self._relative[-1] if self._relative else 0
        last_p = self._positions[-1] if self._positions else 0
        # The ordered prefix, found by comparisons that run in C (an index has thousands of entries).
        ordered = min(_ascending_prefix(relative, last_r), _ascending_prefix(positions, last_p))
        if ordered < len(relative):
            # Out of order: keep the ordered prefix, ignore the rest (see the class docstring).
            relative, positions = relative[:ordered], positions[:ordered]
            self._out_of_order = True
        self._relative.extend(relative)
        self._positions.extend(positions)

    def lookup(self, offset: int) -> tuple[int, int]:
        """The entry with the greatest offset <= ``offset``, as ``(offset, position)``; ``(base, 0)`` if none."""
        i = bisect_right(self._relative, offset - self.base_offset) - 1
        if i < 0:
            return self.base_offset, 0
        return self.base_offset + self._relative[i], self._positions[i]

    def last(self) -> tuple[int, int]:
        """The last entry as ``(offset, position)``, ``(base, 0)`` if none."""
        if not self._relative:
            return self.base_offset, 0
        return self.base_offset + self._relative[-1], self._positions[-1]
