"""The batch encoding of the partition log: round trips, partial decoding, and detection of damage."""

from __future__ import annotations

import struct
import zlib

import pytest
from crc32c import crc32c
from hypothesis import given
from hypothesis import strategies as st

from zkcoord.data.partlog.format import (
    HEADER_SIZE,
    LEGACY_MAGIC,
    MAGIC,
    UNLIMITED,
    BatchFormatError,
    Record,
    RecordBatch,
    encode_batch,
    header_problem,
    is_legacy_batch,
    parse_header,
    seal_batch,
    serve_batches,
)
from zkcoord.errors import CorruptLogError

keys = st.none() | st.binary(max_size=40)
values = st.binary(max_size=200)
timestamps = st.integers(min_value=-(2**63), max_value=2**63 - 1)
records = st.lists(st.tuples(keys, values, timestamps), min_size=1, max_size=40)
base_offsets = st.integers(min_value=0, max_value=2**62)


def sealed(items: list[tuple[bytes | None, bytes, int]], base_offset: int) -> bytes:
    buf = encode_batch([k for k, _, _ in items], [v for _, v, _ in items], [t for _, _, t in items])
    seal_batch(buf, base_offset)
    return bytes(buf)


def legacy_sealed(values: list[bytes], base_offset: int) -> bytes:
    """A batch as format version 1 wrote it: the same layout, magic 1, CRC-32 (zlib)."""
    buf = encode_batch([None] * len(values), values, [1] * len(values))
    struct.pack_into(">q", buf, 0, base_offset)
    buf[12] = LEGACY_MAGIC
    struct.pack_into(">I", buf, 13, zlib.crc32(buf[17:], zlib.crc32(buf[:13])))
    return bytes(buf)


def fast(buf: bytes, start: int, expected_offset: int, first_offset: int = -1) -> RecordBatch | None:
    """What the fast path makes of the batch at ``buf[start:]``: the batch, or None (left to the careful path)."""
    out: list[RecordBatch] = []
    serve_batches(buf, memoryview(buf), start, expected_offset, first_offset=first_offset, out=out, max_records=1)
    return out[0] if out else None


def decode(buf: bytes, base_offset: int, first_offset: int | None = None) -> RecordBatch:
    header = parse_header(buf, 0)
    assert header_problem(header, base_offset) is None
    assert header.size == len(buf)
    batch = RecordBatch.verified(buf, 0, header, first_offset)
    quick = fast(buf, 0, base_offset, -1 if first_offset is None else first_offset)
    assert quick is not None
    assert (quick.header, quick.first_offset, quick.records()) == (batch.header, batch.first_offset, batch.records())
    return batch


@given(records, base_offsets)
def test_round_trip(items: list[tuple[bytes | None, bytes, int]], base_offset: int) -> None:
    buf = sealed(items, base_offset)
    batch = decode(buf, base_offset)
    expected = [Record(base_offset + i, t, k, v) for i, (k, v, t) in enumerate(items)]
    assert batch.records() == expected
    assert list(batch) == expected
    assert len(batch) == batch.record_count == len(items)
    assert (batch.base_offset, batch.last_offset, batch.next_offset) == (
        base_offset,
        base_offset + len(items) - 1,
        base_offset + len(items),
    )
    assert batch.first_timestamp_ms == items[0][2]
    assert batch.max_timestamp_ms == max(t for _, _, t in items)
    assert batch.size_bytes == len(buf)


@given(records, base_offsets, st.data())
def test_decoding_from_the_middle_skips_the_records_before(
    items: list[tuple[bytes | None, bytes, int]], base_offset: int, data: st.DataObject
) -> None:
    skip = data.draw(st.integers(min_value=0, max_value=len(items) - 1))
    limit = data.draw(st.none() | st.integers(min_value=0, max_value=len(items) + 1))
    batch = decode(sealed(items, base_offset), base_offset, base_offset + skip)
    expected = [Record(base_offset + i, t, k, v) for i, (k, v, t) in enumerate(items)][skip:]
    assert batch.first_offset == base_offset + skip
    assert len(batch) == len(items) - skip
    assert batch.records(limit) == (expected if limit is None else expected[:limit])


