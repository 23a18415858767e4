"""Helpers shared by the partition log tests (``test_partlog*.py``): a tiny segment config, deterministic records,
and readers' results checked against them.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

from zkcoord.data.partlog import PartitionReader, PartitionWriter, Record, WriterConfig

#: Tiny segments and a dense index, so that a few records exercise rolls and index lookups.
TINY = WriterConfig(segment_bytes=600, index_interval_bytes=100, fsync_on_roll=False)


def counting_clock(start: int = 1_700_000_000_000) -> Callable[[], int]:
    counter = itertools.count(start)
    return lambda: next(counter)


def value_of(i: int) -> bytes:
    return f"value-{i}-".encode() * (1 + i % 7)


def key_of(i: int) -> bytes | None:
    return None if i % 3 == 0 else f"key-{i}".encode()


def fill(writer: PartitionWriter, count: int, batch: int = 1) -> None:
    """Append records ``writer.end_offset .. + count`` (key/value from their offset), in batches of ``batch``."""
    i = writer.end_offset
    stop = i + count
    while i < stop:
        n = min(batch, stop - i)
        first, last = writer.append_batch([(key_of(j), value_of(j)) for j in range(i, i + n)])
        assert (first, last) == (i, i + n - 1)
        i += n


def read_all(reader: PartitionReader, start: int = 0, **limits: int) -> list[Record]:
    out: list[Record] = []
    offset = start
    while chunk := reader.read(offset, **limits):
        assert chunk[0].offset == offset
        out.extend(chunk)
        offset = chunk[-1].offset + 1
    return out


def check_records(records: list[Record], start: int, stop: int) -> None:
    assert [r.offset for r in records] == list(range(start, stop))
    for r in records:
        assert (r.key, r.value) == (key_of(r.offset), value_of(r.offset))
