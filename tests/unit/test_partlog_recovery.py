"""Torn tails: what a crashed writer leaves behind, what readers see of it, and how the next writer cuts it."""

from __future__ import annotations

import os
import random
import shutil
import threading
import time
from pathlib import Path

import pytest

from zkcoord.data.partlog import (
    PartitionReader,
    PartitionWriter,
    Record,
    TailTruncation,
    WriterConfig,
    open_reader,
    open_writer,
)
from zkcoord.data.partlog.format import encode_batch, seal_batch
from zkcoord.data.partlog.layout import index_path, log_path, partition_dir
from zkcoord.errors import CorruptLogError, LogError

CONFIG = WriterConfig(index_interval_bytes=64, fsync_on_roll=False)


def value_of(i: int) -> bytes:
    return f"v{i}:".encode() * (1 + i % 5)


def key_of(i: int) -> bytes | None:
    return None if i % 2 else f"k{i}".encode()


def expected(start: int, stop: int) -> list[tuple[int, bytes | None, bytes]]:
    return [(i, key_of(i), value_of(i)) for i in range(start, stop)]


def visible(records: list[Record]) -> list[tuple[int, bytes | None, bytes]]:
    return [(r.offset, r.key, r.value) for r in records]


def read_everything(reader: PartitionReader) -> list[Record]:
    out: list[Record] = []
    while chunk := reader.read(len(out), max_records=10_000):
        out.extend(chunk)
    return out


def test_a_torn_last_batch_is_cut_at_every_byte_with_and_without_garbage(tmp_path: Path) -> None:
    source = tmp_path / "source"
    with open_writer(source, "t", 0, config=CONFIG) as writer:
        for n in (3, 1, 4, 2):
            first = writer.end_offset
            writer.append_batch([(key_of(i), value_of(i)) for i in range(first, first + n)])
        last_start = log_path(writer.directory, 0).stat().st_size
        writer.append_batch([(key_of(i), value_of(i)) for i in range(10, 15)])  # the batch to tear: 10..14
    directory = partition_dir(source, "t", 0)
    segment, index = log_path(directory, 0).read_bytes(), index_path(directory, 0).read_bytes()
    last_batch = segment[last_start:]
    damaged_copy = bytearray(last_batch)
    damaged_copy[-3] ^= 0xFF  # complete in length, failing its CRC
    rng = random.Random(7)
    garbage_kinds = [b"", b"\x00" * 9, rng.randbytes(200), bytes(damaged_copy)]

    work = tmp_path / "work"
    outcomes = {"refused": 0, "served": 0, "cut": 0}
    for cut in range(last_start, len(segment) + 1):
        for garbage in garbage_kinds:
            shutil.rmtree(work, ignore_errors=True)
            (work / "t-0").mkdir(parents=True)
            log_path(work / "t-0", 0).write_bytes(segment[:cut] + garbage)
            index_path(work / "t-0", 0).write_bytes(index)
            # What survives: the whole log if the last batch is complete, else everything before it.
            intact_size, intact_end = (len(segment), 15) if cut == len(segment) else (last_start, 10)
            tail = cut + len(garbage) - intact_size

            # A reader before any recovery: never a torn record; damage it cannot explain is an error.
            with open_reader(work, "t", 0) as reader:
                try:
                    seen = read_everything(reader)
                    end = reader.end_offset()
                except CorruptLogError:
                    assert garbage, "a torn prefix alone must read as the end of the log"
                    outcomes["refused"] += 1
                else:
                    outcomes["served"] += 1
                    assert visible(seen) == expected(0, intact_end)
                    assert end == intact_end

            with open_writer(work, "t", 0, config=CONFIG) as writer:
                assert writer.end_offset == intact_end
                assert writer.append(b"new", key=b"n") == intact_end
            assert writer.recovered_bytes == tail
            cuts = [(c.position, c.bytes_cut, c.end_offset) for c in writer.truncations]
            assert cuts == ([(intact_size, tail, intact_end)] if tail else [])
            outcomes["cut"] += bool(cuts)
            with open_reader(work, "t", 0) as reader:
                assert visible(read_everything(reader)) == [*expected(0, intact_end), (intact_end, b"n", b"new")]
    assert min(outcomes.values()) > 0, outcomes


def test_a_reader_sees_a_batch_being_written_only_once_it_is_complete(tmp_path: Path) -> None:
    with open_writer(tmp_path, "t", 0, config=CONFIG) as writer:
        writer.append_batch([(key_of(i), value_of(i)) for i in range(6)])
        end = log_path(writer.directory, 0).stat().st_size
    pending = encode_batch([key_of(i) for i in range(6, 9)], [value_of(i) for i in range(6, 9)], [1, 2, 3])
    seal_batch(pending, 6)
    path = log_path(partition_dir(tmp_path, "t", 0), 0)
    with open_reader(tmp_path, "t", 0) as reader:
        assert reader.read(6) == []
        with open(path, "r+b") as f:
            # Append the next batch a byte at a time, as a slow write() would: only complete batches are served.
            for i in range(len(pending)):
                f.seek(end + i)
                f.write(pending[i : i + 1])
                f.flush()
                complete = i == len(pending) - 1
                assert reader.end_offset() == (9 if complete else 6)
                assert visible(reader.read(5)) == expected(5, 9 if complete else 6)
                assert [len(b) for b in reader.read_batches(6)] == ([3] if complete else [])


