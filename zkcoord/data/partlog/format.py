"""Framing of the partition log: record batches, their encoding, CRC and (lazy) decoding.

A segment file is a plain concatenation of *batches*; there is no file header.  A batch is a fixed 39-byte header
followed by a columnar records section (all integers big-endian, as in Kafka):

===========  ====  ==========  ==================================================================================
field        size  type        meaning
===========  ====  ==========  ==================================================================================
base_offset  8     int64       offset of the first record; record ``i`` has offset ``base_offset + i``
length       4     int32       number of bytes that follow this field (batch size = ``length + 12``)
magic        1     uint8       format version, :data:`MAGIC`
crc          4     uint32      CRC-32C (Castagnoli) of every byte of the batch except this field
attributes   2     uint16      bit 0: all records carry ``first_timestamp`` (timestamps column omitted);
                               bit 1: the batch follows a gap (its base offset is above the previous batch's end)
count        4     int32       number of records, >= 1
first_ts     8     int64       timestamp of the first record, ms since the epoch
max_ts       8     int64       largest timestamp in the batch
===========  ====  ==========  ==================================================================================

Records section, for ``n = count``: ``n`` int64 timestamps (absent when attribute bit 0 is set), ``n`` int32 key
lengths (``-1`` for a ``None`` key), ``n`` int32 value lengths, then all key bytes concatenated, then all value
bytes concatenated.

Why columnar rather than Kafka's per-record varints: Python decodes a fixed-width column with one ``struct`` call,
and finds where record ``j`` starts with a sum over a slice, so both verification and skipping into the middle of a
batch cost C-speed work instead of a Python loop per record.  Why the CRC covers ``base_offset`` and ``length`` too
(Kafka's starts after the magic): our writer assigns the offset before it computes the CRC, so nothing needs to
rewrite a sealed batch, and a batch found at the wrong place or with a damaged length is detected like any other
damage.

Why CRC-32C (``crc32c.crc32c``, SSE4.2/ARMv8 instructions) rather than CRC-32 (``zlib.crc32``): it is several times
faster (about 17 GB/s against 4 GB/s here), and checking every batch a reader serves is what bounds a checked read;
Kafka's v2 record batch switched to CRC-32C for the same reason.  Format version 1 (:data:`LEGACY_MAGIC`) was this
layout with CRC-32; it is recognised only to be refused with a clear reason (:func:`is_legacy_batch`).

Everything here is pure (no I/O) and safe to call from any thread.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator, Sequence
from itertools import accumulate, pairwise, repeat
from typing import NamedTuple, cast

from crc32c import crc32c

from zkcoord.errors import CorruptLogError, LogError

#: Format version written into every batch: 2 = CRC-32C.  A reader refuses any other value.
MAGIC = 2
#: Format version 1: the same layout with a CRC-32 (``zlib.crc32``).  Never written; recognised only to refuse it.
LEGACY_MAGIC = 1
#: base_offset, length, magic, crc, attributes, count, first_ts, max_ts
HEADER = struct.Struct(">qiBIHiqq")
HEADER_SIZE = HEADER.size  # 39
#: ``length`` counts the bytes after base_offset (8) and length (4), as in Kafka.
LENGTH_OVERHEAD = 12
#: The CRC field's position: the CRC covers ``[0, CRC_START)`` and ``[CRC_END, size)``.
CRC_START = 13
CRC_END = 17
ATTR_UNIFORM_TIMESTAMPS = 0x0001
#: The batch's base offset may be above the offset expected at its boundary: the writer skipped offsets that a lost
#: part of the log had handed out (``highwater.py``), so that none is used twice.  A reader that does not know this
#: bit refuses the batch ("unknown attribute bits"), so a log with a gap is never misread by an older zkcoord.
ATTR_AFTER_GAP = 0x0002
_KNOWN_ATTRIBUTES = ATTR_UNIFORM_TIMESTAMPS | ATTR_AFTER_GAP
#: Hard bound on a batch's size, so that a damaged length field cannot make a reader allocate gigabytes.
MAX_BATCH_SIZE = 1 << 30
#: The smallest possible batch: one record, uniform timestamps (a key length and a value length).
MIN_BATCH_SIZE = HEADER_SIZE + 8
_NO_KEY = -1
_LENGTHS_OF_ONE = struct.Struct(">ii")
_ATTRIBUTES = struct.Struct(">H")
_INT32_MAX = (1 << 31) - 1
_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1


class RecordTooLargeError(LogError):
    """A batch would exceed the writer's ``max_batch_bytes`` (Kafka's RecordTooLargeException).

    Defined here rather than in :mod:`zkcoord.errors` until it is promoted there.
    """

    def __init__(self, size: int, limit: int) -> None:
        self.size = size
        self.limit = limit
        super().__init__(f"batch of {size} bytes exceeds the limit of {limit} bytes (max_batch_bytes)")


class BatchFormatError(Exception):
    """Internal: bytes at a batch boundary are not a valid batch.  Always caught inside :mod:`zkcoord.data.partlog`."""


class Record(NamedTuple):
    """One record as served to a reader (immutable).  ``key`` is ``None`` when the producer gave none.

    A named tuple rather than a frozen dataclass: a reader builds one per record, and a tuple is built in C.
    """

    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes


class BatchHeader(NamedTuple):
    base_offset: int
    length: int
    magic: int
    crc: int
    attributes: int
    record_count: int
    first_timestamp_ms: int
    max_timestamp_ms: int

    @property
    def size(self) -> int:
        """The whole batch's size in bytes, header included."""
        return self.length + LENGTH_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.record_count - 1