@given(records, base_offsets)
def test_a_batch_can_be_found_in_the_middle_of_a_buffer(
    items: list[tuple[bytes | None, bytes, int]], base_offset: int
) -> None:
    buf = sealed(items, base_offset)
    padded = b"\xff" * 13 + buf + b"\xee" * 7
    header = parse_header(padded, 13)
    batch = RecordBatch.verified(padded, 13, header)
    assert [r.value for r in batch] == [v for _, v, _ in items]


def test_uniform_timestamps_take_no_column() -> None:
    same = encode_batch([None, None], [b"a", b"b"], [5, 5])
    different = encode_batch([None, None], [b"a", b"b"], [5, 6])
    assert len(different) - len(same) == 16


def test_the_checksum_is_crc32c_of_everything_but_the_crc_field() -> None:
    assert crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value (zlib.crc32 gives 0xCBF43926)
    buf = sealed([(b"k", b"value", 1000), (None, b"", 999)], 42)
    (stored,) = struct.unpack_from(">I", buf, 13)
    assert stored == crc32c(buf[17:], crc32c(buf[:13])) == crc32c(buf[:13] + buf[17:])
    assert stored != zlib.crc32(buf[17:], zlib.crc32(buf[:13]))
    assert buf[12] == MAGIC == 2


def test_records_are_immutable_named_tuples() -> None:
    record = Record(5, 1000, None, b"v")
    assert (record.offset, record.timestamp_ms, record.key, record.value) == (5, 1000, None, b"v")
    with pytest.raises(AttributeError):
        record.offset = 6  # type: ignore[misc]


def test_layout_of_the_header_is_as_documented() -> None:
    buf = sealed([(b"k", b"value", 1000), (None, b"", 999)], 42)
    base_offset, length, magic, _crc, attributes, count, first_ts, max_ts = struct.unpack_from(">qiBIHiqq", buf)
    assert (base_offset, length + 12, magic, attributes) == (42, len(buf), MAGIC, 0)
    assert (count, first_ts, max_ts) == (2, 1000, 1000)
    body = buf[HEADER_SIZE:]
    assert struct.unpack_from(">2q2i2i", body) == (1000, 999, 1, -1, 5, 0)
    assert body[32:] == b"k" + b"value"


@given(st.lists(st.tuples(keys, values, timestamps), min_size=1, max_size=5), st.data())
def test_every_single_byte_change_is_detected(
    items: list[tuple[bytes | None, bytes, int]], data: st.DataObject
) -> None:
    buf = bytearray(sealed(items, 7))
    position = data.draw(st.integers(min_value=0, max_value=len(buf) - 1))
    buf[position] ^= data.draw(st.integers(min_value=1, max_value=255))
    damaged = bytes(buf) + b"\x00" * data.draw(st.integers(min_value=0, max_value=64))  # what follows in a buffer
    assert fast(damaged, 0, 7) is None  # the fast path refuses it too
    header = parse_header(damaged, 0)
    if header_problem(header, 7) is not None or header.size != len(buf):
        return  # caught by the header checks, or no longer a complete batch: a scanner stops there
    with pytest.raises(BatchFormatError):
        RecordBatch.verified(damaged, 0, header)


@given(records, base_offsets, st.data())
def test_the_fast_path_needs_the_whole_batch_in_the_buffer(
    items: list[tuple[bytes | None, bytes, int]], base_offset: int, data: st.DataObject
) -> None:
    buf = sealed(items, base_offset)
    cut = data.draw(st.integers(min_value=0, max_value=len(buf) - 1))
    assert fast(b"\xee" * 5 + buf[:cut], 5, base_offset) is None
    assert fast(b"\xee" * 5 + buf, 5, base_offset) is not None
    assert fast(b"\xee" * 5 + buf, 5, base_offset + 1) is None  # not the offset expected there


