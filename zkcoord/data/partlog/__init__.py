"""The partition log: the data plane of zkcoord, one append-only log per topic partition on local disk.

``<data_dir>/<topic>-<partition>/`` holds segments of CRC-checked record batches and a sparse offset index per
segment.  Producers in any number of processes append through :class:`PartitionWriter` (serialised per batch by a
``flock``); fetchers read through :class:`PartitionReader`, lock-free.  The format, the crash-recovery argument and
the concurrency rules are in ``docs/partition-log.md``.

Example::

    with PartitionWriter(data_dir, "orders", 0) as writer:
        first, last = writer.append_batch([(b"k", b"v1"), (None, b"v2")])
    with PartitionReader(data_dir, "orders", 0) as reader:
        for record in reader.read(first):
            print(record.offset, record.key, record.value)
"""

from zkcoord.data.partlog.config import BatchItem, WriterConfig, wall_clock_ms
from zkcoord.data.partlog.format import Record, RecordBatch, RecordTooLargeError
from zkcoord.data.partlog.layout import list_partitions, partition_dir
from zkcoord.data.partlog.reader import PartitionReader, log_offsets, open_reader
from zkcoord.data.partlog.recovery import TailTruncation
from zkcoord.data.partlog.writer import PartitionWriter, open_writer

__all__ = [
    "BatchItem",
    "PartitionReader",
    "PartitionWriter",
    "Record",
    "RecordBatch",
    "RecordTooLargeError",
    "TailTruncation",
    "WriterConfig",
    "list_partitions",
    "log_offsets",
    "open_reader",
    "open_writer",
    "partition_dir",
    "wall_clock_ms",
]