def parse_header(buf: bytes, start: int) -> BatchHeader:
    """Unpack the header at ``buf[start:]``; the caller guarantees ``HEADER_SIZE`` bytes are there."""
    return BatchHeader._make(HEADER.unpack_from(buf, start))


def header_problem(header: BatchHeader, expected_offset: int) -> str | None:
    """Return why ``header`` cannot start a valid batch at a boundary where ``expected_offset`` is next, or None.

    These are the checks that need no body bytes; :meth:`RecordBatch.verified` does the rest.
    """
    if header.magic != MAGIC:
        if header.magic == LEGACY_MAGIC:
            problem = f"format version {LEGACY_MAGIC} (CRC-32), not {MAGIC} (CRC-32C)"
        else:
            problem = f"bad magic {header.magic} (expected {MAGIC})"
        return problem
    if header.base_offset != expected_offset and not (
        header.attributes & ATTR_AFTER_GAP and header.base_offset > expected_offset
    ):
        return f"base offset {header.base_offset} where {expected_offset} was expected"
    if header.attributes & ~_KNOWN_ATTRIBUTES:
        return f"unknown attribute bits {header.attributes:#06x}"
    if header.record_count < 1:
        return f"record count {header.record_count}"
    if not _min_size(header.record_count, header.attributes) <= header.size <= MAX_BATCH_SIZE:
        return f"length {header.length} impossible for {header.record_count} records"
    return None


def _min_size(count: int, attributes: int) -> int:
    per_record = 8 if attributes & ATTR_UNIFORM_TIMESTAMPS else 16
    return HEADER_SIZE + per_record * count


def encode_batch(keys: Sequence[bytes | None], values: Sequence[bytes], timestamps: Sequence[int]) -> bytearray:
    """Encode records into an *unsealed* batch: base offset and CRC are left zero for :func:`seal_batch`.

    The split lets a writer do the per-record work before it takes the partition lock and only
    :func:`seal_batch` (one CRC pass in C) while holding it.

    :raises ValueError: the sequences differ in length or are empty, or a timestamp is outside int64.
    :raises TypeError: a key or value is not bytes.
    """
    n = len(values)
    if n == 0 or len(keys) != n or len(timestamps) != n:
        raise ValueError(f"a batch needs as many keys and timestamps as values, and at least one ({n} values)")
    if n == 1:
        return _encode_one(keys[0], values[0], timestamps[0])
    first_ts = timestamps[0]
    max_ts = max(timestamps)
    if min(timestamps) < _INT64_MIN or max_ts > _INT64_MAX:
        raise ValueError("timestamps must fit in a signed 64-bit integer (ms since the epoch)")
    # count() and join() run in C; only the key-length column needs a Python-level pass, and only for mixed keys.
    nulls = keys.count(None)
    if nulls == n:
        key_lengths: list[int] = [_NO_KEY] * n
        key_bytes = b""
    elif nulls:
        key_lengths = [_NO_KEY if k is None else len(k) for k in keys]
        key_bytes = b"".join([k for k in keys if k is not None])
    else:
        present = cast("Sequence[bytes]", keys)
        key_lengths = list(map(len, present))
        key_bytes = b"".join(present)
    value_bytes = b"".join(values)
    uniform = timestamps.count(first_ts) == n
    attributes = ATTR_UNIFORM_TIMESTAMPS if uniform else 0
    size = _min_size(n, attributes) + len(key_bytes) + len(value_bytes)
    if size - LENGTH_OVERHEAD > _INT32_MAX:
        raise ValueError(f"a batch of {size} bytes does not fit the format's 32-bit length")
    buf = bytearray(HEADER.pack(0, size - LENGTH_OVERHEAD, MAGIC, 0, attributes, n, first_ts, max_ts))
    if not uniform:
        buf += struct.pack(f">{n}q", *timestamps)
    buf += struct.pack(f">{n}i", *key_lengths)
    buf += struct.pack(f">{n}i", *map(len, values))
    buf += key_bytes
    buf += value_bytes
    return buf


