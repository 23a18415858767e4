"""The producer: spreads records over a topic's partitions and appends them to the partition logs.

Partitioning is Kafka 0.8's ``DefaultPartitioner`` for keyed records (``abs(key.hashCode) % partitions`` with Java's
``String.hashCode``) and round-robin for records without a key.  Records are appended in batches per partition; each
appended batch is journalled as an offset range (``produce.batch``), which is what the verdict later compares
consumption against.

The topic's partition count is followed through a data watch, so a producer running while the topic grows starts
writing to the new partitions (the watch callback only stores the new count).

Threads: :meth:`Producer.run` runs on the caller's thread; the watch callback runs on kazoo's watch thread.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from zkcoord.data.partlog import PartitionWriter
from zkcoord.data.partlog.rewind import LogRewound
from zkcoord.errors import CodecError, ConfigurationError, NoNodeError, TopicNotFoundError
from zkcoord.layout import paths
from zkcoord.layout.registrations import TopicAssignment
from zkcoord.protocol.hashing import partition_for_key
from zkcoord.runtime.journal import Journal
from zkcoord.zk import Stat, ZkClient

MAX_RECORD_SIZE = 1 << 20

#: Bytes a value needs to hold its whole ``producer:<n>:`` head, whatever ``n`` (journalled records are read back)
RECORD_HEAD = 32


@dataclass(frozen=True, slots=True)
class ProduceConfig:
    """What to produce.  Validates itself; raises :class:`ConfigurationError`.

    :param count: records to produce; ``None`` means until stopped.
    :param rate: records per second; ``None`` means as fast as possible.
    :param size: value size in bytes.
    :param keys: number of distinct keys (``key-0`` ...); 0 means no keys (round-robin).
    :param batch: records per appended batch at most.
    :param journal_records: also journal each batch's records one by one (``produce.records``: keys and numbers),
        the evidence S8's expected aggregate is built from; a value must then hold its whole ``<role>:<n>:`` head.
    """

    topic: str
    count: int | None = 1000
    rate: float | None = None
    size: int = 100
    keys: int = 0
    batch: int = 100
    journal_records: bool = False

    def __post_init__(self) -> None:
        if self.count is not None and self.count < 0:
            raise ConfigurationError(f"count must not be negative, got {self.count}")
        if self.rate is not None and not 0 < self.rate <= 10_000_000:
            raise ConfigurationError(f"rate must be within (0, 10000000] records/s, got {self.rate}")
        if not 1 <= self.size <= MAX_RECORD_SIZE:
            raise ConfigurationError(f"size must be within 1..{MAX_RECORD_SIZE} bytes, got {self.size}")
        if not 0 <= self.keys <= 1_000_000:
            raise ConfigurationError(f"keys must be within 0..1000000, got {self.keys}")
        if not 1 <= self.batch <= 100_000:
            raise ConfigurationError(f"batch must be within 1..100000, got {self.batch}")
        if self.journal_records and self.size < RECORD_HEAD:
            # the number journalled must be readable from the value by the application that sums it
            raise ConfigurationError(f"--journal-records needs a size of at least {RECORD_HEAD} bytes, got {self.size}")


@dataclass(slots=True)
class ProduceStats:
    records: int = 0
    bytes: int = 0
    batches: int = 0
    seconds: float = 0.0

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0

    @property
    def mb_per_s(self) -> float:
        return self.bytes / self.seconds / 1e6 if self.seconds > 0 else 0.0


class Producer:
    """Produces records to one topic.  Use :meth:`start`, :meth:`run` (blocks), :meth:`close`."""

    def __init__(
        self,
        zk: ZkClient,
        data_dir: Path,
        config: ProduceConfig,
        journal: Journal | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
    ) -> None:
        self.zk = zk
        self.data_dir = data_dir
        self.config = config
        self.journal = journal or Journal(None, "producer")
        self._clock = clock
        self._wall_ms = wall_ms
        self._partitions = 0
        self._writers: dict[int, PartitionWriter] = {}
        self._rr = 0
        self.stats = ProduceStats()

    @property
    def partitions(self) -> int:
        return self._partitions

    def start(self) -> Producer:
        """Read the topic and follow its partition count.  :raises TopicNotFoundError, CodecError:"""
        path = paths.topic(self.config.topic)
        found = threading.Event()

        def on_topic(data: bytes | None, _stat: Stat | None) -> None:
            # kazoo's watch thread: decode (pure CPU) and store; never block here.
            if data is None:
                found.set()
                return
            try:
                count = TopicAssignment.decode(data, path).partition_count
            except CodecError:
                found.set()
                return
            # Partitions only grow; a smaller count is a malformed write and is ignored.
            self._partitions = max(self._partitions, count)
            found.set()

        self.zk.watch_data(path, on_topic)
        found.wait(timeout=self.zk.config.connect_timeout_s)
        if self._partitions == 0:
            data, _ = self._read_topic(path)
            self._partitions = TopicAssignment.decode(data, path).partition_count
        return self

    def _read_topic(self, path: str) -> tuple[bytes, Stat]:
        try:
            return self.zk.get(path)
        except NoNodeError as e:
            raise TopicNotFoundError(self.config.topic) from e

    def _writer(self, partition: int) -> PartitionWriter:
        writer = self._writers.get(partition)
        if writer is None:
            writer = PartitionWriter(self.data_dir, self.config.topic, partition, on_rewind=self._rewound).open()
            if writer.recovered_bytes:
                self.journal.emit(
                    "log.recovered", topic=self.config.topic, partition=partition, bytes_cut=writer.recovered_bytes
                )
            self._writers[partition] = writer
        return writer

    def _rewound(self, rewound: LogRewound) -> None:
        """The writer found records lost below the log's high-water mark (under the partition lock: quick)."""
        self.journal.emit(
            "log.rewound",
            topic=self.config.topic,
            partition=int(rewound.directory.name.rsplit("-", 1)[1]),
            end_offset=rewound.end_offset,
            high_water=rewound.high_water,
            epoch=rewound.epoch,
        )

    def _value(self, seq: int) -> bytes:
        head = f"{self.journal.role}:{seq}:".encode()
        size = self.config.size
        return (head + b"x" * max(0, size - len(head)))[:size] if size >= len(head) else head[:size]

    def _partition_of(self, key: str | None) -> int:
        n = self._partitions
        if key is None:
            self._rr = (self._rr + 1) % n
            return self._rr
        return partition_for_key(key, n)

    def run(self, stop: threading.Event | None = None, progress: Callable[[ProduceStats], None] | None = None) -> None:
        """Produce until ``count`` records are written or ``stop`` is set.  Blocks the calling thread."""
        stop = stop or threading.Event()
        cfg = self.config
        self.journal.emit(
            "produce.started",
            topic=cfg.topic,
            partitions=self._partitions,
            count=cfg.count,
            rate=cfg.rate,
            size=cfg.size,
            keys=cfg.keys,
        )
        started = self._clock()
        # Under a rate limit, batches are small enough that records leave within ~20 ms of their due time.
        batch = cfg.batch if cfg.rate is None else max(1, min(cfg.batch, int(cfg.rate / 50)))
        seq = 0
        last_progress = started
        while not stop.is_set() and (cfg.count is None or seq < cfg.count):
            n = batch if cfg.count is None else min(batch, cfg.count - seq)
            pending: dict[int, list[tuple[bytes | None, bytes]]] = {}
            numbers: dict[int, list[tuple[str | None, int]]] = {}
            for i in range(seq, seq + n):
                key = f"key-{i % cfg.keys}" if cfg.keys else None
                partition = self._partition_of(key)
                pending.setdefault(partition, []).append((key.encode() if key is not None else None, self._value(i)))
                numbers.setdefault(partition, []).append((key, i))
            now_ms = self._wall_ms()
            for partition, records in sorted(pending.items()):
                first, last = self._writer(partition).append_batch(records, timestamp_ms=now_ms)
                size = sum(len(v) + (len(k) if k else 0) for k, v in records)
                self.stats.batches += 1
                self.stats.bytes += size
                self.journal.emit(
                    "produce.batch",
                    topic=cfg.topic,
                    partition=partition,
                    first=first,
                    last=last,
                    count=len(records),
                    bytes=size,
                )
                if cfg.journal_records:
                    self.journal.emit(
                        "produce.records",
                        topic=cfg.topic,
                        partition=partition,
                        first=first,
                        keys=[k for k, _ in numbers[partition]],
                        values=[v for _, v in numbers[partition]],
                    )
            seq += n
            self.stats.records = seq
            now = self._clock()
            self.stats.seconds = now - started
            if progress is not None and now - last_progress >= 0.5:
                last_progress = now
                progress(self.stats)
            if cfg.rate is not None:
                due = started + seq / cfg.rate
                if due > now:
                    stop.wait(due - now)
        self.stats.seconds = self._clock() - started
        self.journal.emit(
            "produce.finished",
            topic=cfg.topic,
            count=self.stats.records,
            seconds=round(self.stats.seconds, 3),
            records_per_s=round(self.stats.records_per_s, 1),
            mb_per_s=round(self.stats.mb_per_s, 3),
        )

    def close(self) -> None:
        """Flush and close every partition writer (idempotent)."""
        writers, self._writers = self._writers, {}
        for writer in writers.values():
            writer.close()
