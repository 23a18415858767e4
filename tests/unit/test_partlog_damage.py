"""The partition log damaged in the middle: corrupted batches, logs of the previous format, scans that stop exactly
where the careful checks stop, and damaged segments before the last."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.partlog_helpers import TINY, check_records, fill, key_of, read_all, value_of
from tests.unit.test_partlog_format import legacy_sealed
from zkcoord.data.partlog import WriterConfig, log_offsets, open_reader, open_writer, partition_dir
from zkcoord.data.partlog.format import (
    HEADER_SIZE,
    UNLIMITED,
    BatchFormatError,
    RecordBatch,
    encode_batch,
    header_problem,
    parse_header,
    seal_batch,
)
from zkcoord.data.partlog.layout import index_path, log_path
from zkcoord.data.partlog.scan import FIRST_CHUNK, SegmentScanner, Stop
from zkcoord.errors import CorruptLogError

# --- damage ------------------------------------------------------------------------------------------------------


def test_a_corrupted_batch_in_the_middle_raises(tmp_path: Path) -> None:
    directory = partition_dir(tmp_path, "t", 0)
    with open_writer(tmp_path, "t", 0, config=WriterConfig(index_interval_bytes=1 << 20)) as writer:
        fill(writer, 10, batch=5)
        middle = log_path(directory, 0).stat().st_size
        fill(writer, 10, batch=5)
        fill(writer, 10, batch=5)
    with open(log_path(directory, 0), "r+b") as f:
        f.seek(middle + HEADER_SIZE + 30)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0x40]))
    with open_reader(tmp_path, "t", 0) as reader:
        check_records(reader.read(0), 0, 10)  # the valid batches before the damage are served
        for offset in (10, 12):
            with pytest.raises(CorruptLogError, match="CRC"):
                reader.read(offset)
        with pytest.raises(CorruptLogError):
            reader.end_offset()
    with pytest.raises(CorruptLogError, match="valid data follows"):  # recovery must not cut acknowledged records
        open_writer(tmp_path, "t", 0)


def test_a_log_of_the_previous_format_is_refused_and_never_cut(tmp_path: Path) -> None:
    """Format version 1 (CRC-32) logs are refused with that reason by readers and writers, and left as they are."""
    directory = partition_dir(tmp_path, "t", 0)
    directory.mkdir()
    log = log_path(directory, 0)
    log.write_bytes(legacy_sealed([b"a", b"b"], 0) + legacy_sealed([b"c"], 2))
    index_path(directory, 0).write_bytes(b"")
    before = log.read_bytes()
    with open_reader(tmp_path, "t", 0) as reader:
        for read in (reader.end_offset, lambda: reader.read(0), lambda: reader.read_batches(1)):
            with pytest.raises(CorruptLogError, match=r"unsupported batch at position 0.*format version 1 \(CRC-32\)"):
                read()
    with pytest.raises(CorruptLogError, match="format version 1"):
        log_offsets(tmp_path, "t", 0)
    with pytest.raises(CorruptLogError, match=r"format version 1.*Nothing was changed"):
        open_writer(tmp_path, "t", 0)
    assert log.read_bytes() == before
    # Even when the last segment is still empty (an old writer rolled and stopped), a writer appends nothing.
    log_path(directory, 3).touch()
    with pytest.raises(CorruptLogError, match="format version 1"):
        open_writer(tmp_path, "t", 0)
    assert (log.read_bytes(), log_path(directory, 3).stat().st_size) == (before, 0)
    # A single old batch, ending exactly at the end of the file, is not mistaken for a torn tail either.
    log.write_bytes(legacy_sealed([b"a"], 0))
    log_path(directory, 3).unlink()
    with open_reader(tmp_path, "t", 0) as reader, pytest.raises(CorruptLogError, match="format version 1"):
        reader.end_offset()
    with pytest.raises(CorruptLogError, match="format version 1"):
        open_writer(tmp_path, "t", 0)
    assert log.read_bytes() == legacy_sealed([b"a"], 0)


def reference_scan(data: bytes) -> tuple[list[int], int]:
    """The base offsets of the valid batches at the start of ``data`` and where they end, by the careful checks."""
    position, expected, bases = 0, 0, []
    while len(data) - position >= HEADER_SIZE:
        header = parse_header(data, position)
        if header_problem(header, expected) is not None or len(data) - position < header.size:
            break
        try:
            RecordBatch.verified(data, position, header)
        except BatchFormatError:
            break
        bases.append(header.base_offset)
        position += header.size
        expected = header.last_offset + 1
    return bases, position


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.integers(min_value=1, max_value=30), min_size=1, max_size=8),
    st.data(),
)
def test_a_scan_serves_exactly_the_valid_batches(counts: list[int], data: st.DataObject) -> None:
    """Whether a batch comes through the fast path (already in the buffer) or the careful one (read from the file,
    possibly in pieces), a scan serves exactly what the careful checks accept, and stops where they stop.
    """
    segment = bytearray()
    offset = 0
    for count in counts:
        batch = encode_batch([key_of(i) for i in range(count)], [value_of(i) for i in range(count)], [5] * count)
        seal_batch(batch, offset)
        segment += batch
        offset += count
    if data.draw(st.booleans()):
        position = data.draw(st.integers(min_value=0, max_value=len(segment) - 1))
        segment[position] ^= data.draw(st.integers(min_value=1, max_value=255))
    damaged = bytes(segment[: data.draw(st.integers(min_value=0, max_value=len(segment)))])
    bases, end = reference_scan(damaged)
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "segment.log"
        path.write_bytes(damaged)
        fd = os.open(path, os.O_RDONLY)
        try:
            for seeded, first_chunk in ((True, FIRST_CHUNK), (False, HEADER_SIZE), (False, FIRST_CHUNK)):
                scanner = SegmentScanner(fd, 0, 0, first_chunk)
                if seeded:
                    scanner.seed(0, damaged)
                got = scanner.take(0, UNLIMITED)
                assert [b.base_offset for b in got] == bases
                assert scanner.position == end
                if end == len(damaged):
                    assert scanner.stop is Stop.END
                else:
                    assert scanner.stop in (Stop.INCOMPLETE, Stop.INVALID)
        finally:
            os.close(fd)


def test_a_damaged_segment_before_the_last_raises(tmp_path: Path) -> None:
    directory = partition_dir(tmp_path, "t", 0)
    with open_writer(tmp_path, "t", 0, config=TINY) as writer:
        fill(writer, 100, batch=3)
    first = log_path(directory, 0)
    first.write_bytes(first.read_bytes()[:-5])
    with open_reader(tmp_path, "t", 0) as reader, pytest.raises(CorruptLogError, match=r"incomplete.*next segment"):
        read_all(reader)
    with open_writer(tmp_path, "t", 0, config=TINY) as writer, pytest.raises(CorruptLogError, match="closed segment"):
        writer.rebuild_index()