def _encode_one(key: bytes | None, value: bytes, timestamp: int) -> bytearray:
    """:func:`encode_batch` of one record, without the sequence work (single appends are the common slow case)."""
    if not _INT64_MIN <= timestamp <= _INT64_MAX:
        raise ValueError("timestamps must fit in a signed 64-bit integer (ms since the epoch)")
    key_length = _NO_KEY if key is None else len(key)
    size = HEADER_SIZE + 8 + len(key or b"") + len(value)
    if size - LENGTH_OVERHEAD > _INT32_MAX:
        raise ValueError(f"a batch of {size} bytes does not fit the format's 32-bit length")
    buf = bytearray(HEADER.pack(0, size - LENGTH_OVERHEAD, MAGIC, 0, ATTR_UNIFORM_TIMESTAMPS, 1, timestamp, timestamp))
    buf += _LENGTHS_OF_ONE.pack(key_length, len(value))
    if key:
        buf += key
    buf += value
    return buf


def seal_batch(buf: bytearray, base_offset: int, *, after_gap: bool = False) -> None:
    """Write ``base_offset`` (and, ``after_gap``, the gap attribute) into an encoded batch and compute its CRC (in
    place)."""
    struct.pack_into(">q", buf, 0, base_offset)
    if after_gap:
        (attributes,) = _ATTRIBUTES.unpack_from(buf, CRC_END)
        _ATTRIBUTES.pack_into(buf, CRC_END, attributes | ATTR_AFTER_GAP)
    struct.pack_into(">I", buf, CRC_START, batch_crc(buf, 0, len(buf)))


def batch_crc(buf: bytes | bytearray, start: int, size: int) -> int:
    """CRC-32C of the batch at ``buf[start:start + size]``, skipping its own CRC field."""
    view = memoryview(buf)
    return crc32c(view[start + CRC_END : start + size], crc32c(view[start : start + CRC_START]))


def is_legacy_batch(buf: bytes, start: int, header: BatchHeader, expected_offset: int) -> bool:
    """Whether ``buf[start:]`` holds a whole, valid batch of format version 1 (:data:`LEGACY_MAGIC`, CRC-32).

    A log written by an older zkcoord, to be refused with that reason rather than taken for damage (which recovery
    would cut).  Garbage that merely has a 1 in the magic byte fails the CRC and stays garbage.
    """
    if header.magic != LEGACY_MAGIC or header_problem(header._replace(magic=MAGIC), expected_offset) is not None:
        return False
    if len(buf) - start < header.size:
        return False
    view = memoryview(buf)
    crc = zlib.crc32(view[start + CRC_END : start + header.size], zlib.crc32(view[start : start + CRC_START]))
    return crc == header.crc


_unpack_header = HEADER.unpack_from
_new_tuple = tuple.__new__
#: No limit, for :func:`serve_batches`.
UNLIMITED = 1 << 63


