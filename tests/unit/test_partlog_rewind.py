"""A log that lost complete, acknowledged batches (a damaged disk, a person): offsets are never handed out twice.

The writer records the log's end in ``.high-water`` after every append; one that finds the log ending below it
bumps the rewind epoch and gives the next batch the mark as its base offset, flagged as following a gap.  Readers
serve across the gap and drop the positions they knew when the epoch changes.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from zkcoord.data.partlog import PartitionReader, PartitionWriter, WriterConfig, open_reader, open_writer
from zkcoord.data.partlog import highwater as hw
from zkcoord.data.partlog.format import ATTR_AFTER_GAP, HEADER_SIZE, parse_header
from zkcoord.data.partlog.layout import index_path, log_path, partition_dir
from zkcoord.data.partlog.rewind import LogRewound
from zkcoord.errors import CorruptLogError

CONFIG = WriterConfig(index_interval_bytes=64, fsync_on_roll=False)


def fill(tmp_path: Path, batches: int = 10, size: int = 10) -> list[int]:
    """``batches`` batches of ``size`` records ``v<i>``; return the file position where each batch starts."""
    starts = []
    with open_writer(tmp_path, "t", 0, config=CONFIG) as writer:
        for b in range(batches):
            starts.append(log_path(writer.directory, 0).stat().st_size if b else 0)
            writer.append_batch([(None, f"v{i}".encode()) for i in range(b * size, (b + 1) * size)])
    return starts


def values(reader: PartitionReader, offset: int) -> list[tuple[int, bytes]]:
    out: list[tuple[int, bytes]] = []
    while chunk := reader.read(offset, max_records=1000):
        out += [(r.offset, r.value) for r in chunk]
        offset = chunk[-1].offset + 1
    return out


@pytest.mark.parametrize("inside", [False, True], ids=["at-a-boundary", "inside-the-last-batch"])
def test_records_lost_below_the_high_water_mark_are_never_replaced_by_new_ones(tmp_path: Path, inside: bool) -> None:
    starts = fill(tmp_path)
    segment = log_path(partition_dir(tmp_path, "t", 0), 0)
    # The last complete batch (90..99, acknowledged, perhaps consumed) is cut: at its start, or in its middle.
    os.truncate(segment, starts[-1] + (7 if inside else 0))
    with open_reader(tmp_path, "t", 0) as reader:
        assert reader.end_offset() == 90
        assert reader.high_water() == 100  # a position of 100 is not out of range: records will come from it
    seen: list[LogRewound] = []
    with PartitionWriter(tmp_path, "t", 0, config=CONFIG, on_rewind=seen.append) as writer:
        assert writer.end_offset == 100
        assert writer.append_batch([(None, b"new0"), (None, b"new1")]) == (100, 101)
    assert [(r.end_offset, r.high_water, r.epoch) for r in seen] == [(90, 100, 1)]
    header = parse_header(segment.read_bytes()[starts[-1] : starts[-1] + HEADER_SIZE], 0)
    assert header.base_offset == 100 and header.attributes & ATTR_AFTER_GAP
    with open_reader(tmp_path, "t", 0) as reader:
        assert values(reader, 95) == [(100, b"new0"), (101, b"new1")]  # from inside the gap: what follows it
        assert values(reader, 100) == [(100, b"new0"), (101, b"new1")]
        assert values(reader, 0)[88:] == [(88, b"v88"), (89, b"v89"), (100, b"new0"), (101, b"new1")]
        assert reader.epoch == 1
    # A later writer neither skips again nor reports again: the mark is the end now.
    with PartitionWriter(tmp_path, "t", 0, config=CONFIG, on_rewind=seen.append) as writer:
        assert writer.append(b"later") == 102
    assert len(seen) == 1


def test_a_reader_that_knew_positions_past_the_cut_finds_the_new_records(tmp_path: Path) -> None:
    """The cut and the new appends happen between two reads of one reader: its remembered positions are stale."""
    starts = fill(tmp_path)
    with open_reader(tmp_path, "t", 0) as reader:
        assert len(values(reader, 0)) == 100
        assert reader.read(100) == []  # it remembers where the log ended, in bytes
        os.truncate(log_path(partition_dir(tmp_path, "t", 0), 0), starts[5])  # 50..99 lost
        with open_writer(tmp_path, "t", 0, config=CONFIG) as writer:
            # enough new bytes to reach past the old end: the reader's old position now lies inside new batches
            for i in range(20):
                writer.append_batch([(None, f"n{i}.{j}".encode()) for j in range(10)])
        got = values(reader, 100)
        assert [o for o, _ in got] == list(range(100, 300))
        assert got[0] == (100, b"n0.0")


def test_a_segment_deleted_under_a_live_writer_is_noticed(tmp_path: Path) -> None:
    with open_writer(tmp_path, "t", 0, config=CONFIG) as writer:
        writer.append_batch([(None, b"a"), (None, b"b")])
        log_path(writer.directory, 0).unlink()
        index_path(writer.directory, 0).unlink()
        assert writer.append(b"c") == 2  # not into the deleted file, and not over offsets 0..1
        assert [(r.end_offset, r.high_water) for r in writer.rewinds] == [(0, 2)]
    with open_reader(tmp_path, "t", 0) as reader:
        assert values(reader, 0) == [(2, b"c")]


def test_a_deleted_index_is_rebuilt_and_reads_stay_correct(tmp_path: Path) -> None:
    fill(tmp_path)
    index_path(partition_dir(tmp_path, "t", 0), 0).unlink()
    with open_reader(tmp_path, "t", 0) as reader:
        assert [o for o, _ in values(reader, 37)] == list(range(37, 100))
    with open_writer(tmp_path, "t", 0, config=CONFIG) as writer:
        assert writer.append(b"x") == 100
        assert not writer.rewinds
    assert index_path(partition_dir(tmp_path, "t", 0), 0).stat().st_size > 0


@pytest.mark.parametrize("damage", ["missing", "garbage", "short"])
def test_a_missing_or_damaged_high_water_file_means_nothing_is_known(tmp_path: Path, damage: str) -> None:
    """An older zkcoord's log has no high-water file: it reads and appends as before (no gap can be known)."""
    starts = fill(tmp_path)
    mark = hw.path(partition_dir(tmp_path, "t", 0))
    if damage == "missing":
        mark.unlink()
    else:
        mark.write_bytes(os.urandom(hw.SIZE) if damage == "garbage" else b"ZKHW")
    os.truncate(log_path(partition_dir(tmp_path, "t", 0), 0), starts[-1])
    with open_reader(tmp_path, "t", 0) as reader:
        assert reader.high_water() == 90
    with open_writer(tmp_path, "t", 0, config=CONFIG) as writer:
        assert writer.append(b"x") == 90
        assert not writer.rewinds
    assert hw.decode(mark.read_bytes()) == hw.HighWater(91, 0, -1)  # rewritten whole by the append


