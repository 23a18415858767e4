"""Looking up a partition log by time: Kafka's ``offsetsForTimes`` over :class:`PartitionReader`.

Every record carries a timestamp (ms since the epoch, set by its producer or the writer's clock) and every batch
header its greatest one (``max_ts``), so a lookup skips whole batches without decoding a record and decodes only the
batch where the answer lies.  The log keeps no time index (``docs/partition-log.md``): a lookup reads the batch
headers from the log's start, so its cost grows with the log (about a second per GiB read from the page cache).

Timestamps need not grow with offsets (a producer may set any), so the answer is Kafka's: the *first* offset whose
record's timestamp is at or after the time asked, not the first after the last record before it.

Runs on the caller's thread; blocks on file reads only.
"""

from __future__ import annotations

from zkcoord.data.partlog.reader import PartitionReader

#: How much one read of batches may bring in (headers are all it looks at, for most batches).
_CHUNK = 4 * 1024 * 1024


def offset_for_time(reader: PartitionReader, timestamp_ms: int) -> int | None:
    """The first offset, from the log's start, whose record has a timestamp at or after ``timestamp_ms``; ``None``
    when no record of the log has one (Kafka then answers the log's end: the caller decides).

    :raises CorruptLogError: a batch on the way is damaged (:meth:`PartitionReader.read_batches`).
    :raises LogError: a segment file could not be opened.
    """
    offset = reader.start_offset
    while True:
        batches = reader.read_batches(offset, _CHUNK)
        if not batches:
            return None
        for batch in batches:
            if batch.max_timestamp_ms >= timestamp_ms:
                for record in batch.records():
                    if record.timestamp_ms >= timestamp_ms:
                        return record.offset
            offset = batch.next_offset