def serve_batches(
    buf: bytes,
    view: memoryview,
    start: int,
    expected_offset: int,
    *,
    first_offset: int,
    out: list[RecordBatch],
    budget: int = UNLIMITED,
    limited: bool = False,
    max_records: int = UNLIMITED,
) -> tuple[int, int, int, int]:
    """Verify the batches that follow each other in ``buf`` from ``start`` on, and serve them into ``out``.

    The fast path of every scan: the batches a read serves are usually whole in its buffer already, and this loop
    verifies them with no I/O, no exception and no copy of their bytes.  It goes on while the batch at
    ``start`` is whole in ``buf`` and valid: exactly what :func:`header_problem` and :meth:`RecordBatch.verified`
    accept together (the caller runs those on the batch where it stopped, after reading more bytes if need be, to
    learn why).

    A batch that ends before ``first_offset`` is verified and skipped.  The others are appended to ``out``, from
    ``first_offset`` on (:attr:`RecordBatch.first_offset`), while they fit in ``budget`` (if ``limited``; the first
    batch served sets ``limited``) and until they hold ``max_records`` records.

    :param view: ``memoryview(buf)``, made once per buffer (the CRC reads it without copying).
    :returns: ``(start, expected_offset, budget, records)`` after the last batch verified: the boundary, the offset
        the next batch must have, the budget left and the records served.
    """
    end = len(buf)
    served = 0
    serve = out.append
    while end - start >= HEADER_SIZE:
        fields = _unpack_header(buf, start)
        base_offset, length, magic, crc, attributes, count, _, _ = fields
        size = length + LENGTH_OVERHEAD
        if (
            magic != MAGIC
            or (base_offset != expected_offset and not (attributes & ATTR_AFTER_GAP and base_offset > expected_offset))
            or attributes & ~_KNOWN_ATTRIBUTES
            or count < 1
            or size > end - start
            or size > MAX_BATCH_SIZE
            or size < HEADER_SIZE + (8 if attributes & ATTR_UNIFORM_TIMESTAMPS else 16) * count
            or crc32c(view[start + CRC_END : start + size], crc32c(buf[start : start + CRC_START])) != crc
        ):
            break
        next_offset = base_offset + count
        if next_offset > first_offset:
            if limited and size > budget:
                break
            first = base_offset if first_offset <= base_offset else first_offset
            serve(RecordBatch(buf, start, fields, first))
            budget -= size
            served += next_offset - first
            limited = True
            if served >= max_records:
                return start + size, next_offset, budget, served
        start += size
        expected_offset = next_offset
    return start, expected_offset, budget, served