def test_a_batch_of_the_previous_format_is_recognised_only_when_it_verifies() -> None:
    legacy = legacy_sealed([b"a", b"bc"], 7)
    header = parse_header(legacy, 0)
    assert header.magic == LEGACY_MAGIC
    assert "format version 1 (CRC-32), not 2 (CRC-32C)" in (header_problem(header, 7) or "")
    assert fast(legacy, 0, 7) is None
    assert is_legacy_batch(legacy, 0, header, 7)
    assert not is_legacy_batch(legacy, 0, header, 8)  # not where it would have to be
    assert not is_legacy_batch(legacy[:-1], 0, header, 7)  # torn
    damaged = bytearray(legacy)
    damaged[-1] ^= 1
    assert not is_legacy_batch(bytes(damaged), 0, header, 7)  # garbage with a 1 in the magic byte stays garbage
    current = sealed([(None, b"a", 1)], 7)
    assert not is_legacy_batch(current, 0, parse_header(current, 0), 7)


@pytest.mark.parametrize(
    ("field", "value", "problem"),
    [
        ("magic", 3, "bad magic"),
        ("magic", 0, "bad magic"),
        ("magic", 1, "format version 1 (CRC-32), not 2 (CRC-32C)"),
        ("base_offset", 8, "base offset 8 where 7"),
        ("attributes", 0x80, "unknown attribute"),
        ("record_count", 0, "record count 0"),
        ("length", 5, "impossible"),
    ],
)
def test_header_problems(field: str, value: int, problem: str) -> None:
    header = parse_header(sealed([(None, b"x", 1)], 7), 0)._replace(**{field: value})
    assert problem in (header_problem(header, 7) or "")


def test_encoding_refuses_bad_input() -> None:
    with pytest.raises(ValueError, match="64-bit"):
        encode_batch([None, None], [b"x", b"y"], [2**63, 0])
    with pytest.raises(ValueError, match="at least one"):
        encode_batch([], [], [])
    with pytest.raises(ValueError, match="64-bit"):
        encode_batch([None], [b"x"], [2**63])
    with pytest.raises(TypeError):
        encode_batch([None], ["text"], [1])  # type: ignore[list-item]


@pytest.mark.parametrize("values", [[b"value"], [b"value", b"other"]])
def test_columns_that_contradict_the_length_are_refused_even_with_a_good_crc(values: list[bytes]) -> None:
    buf = encode_batch([b"k"] * len(values), values, [1] * len(values))
    struct.pack_into(">i", buf, HEADER_SIZE + 4 * len(values), 4)  # the first value length: 5 -> 4
    seal_batch(buf, 0)
    batch = RecordBatch.verified(bytes(buf), 0, parse_header(bytes(buf), 0))  # the CRC matches
    with pytest.raises(CorruptLogError, match="contradict"):
        batch.records()


def test_serving_a_run_of_batches_skips_limits_and_stops_where_a_batch_is_not_whole() -> None:
    run = b"".join(sealed([(None, b"x" * 10, 1)] * 3, base) for base in (0, 3, 6, 9))  # 4 batches of 3 records
    size = len(run) // 4
    view = memoryview(run)
    out: list[RecordBatch] = []
    assert serve_batches(run, view, 0, 0, first_offset=4, out=out) == (len(run), 12, UNLIMITED - 3 * size, 8)
    assert [b.first_offset for b in out] == [4, 6, 9]  # the batch ending before offset 4 is skipped
    out = []
    assert serve_batches(run, view, 0, 0, first_offset=3, out=out)[3] == 9
    assert [b.first_offset for b in out] == [3, 6, 9]  # offset 3 starts the second batch: the first one is skipped
    out = []
    # The first batch served regardless of the budget, the others within it.
    assert serve_batches(run, view, 0, 0, first_offset=0, out=out, budget=size - 1) == (size, 3, -1, 3)
    out = []
    assert serve_batches(run, view, 0, 0, first_offset=0, out=out, budget=size - 1, limited=True) == (0, 0, size - 1, 0)
    assert out == []
    served = serve_batches(run, view, 0, 0, first_offset=0, out=out, max_records=4)
    assert served == (2 * size, 6, UNLIMITED - 2 * size, 6)
    out = []
    torn = run[:-1]  # the last batch is not whole: the run stops before it
    served = serve_batches(torn, memoryview(torn), size, 3, first_offset=0, out=out)
    assert served == (3 * size, 9, UNLIMITED - 2 * size, 6)