def test_the_high_water_record_round_trips_and_refuses_damage() -> None:
    record = hw.encode(hw.HighWater(12345, 3, 12000))
    assert len(record) == hw.SIZE
    assert hw.decode(record) == hw.HighWater(12345, 3, 12000)
    for i in range(hw.SIZE):
        damaged = bytearray(record)
        damaged[i] ^= 0x01
        assert hw.decode(bytes(damaged)) is None
    assert hw.decode(b"") is None


def test_an_older_reader_refuses_a_batch_after_a_gap_rather_than_misreading_it(tmp_path: Path) -> None:
    """Readers that do not know the gap attribute refuse it as an unknown attribute bit (the format's versioning)."""
    from zkcoord.data.partlog import format as fmt

    starts = fill(tmp_path, batches=2)
    os.truncate(log_path(partition_dir(tmp_path, "t", 0), 0), starts[-1])
    with open_writer(tmp_path, "t", 0, config=CONFIG) as writer:
        writer.append(b"after the gap")
        writer.append(b"and more")
    known = fmt._KNOWN_ATTRIBUTES
    try:
        fmt._KNOWN_ATTRIBUTES = fmt.ATTR_UNIFORM_TIMESTAMPS  # what an older reader knows
        with open_reader(tmp_path, "t", 0) as reader:
            assert len(reader.read(0)) == 10  # what precedes the gap, then a refusal, never a wrong record
            with pytest.raises(CorruptLogError, match="unknown attribute bits"):
                reader.read(10)
    finally:
        fmt._KNOWN_ATTRIBUTES = known