class RecordBatch:
    """One batch read from a segment, verified once (CRC and structure) when it is made.

    Records are decoded only when asked for (iteration or :meth:`records`).  A batch may be served from the middle:
    ``first_offset`` is the first record it yields, records before it are skipped without being decoded.  The
    object holds a reference to the read buffer it was cut from; it never touches a file.
    """

    __slots__ = ("_buf", "_columns", "_fields", "_start", "first_offset")

    #: ``(timestamps, key lengths, value lengths)``, set when records are first decoded.
    _columns: tuple[Sequence[int], Sequence[int], Sequence[int]]

    def __init__(self, buf: bytes, start: int, fields: tuple[int, ...], first_offset: int) -> None:
        # Use RecordBatch.verified() or serve_batches(); this constructor trusts its arguments.  It runs once per
        # batch a reader serves, so it stores only what it is given: ``fields`` is the header as unpacked (a
        # BatchHeader, or the plain tuple of its fields), :attr:`header` makes a BatchHeader of it.
        self._buf = buf
        self._start = start
        self._fields = fields
        self.first_offset = first_offset

    @classmethod
    def verified(cls, buf: bytes, start: int, header: BatchHeader, first_offset: int | None = None) -> RecordBatch:
        """Check the CRC of the batch at ``buf[start:start + header.size]`` and wrap it.

        The caller has checked :func:`header_problem` and that all ``header.size`` bytes are in ``buf``.  The
        columns are checked against the header when records are first decoded: a batch whose CRC matches holds
        exactly what a writer wrote, so only a writer bug could make them disagree, and a reader that forwards
        batches without decoding them should not pay for that check.

        :param first_offset: the first offset to serve (clamped into the batch); default: the whole batch.
        :raises BatchFormatError: the CRC does not match.
        """
        if batch_crc(buf, start, header.size) != header.crc:
            raise BatchFormatError(f"CRC mismatch (stored {header.crc:#010x})")
        if first_offset is None or first_offset <= header.base_offset:
            return cls(buf, start, header, header.base_offset)
        return cls(buf, start, header, min(first_offset, header.last_offset))

    def _decode_columns(self) -> tuple[Sequence[int], Sequence[int], Sequence[int]]:
        """``(timestamps, key lengths, value lengths)``, checked against the header (once).

        :raises CorruptLogError: the columns contradict the header or the batch length.
        """
        try:
            return self._columns
        except AttributeError:
            pass
        header, buf = self.header, self._buf
        n = header.record_count
        pos = self._start + HEADER_SIZE
        timestamps: Sequence[int]
        if header.attributes & ATTR_UNIFORM_TIMESTAMPS:
            timestamps = (header.first_timestamp_ms,) * n
        else:
            timestamps = struct.unpack_from(f">{n}q", buf, pos)
            pos += 8 * n
        key_lengths = struct.unpack_from(f">{n}i", buf, pos)
        value_lengths = struct.unpack_from(f">{n}i", buf, pos + 4 * n)
        data = self._start + header.size - (pos + 8 * n)
        if (
            timestamps[0] != header.first_timestamp_ms
            or max(timestamps) != header.max_timestamp_ms
            or min(key_lengths) < _NO_KEY
            or min(value_lengths) < 0
            or sum(key_lengths) + key_lengths.count(_NO_KEY) + sum(value_lengths) != data
        ):
            raise CorruptLogError(
                f"batch at offset {header.base_offset} passes its CRC but its columns contradict its header"
            )
        self._columns = timestamps, key_lengths, value_lengths
        return self._columns

    @property
    def header(self) -> BatchHeader:
        fields = self._fields
        return fields if isinstance(fields, BatchHeader) else BatchHeader._make(fields)

    @property
    def base_offset(self) -> int:
        return self._fields[0]

    @property
    def last_offset(self) -> int:
        return self._fields[0] + self._fields[5] - 1

    @property
    def next_offset(self) -> int:
        """The offset that follows this batch."""
        return self._fields[0] + self._fields[5]

    @property
    def record_count(self) -> int:
        """Records stored in the batch (including any skipped before ``first_offset``)."""
        return self._fields[5]

    @property
    def first_timestamp_ms(self) -> int:
        return self._fields[6]

    @property
    def max_timestamp_ms(self) -> int:
        return self._fields[7]

    @property
    def size_bytes(self) -> int:
        """The batch's size on disk."""
        return self._fields[1] + LENGTH_OVERHEAD

    def __len__(self) -> int:
        """The number of records this batch yields (from ``first_offset`` on)."""
        return self._fields[0] + self._fields[5] - self.first_offset

    def __iter__(self) -> Iterator[Record]:
        return iter(self.records())

    def __repr__(self) -> str:
        return f"<RecordBatch offsets {self.first_offset}..{self.last_offset} ({self.size_bytes} bytes)>"

    def records(self, limit: int | None = None) -> list[Record]:
        """Decode and return the records from ``first_offset`` on: to the end of the batch, or ``limit`` of them.

        :raises CorruptLogError: see :meth:`verified`.
        """
        header = self.header
        buf = self._buf
        base, count = header.base_offset, header.record_count
        skip = self.first_offset - base
        n = count if limit is None else min(count, skip + max(limit, 0))
        if n <= skip:
            return []
        timestamps, key_lengths, value_lengths = self._decode_columns()
        columns = 8 * count if header.attributes & ATTR_UNIFORM_TIMESTAMPS else 16 * count
        keys_start = self._start + HEADER_SIZE + columns
        nulls = key_lengths.count(_NO_KEY)
        values_start = keys_start + sum(key_lengths) + nulls
        # Where each wanted value starts and ends: accumulate() and pairwise() run in C.
        value_bounds = accumulate(value_lengths[skip:n], initial=values_start + sum(value_lengths[:skip]))
        values = [buf[a:b] for a, b in pairwise(value_bounds)]
        keys: Sequence[bytes | None]
        if nulls == count:
            keys = (None,) * (n - skip)
        elif not nulls:
            key_bounds = accumulate(key_lengths[skip:n], initial=keys_start + sum(key_lengths[:skip]))
            keys = [buf[a:b] for a, b in pairwise(key_bounds)]
        else:
            skipped = key_lengths[:skip]
            pos = keys_start + sum(skipped) + skipped.count(_NO_KEY)
            key_list: list[bytes | None] = []
            for length in key_lengths[skip:n]:
                if length == _NO_KEY:
                    key_list.append(None)
                else:
                    key_list.append(buf[pos : pos + length])
                    pos += length
            keys = key_list
        # tuple.__new__ builds each Record in C (Record(...) would run a Python-level __new__ per record).
        rows = zip(range(self.first_offset, base + n), timestamps[skip:n], keys, values, strict=True)
        return list(map(_new_tuple, repeat(Record), rows))
