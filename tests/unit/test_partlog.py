"""The partition log's writer and reader: offsets, ranges, segments, the sparse index, API contracts, and a
model-based property.  Damage in the middle of a log is in ``test_partlog_damage.py``."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.partlog_helpers import TINY, check_records, counting_clock, fill, key_of, read_all, value_of
from zkcoord.data.partlog import (
    BatchItem,
    PartitionReader,
    PartitionWriter,
    Record,
    RecordTooLargeError,
    WriterConfig,
    list_partitions,
    log_offsets,
    open_reader,
    open_writer,
    partition_dir,
)
from zkcoord.data.partlog.format import RecordBatch
from zkcoord.data.partlog.layout import index_path, list_segments, log_path
from zkcoord.data.partlog.scan import FIRST_CHUNK
from zkcoord.errors import ConfigurationError, InvalidNameError, LogError, LogLockedError, OffsetOutOfRangeError

# --- basics --------------------------------------------------------------------------------------------------


def test_offsets_start_at_zero_and_records_round_trip(tmp_path: Path) -> None:
    with PartitionWriter(tmp_path, "orders", 3, clock=counting_clock(1000)) as writer:
        assert (writer.start_offset, writer.end_offset) == (0, 0)
        assert writer.append(b"v0") == 0
        assert writer.append(b"v1", key=b"k1", timestamp_ms=5) == 1
        assert writer.append_batch([(None, b"v2"), (b"", b""), (b"k4", b"v4", 77)], timestamp_ms=9) == (2, 4)
        assert writer.end_offset == 5
    assert (tmp_path / "orders-3" / "00000000000000000000.log").is_file()
    with PartitionReader(tmp_path, "orders", 3) as reader:
        assert (reader.start_offset, reader.end_offset()) == (0, 5)
        assert reader.read(0) == [
            Record(0, 1000, None, b"v0"),
            Record(1, 5, b"k1", b"v1"),
            Record(2, 9, None, b"v2"),
            Record(3, 9, b"", b""),
            Record(4, 77, b"k4", b"v4"),
        ]


def test_default_timestamps_come_from_the_clock_once_per_batch(tmp_path: Path) -> None:
    with PartitionWriter(tmp_path, "t", 0, clock=counting_clock(50)) as writer:
        writer.append_batch([(None, b"a"), (None, b"b")])
        writer.append(b"c")
    with open_reader(tmp_path, "t", 0) as reader:
        assert [r.timestamp_ms for r in reader.read(0)] == [50, 50, 51]


def test_ranges_from_every_offset_with_limits(tmp_path: Path) -> None:
    with open_writer(tmp_path, "t", 0, config=TINY) as writer:
        fill(writer, 60, batch=4)
        fill(writer, 20, batch=1)
    with open_reader(tmp_path, "t", 0) as reader:
        for offset in range(80):
            got = reader.read(offset, max_records=7)
            check_records(got, offset, min(80, offset + 7))
        assert reader.read(80) == []
        assert reader.read(10_000) == []
        check_records(read_all(reader, max_bytes=1), 0, 80)  # max_bytes never starves a reader
        check_records(read_all(reader, 33, max_records=1), 33, 80)


def test_read_batches_skips_into_the_first_batch_and_respects_max_bytes(tmp_path: Path) -> None:
    with open_writer(tmp_path, "t", 0) as writer:
        fill(writer, 40, batch=10)
    with open_reader(tmp_path, "t", 0) as reader:
        batches = reader.read_batches(13)
        assert [(b.first_offset, b.base_offset, b.last_offset, len(b)) for b in batches] == [
            (13, 10, 19, 7),
            (20, 20, 29, 10),
            (30, 30, 39, 10),
        ]
        check_records([r for b in batches for r in b], 13, 40)
        size = batches[0].size_bytes
        assert len(reader.read_batches(13, max_bytes=size)) == 1
        assert len(reader.read_batches(13, max_bytes=sum(b.size_bytes for b in batches) - 1)) == 2
        assert len(reader.read_batches(13, max_bytes=1)) == 1


def test_a_batch_over_the_budget_is_not_read(tmp_path: Path) -> None:
    with open_writer(tmp_path, "t", 0) as writer:
        writer.append(b"small")
        writer.append(b"x" * (2 << 20))
    with open_reader(tmp_path, "t", 0) as reader:
        assert [len(b) for b in reader.read_batches(0, max_bytes=1000)] == [1]
        assert reader.bytes_read <= 1000  # the large batch's header was enough to leave it for the next call
        assert [b.size_bytes > 2 << 20 for b in reader.read_batches(1, max_bytes=1000)] == [True]


def test_batches_keep_their_bytes_after_later_reads(tmp_path: Path) -> None:
    """Every read gets a buffer of its own: a batch served earlier never sees its bytes replaced by a later read."""
    with open_writer(tmp_path, "t", 0, config=WriterConfig(segment_bytes=50_000, fsync_on_roll=False)) as writer:
        fill(writer, 3_000, batch=10)
    log_size = sum(log_path(writer.directory, base).stat().st_size for base in list_segments(writer.directory))
    with open_reader(tmp_path, "t", 0) as reader:
        kept: list[RecordBatch] = []
        while batches := reader.read_batches(kept[-1].next_offset if kept else 0, max_bytes=8192):
            assert sum(b.size_bytes for b in batches) <= 8192
            kept.extend(batches)
        check_records([r for b in kept for r in b], 0, 3_000)
        # Sequential calls resume at the batch boundary where the last one stopped: each byte is read about once.
        assert reader.bytes_read < 1.1 * log_size


def test_reads_cross_segment_rolls(tmp_path: Path) -> None:
    with open_writer(tmp_path, "t", 0, config=TINY) as writer:
        fill(writer, 200, batch=3)
    segments = list_segments(partition_dir(tmp_path, "t", 0))
    assert len(segments) > 10
    for base in segments:
        assert log_path(partition_dir(tmp_path, "t", 0), base).stat().st_size <= TINY.segment_bytes
    with open_reader(tmp_path, "t", 0) as reader:
        check_records(reader.read(0, max_records=1000, max_bytes=1 << 20), 0, 200)
        for base in segments[1:]:
            check_records(reader.read(base - 1, max_records=2), base - 1, base + 1)


def test_a_batch_larger_than_a_segment_gets_a_segment_of_its_own(tmp_path: Path) -> None:
    with open_writer(tmp_path, "t", 0, config=TINY) as writer:
        writer.append(b"small")
        writer.append(b"x" * 2000)
        writer.append(b"after")
    assert list_segments(partition_dir(tmp_path, "t", 0)) == [0, 1, 2]
    with open_reader(tmp_path, "t", 0) as reader:
        assert [r.value[:5] for r in reader.read(0)] == [b"small", b"xxxxx", b"after"]


def test_a_reader_follows_a_writer_across_rolls(tmp_path: Path) -> None:
    with open_writer(tmp_path, "t", 0, config=TINY) as writer, open_reader(tmp_path, "t", 0) as reader:
        assert reader.end_offset() == 0
        assert reader.read(0) == []
        seen: list[Record] = []
        for _ in range(30):
            fill(writer, 5, batch=2)
            assert reader.end_offset() == writer.end_offset
            seen.extend(read_all(reader, len(seen)))
        check_records(seen, 0, 150)


def test_reopened_writer_continues_where_the_log_ends(tmp_path: Path) -> None:
    for _ in range(3):
        with open_writer(tmp_path, "t", 0, config=TINY) as writer:
            fill(writer, 25, batch=4)
            assert writer.truncations == []
    with open_reader(tmp_path, "t", 0) as reader:
        check_records(read_all(reader), 0, 75)


# --- the sparse index ------------------------------------------------------------------------------------------


def test_a_lookup_reads_a_bounded_number_of_bytes(tmp_path: Path) -> None:
    config = WriterConfig(index_interval_bytes=4096, fsync_on_roll=False)
    with open_writer(tmp_path, "t", 0, config=config) as writer:
        fill(writer, 20_000, batch=10)
    log_size = log_path(partition_dir(tmp_path, "t", 0), 0).stat().st_size
    assert log_size > 1_000_000
    for offset in (0, 7, 5_555, 12_345, 19_999):
        with open_reader(tmp_path, "t", 0) as reader:
            check_records(reader.read(offset, max_records=1), offset, offset + 1)
            # One first chunk from the index entry before the offset, never a scan from the start of the file.
            assert reader.bytes_read <= FIRST_CHUNK
    with open_reader(tmp_path, "t", 0) as reader:
        assert reader.end_offset() == 20_000
        assert reader.bytes_read <= config.index_interval_bytes + 1024


def test_sequential_reads_resume_without_rereading(tmp_path: Path) -> None:
    with open_writer(tmp_path, "t", 0) as writer:
        fill(writer, 3_000, batch=10)
    with open_reader(tmp_path, "t", 0) as reader:
        check_records(read_all(reader, max_records=25), 0, 3_000)
        log_size = log_path(partition_dir(tmp_path, "t", 0), 0).stat().st_size
        assert reader.bytes_read < 1.2 * log_size


def test_rebuilt_index_equals_the_one_written_by_appends(tmp_path: Path) -> None:
    directory = partition_dir(tmp_path, "t", 0)
    with open_writer(tmp_path, "t", 0, config=TINY) as writer:
        fill(writer, 300, batch=3)
    original = {base: index_path(directory, base).read_bytes() for base in list_segments(directory)}
    assert sum(len(b) for b in original.values()) > 0
    for base in original:
        index_path(directory, base).write_bytes(b"")
    with open_reader(tmp_path, "t", 0) as reader:  # no index: correct, just slower
        check_records(reader.read(250, max_records=10), 250, 260)
    with open_writer(tmp_path, "t", 0, config=TINY) as writer:
        assert writer.rebuild_index() == sum(len(b) for b in original.values()) // 8
    assert {base: index_path(directory, base).read_bytes() for base in original} == original


def test_stale_index_entries_are_not_trusted(tmp_path: Path) -> None:
    directory = partition_dir(tmp_path, "t", 0)
    config = WriterConfig(index_interval_bytes=100, fsync_on_roll=False)
    with open_writer(tmp_path, "t", 0, config=config) as writer:
        fill(writer, 100, batch=2)
    good = index_path(directory, 0).read_bytes()
    # An entry in the middle that points at the wrong place, and entries beyond the end of the log.
    damaged = bytearray(good)
    damaged[8 * 3 + 4 : 8 * 3 + 8] = (int.from_bytes(good[8 * 3 + 4 : 8 * 3 + 8], "big") + 1).to_bytes(4, "big")
    stale = bytes(damaged) + bytes.fromhex("00000fff 00ffffff 00001000 01000000")
    for tail in (b"", bytes(8), b"\x00\x00\x00"):  # a fresh reader's end_offset() reads the last entry alone
        index_path(directory, 0).write_bytes(stale + tail)
        with open_reader(tmp_path, "t", 0) as reader:
            assert reader.end_offset() == 100
    index_path(directory, 0).write_bytes(stale)
    with open_reader(tmp_path, "t", 0) as reader:
        for offset in range(0, 100, 3):
            check_records(reader.read(offset, max_records=3), offset, min(100, offset + 3))
    with open_writer(tmp_path, "t", 0, config=config) as writer:
        assert writer.end_offset == 100
        fill(writer, 1)
    assert index_path(directory, 0).read_bytes().startswith(bytes(damaged))  # entries before the last are hints
    assert len(index_path(directory, 0).read_bytes()) == len(good)  # those beyond the end were dropped


# --- API contracts -----------------------------------------------------------------------------------------------


def test_offsets_below_the_start_are_out_of_range(tmp_path: Path) -> None:
    with open_writer(tmp_path, "t", 0) as writer:
        fill(writer, 3)
    with open_reader(tmp_path, "t", 0) as reader:
        with pytest.raises(OffsetOutOfRangeError) as info:
            reader.read(-1)
        assert (info.value.start, info.value.end) == (0, 3)
    with open_writer(tmp_path, "t", 1, config=TINY) as writer:
        fill(writer, 100, batch=2)
    directory = partition_dir(tmp_path, "t", 1)
    second = list_segments(directory)[1]
    log_path(directory, 0).unlink()  # as retention would
    with open_reader(tmp_path, "t", 1) as reader:
        assert reader.start_offset == second
        check_records(reader.read(second, max_records=3), second, second + 3)
        with pytest.raises(OffsetOutOfRangeError):
            reader.read_batches(second - 1)


def test_a_partition_without_files_reads_as_empty(tmp_path: Path) -> None:
    with open_reader(tmp_path, "never-written", 0) as reader:
        assert (reader.start_offset, reader.end_offset(), reader.read(0)) == (0, 0, [])
        with open_writer(tmp_path, "never-written", 0) as writer:
            writer.append(b"now")
        assert [r.value for r in reader.read(0)] == [b"now"]
    assert (tmp_path / "never-written-0" / "00000000000000000000.log").stat().st_size > 0


def test_helpers_and_implicit_open(tmp_path: Path) -> None:
    assert log_offsets(tmp_path, "t", 0) == (0, 0)
    with open_writer(tmp_path, "t", 0) as writer:
        fill(writer, 5)
    assert log_offsets(tmp_path, "t", 0) == (0, 5)
    reader = PartitionReader(tmp_path, "t", 0)  # no open(): the first read opens it
    assert reader.start_offset == 0
    check_records(reader.read(2), 2, 5)
    reader.close()


def test_list_partitions(tmp_path: Path) -> None:
    assert list_partitions(tmp_path / "missing", "t") == []
    for topic, partition in [("t", 0), ("t", 10), ("t", 2), ("t-1", 3), ("tt", 1)]:
        open_writer(tmp_path, topic, partition).close()
    (tmp_path / "t-x").mkdir()
    assert list_partitions(tmp_path, "t") == [0, 2, 10]
    assert list_partitions(tmp_path, "t-1") == [3]


def test_bad_names_and_configs_are_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidNameError):
        PartitionWriter(tmp_path, "../etc", 0)
    with pytest.raises(ConfigurationError):
        PartitionReader(tmp_path, "t", -1)
    with pytest.raises(ConfigurationError):
        WriterConfig(segment_bytes=0)
    with pytest.raises(ConfigurationError):
        WriterConfig(index_interval_bytes=0)


def test_writer_misuse(tmp_path: Path) -> None:
    writer = PartitionWriter(tmp_path, "t", 0, config=WriterConfig(max_batch_bytes=1000))
    with pytest.raises(LogError, match="not open"):
        writer.append(b"x")
    writer.open()
    with pytest.raises(LogError, match="already open"):
        writer.open()
    with pytest.raises(RecordTooLargeError):
        writer.append(b"x" * 1000)
    with pytest.raises(ValueError, match="at least one"):
        writer.append_batch([])
    with pytest.raises(ValueError, match="batch item"):
        writer.append_batch([(b"key",)])  # type: ignore[list-item]
    mixed: list[BatchItem] = [(None, b"a", 1), (b"k", b"b")]
    assert writer.append_batch(iter(mixed), timestamp_ms=2) == (0, 1)
    assert writer.end_offset == 2
    writer.flush()
    writer.flush(fsync=True)
    writer.close()
    writer.close()
    assert writer.open() is writer
    writer.close()


def test_an_exclusive_writer_excludes_other_writers(tmp_path: Path) -> None:
    exclusive = WriterConfig(exclusive=True)
    with open_writer(tmp_path, "t", 0, config=exclusive) as writer:
        fill(writer, 10, batch=3)
        with pytest.raises(LogLockedError):
            open_writer(tmp_path, "t", 0, config=exclusive)
    with open_writer(tmp_path, "t", 0, config=exclusive) as writer:
        fill(writer, 10)
    with open_reader(tmp_path, "t", 0) as reader:
        check_records(read_all(reader), 0, 20)


def test_two_writers_in_one_process_share_the_partition(tmp_path: Path) -> None:
    with open_writer(tmp_path, "t", 0, config=TINY) as a, open_writer(tmp_path, "t", 0, config=TINY) as b:
        for i in range(60):
            (a if i % 3 else b).append_batch([(key_of(j), value_of(j)) for j in range(i * 2, i * 2 + 2)])
        assert b.end_offset == 120 or a.end_offset == 120
    with open_reader(tmp_path, "t", 0) as reader:
        check_records(read_all(reader), 0, 120)


# --- a model-based property ----------------------------------------------------------------------------------

operations = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(min_value=1, max_value=8), st.integers(min_value=0, max_value=300)),
        st.tuples(st.just("reopen"), st.just(0), st.just(0)),
    ),
    min_size=1,
    max_size=25,
)


@settings(max_examples=40, deadline=None)
@given(operations, st.data())
def test_the_log_behaves_like_a_list(ops: list[tuple[str, int, int]], data: st.DataObject) -> None:
    config = WriterConfig(
        segment_bytes=data.draw(st.integers(min_value=64, max_value=2000)),
        index_interval_bytes=data.draw(st.integers(min_value=1, max_value=500)),
        fsync_on_roll=False,
    )
    model: list[tuple[bytes | None, bytes]] = []
    with tempfile.TemporaryDirectory() as d:
        writer = open_writer(d, "t", 0, config=config)
        try:
            for op, count, size in ops:
                if op == "reopen":
                    writer.close()
                    writer = open_writer(d, "t", 0, config=config)
                    assert writer.end_offset == len(model)
                    continue
                items = [(key_of(len(model) + i), bytes([i % 251]) * size) for i in range(count)]
                assert writer.append_batch(items) == (len(model), len(model) + count - 1)
                model.extend(items)
        finally:
            writer.close()
        with open_reader(d, "t", 0) as reader:
            assert reader.end_offset() == len(model)
            offset = data.draw(st.integers(min_value=0, max_value=len(model)))
            max_records = data.draw(st.integers(min_value=1, max_value=50))
            got = reader.read(offset, max_records=max_records, max_bytes=data.draw(st.integers(1, 5000)))
            assert [r.offset for r in got] == list(range(offset, offset + len(got)))
            assert [(r.key, r.value) for r in got] == model[offset : offset + len(got)]
            assert (len(got) >= 1 if offset < len(model) else got == []) and len(got) <= max_records
            assert [(r.key, r.value) for r in read_all(reader)] == model
