"""Helpers and fixtures shared by the fetch manager tests (``test_consumer_fetcher*.py``, ``test_offset_reset.py``):
real partition logs written by hand, callback recorders, a counting reader factory, and a polling loop with a deadline.
"""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterator

import pytest

from zkcoord.consumer.fetch_state import LogReader
from zkcoord.consumer.fetcher import FetchManager
from zkcoord.consumer.records import ConsumerRecord, TopicPartition
from zkcoord.data.partlog import PartitionReader, PartitionWriter, Record
from zkcoord.data.partlog.layout import PathLike

A, B, C, D = (TopicPartition("t", p) for p in range(4))
WAIT = 10.0  # generous deadline for things that must happen; tests finish long before it when they pass


def value(tp: TopicPartition, i: int) -> bytes:
    return f"{tp}:{i}".encode()


def append(data_dir: PathLike, tp: TopicPartition, start: int, count: int, batch: int = 100) -> None:
    """Append records ``start .. start + count - 1`` of ``tp`` (values say which), in batches."""
    with PartitionWriter(data_dir, tp.topic, tp.partition) as writer:
        for first in range(start, start + count, batch):
            items = [(None, value(tp, i)) for i in range(first, min(first + batch, start + count))]
            writer.append_batch(items)


class Signal:
    """A condition that callbacks notify; tests wait on it for a predicate, with a deadline."""

    def __init__(self) -> None:
        self._cond = threading.Condition()

    def notify(self, *_: object) -> None:
        with self._cond:
            self._cond.notify_all()

    def wait_for(self, predicate: Callable[[], bool], timeout: float = WAIT) -> bool:
        with self._cond:
            return self._cond.wait_for(predicate, timeout)


class Events:
    """Records the manager's callbacks, in order, and notifies a signal."""

    def __init__(self) -> None:
        self.log: list[tuple[object, ...]] = []
        self.errors: list[tuple[TopicPartition, BaseException]] = []
        self.signal = Signal()
        self._lock = threading.Lock()

    def started(self, tp: TopicPartition, offset: int, thread: str) -> None:
        self._add(("started", tp, offset, thread))

    def stopped(self, tp: TopicPartition, offset: int, thread: str, reason: str) -> None:
        self._add(("stopped", tp, offset, thread, reason))

    def error(self, tp: TopicPartition, exc: BaseException) -> None:
        with self._lock:
            self.errors.append((tp, exc))
        self.signal.notify()

    def fetched(self, tp: TopicPartition, first: int, count: int) -> None:
        self.signal.notify()

    def of(self, kind: str) -> list[tuple[object, ...]]:
        with self._lock:
            return [e for e in self.log if e[0] == kind]

    def _add(self, event: tuple[object, ...]) -> None:
        with self._lock:
            self.log.append(event)
        self.signal.notify()


class CountingReader:
    """A real reader whose reads go through :class:`Readers` (counted, and held while its gate is closed)."""

    def __init__(self, owner: Readers, inner: PartitionReader) -> None:
        self._owner = owner
        self._inner = inner

    @property
    def start_offset(self) -> int:
        return self._inner.start_offset

    def read(self, offset: int, max_records: int = 500, max_bytes: int = 1 << 20) -> list[Record]:
        tp = TopicPartition(self._inner.topic, self._inner.partition)
        return self._owner.reading(tp, lambda: self._inner.read(offset, max_records, max_bytes))

    def end_offset(self) -> int:
        return self._inner.end_offset()

    def high_water(self) -> int:
        return self._inner.high_water()

    def close(self) -> None:
        self._inner.close()


class Readers:
    """A reader factory for the manager: counts reads per partition; while ``gate`` is clear, reads wait in it."""

    def __init__(self) -> None:
        self.reads: Counter[TopicPartition] = Counter()
        self.gate = threading.Event()
        self.gate.set()
        self.signal = Signal()
        self._inside = 0
        self.current: Counter[TopicPartition] = Counter()  # partitions being read now
        self._lock = threading.Lock()

    def __call__(self, data_dir: PathLike, topic: str, partition: int) -> LogReader:
        return CountingReader(self, PartitionReader(data_dir, topic, partition))

    def reading(self, tp: TopicPartition, read: Callable[[], list[Record]]) -> list[Record]:
        with self._lock:
            self.reads[tp] += 1
            self._inside += 1
            self.current[tp] += 1
        self.signal.notify()
        try:
            assert self.gate.wait(WAIT)
            return read()
        finally:
            with self._lock:
                self._inside -= 1
                self.current[tp] -= 1

    def total(self) -> int:
        with self._lock:
            return sum(self.reads.values())

    def inside(self) -> int:
        """Reads in progress now."""
        with self._lock:
            return self._inside


def poll_until(manager: FetchManager, count: int, timeout: float = WAIT) -> list[ConsumerRecord]:
    """Poll until ``count`` records came back (each poll returns as soon as it has any)."""
    out: list[ConsumerRecord] = []
    deadline = threading.Event()
    timer = threading.Timer(timeout, deadline.set)
    timer.start()
    try:
        while len(out) < count and not deadline.is_set():
            got = manager.poll(timeout_s=timeout, max_records=count - len(out))
            assert len(got) <= manager.max_poll_records
            out += got
    finally:
        timer.cancel()
    assert len(out) == count, f"got {len(out)} records, wanted {count}"
    return out


def by_partition(records: list[ConsumerRecord]) -> dict[TopicPartition, list[int]]:
    out: dict[TopicPartition, list[int]] = {}
    for record in records:
        out.setdefault(record.topic_partition, []).append(record.offset)
    return out


def fetcher_threads(consumer_id: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(f"fetcher-{consumer_id}")]


@pytest.fixture
def cid() -> str:
    """A consumer id of Kafka's form, unique to the test, so its fetcher threads can be found by name."""
    return f"g_host-1700000000000-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def managers(cid: str) -> Iterator[Callable[..., FetchManager]]:
    """Makes started managers; closes them after the test and checks that every fetcher thread was joined."""
    made: list[FetchManager] = []

    def make(data_dir: PathLike, **kwargs: object) -> FetchManager:
        kwargs.setdefault("idle_wait_s", 0.005)
        manager = FetchManager(data_dir, **kwargs).start()  # type: ignore[arg-type]
        made.append(manager)
        return manager

    yield make
    for manager in made:
        manager.close()
    assert fetcher_threads(cid) == []