def test_recovery_happens_under_the_lock_when_another_writer_crashed(tmp_path: Path) -> None:
    """A live writer notices that someone appended a torn batch since its last append and cuts it."""
    seen: list[TailTruncation] = []
    with PartitionWriter(tmp_path, "t", 0, config=CONFIG, on_truncation=seen.append) as writer:
        writer.append(b"a")
        with open_writer(tmp_path, "t", 0, config=CONFIG) as other:
            other.append(b"b")
        batch = encode_batch([None], [b"torn"], [1])
        seal_batch(batch, 2)
        with open(log_path(writer.directory, 0), "ab") as f:
            f.write(batch[:-2])  # the other writer "crashed" inside its next append
        assert writer.append(b"c") == 2
        assert writer.truncations == seen
    assert [(c.bytes_cut, c.end_offset, c.reason) for c in seen] == [(len(batch) - 2, 2, "incomplete batch")]
    with open_reader(tmp_path, "t", 0) as reader:
        assert [r.value for r in reader.read(0)] == [b"a", b"b", b"c"]


def test_a_failed_write_leaves_nothing_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_pwrite = os.pwrite

    def half_then_fail(fd: int, data: bytes, offset: int) -> int:
        monkeypatch.setattr(os, "pwrite", disk_full)
        return real_pwrite(fd, bytes(data)[: len(data) // 2], offset)

    def disk_full(fd: int, data: bytes, offset: int) -> int:
        raise OSError(28, "No space left on device")

    with open_writer(tmp_path, "t", 0, config=CONFIG) as writer:
        writer.append(b"kept")
        monkeypatch.setattr(os, "pwrite", half_then_fail)
        with pytest.raises(LogError, match="No space left"):
            writer.append(b"lost" * 100)
        monkeypatch.setattr(os, "pwrite", real_pwrite)
        assert writer.append(b"next") == 1
    with open_reader(tmp_path, "t", 0) as reader:
        assert [r.value for r in reader.read(0)] == [b"kept", b"next"]


def test_a_reader_keeps_up_with_a_writer_thread(tmp_path: Path) -> None:
    total = 3_000
    config = WriterConfig(segment_bytes=8192, index_interval_bytes=512, fsync_on_roll=False)
    failure: list[BaseException] = []

    def produce() -> None:
        try:
            with open_writer(tmp_path, "t", 0, config=config) as writer:
                i = 0
                while i < total:
                    n = min(1 + i % 7, total - i)
                    writer.append_batch([(key_of(j), value_of(j)) for j in range(i, i + n)])
                    i += n
        except BaseException as e:  # noqa: BLE001 - handed to the test thread, which fails with it
            failure.append(e)

    producer = threading.Thread(target=produce, name="producer")
    producer.start()
    got: list[Record] = []
    deadline = time.monotonic() + 30
    with open_reader(tmp_path, "t", 0) as reader:
        while len(got) < total and time.monotonic() < deadline and not failure:
            got.extend(reader.read(len(got), max_records=97))
    producer.join(timeout=30)
    assert not failure
    assert visible(got) == expected(0, total)


def test_a_crash_right_after_a_roll_leaves_an_empty_segment_that_works(tmp_path: Path) -> None:
    config = WriterConfig(segment_bytes=200, index_interval_bytes=64, fsync_on_roll=False)
    with open_writer(tmp_path, "t", 0, config=config) as writer:
        for i in range(3):
            writer.append(value_of(i), key=key_of(i))
        end = writer.end_offset
    directory = partition_dir(tmp_path, "t", 0)
    log_path(directory, end).touch()  # the dying writer created the next segment and nothing else
    with open_reader(tmp_path, "t", 0) as reader:
        assert reader.end_offset() == end
        assert visible(read_everything(reader)) == expected(0, end)
    with open_writer(tmp_path, "t", 0, config=config) as writer:
        assert (writer.end_offset, writer.truncations) == (end, [])
        writer.append(value_of(end), key=key_of(end))
    assert index_path(directory, end).exists()
    with open_reader(tmp_path, "t", 0) as reader:
        assert visible(read_everything(reader)) == expected(0, end + 1)


@pytest.mark.parametrize(("torn_size", "appended_after_the_cut"), [(2000, 1), (2000, 40), (3 << 20, 1)])
def test_a_reader_that_saw_a_torn_tail_sees_what_replaced_it(
    tmp_path: Path, torn_size: int, appended_after_the_cut: int
) -> None:
    """A reader's read-ahead may hold a torn tail that a writer then cuts and overwrites: it must not be fooled."""
    with open_writer(tmp_path, "t", 0, config=CONFIG) as writer:
        for i in range(6):
            writer.append(value_of(i), key=key_of(i))
    torn = encode_batch([None], [b"x" * torn_size], [1])
    seal_batch(torn, 6)
    with open(log_path(partition_dir(tmp_path, "t", 0), 0), "ab") as f:
        f.write(torn[:1000])
    with open_reader(tmp_path, "t", 0) as reader:
        assert visible(reader.read(0)) == expected(0, 6)  # its read-ahead now holds the torn prefix
        assert reader.end_offset() == 6
        with open_writer(tmp_path, "t", 0, config=CONFIG) as writer:
            assert writer.recovered_bytes == 1000
            for i in range(6, 6 + appended_after_the_cut):
                writer.append(value_of(i), key=key_of(i))
        assert visible(reader.read(6, max_records=1)) == expected(6, 7)  # where the stale read-ahead starts
        assert reader.end_offset() == 6 + appended_after_the_cut
        assert visible(read_everything(reader)) == expected(0, 6 + appended_after_the_cut)
