"""The consumer's data plane on real partition logs: poll() limits and KIP-41 fairness, exactly-once delivery across
revoke/assign cycles, synchronous revoke, pause/resume and the lease gate (S6), bounded prefetching, growing logs,
damaged logs, wakeup and close.  No ZooKeeper, no sleeping: tests wait on conditions with deadlines.
"""

from __future__ import annotations

import math
import tempfile
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.test_consumer_lease import FakeClock
from zkcoord.consumer.fetch_state import FetchCore, LogReader, PartitionFetch
from zkcoord.consumer.fetcher import FetchManager
from zkcoord.consumer.lease import Lease
from zkcoord.consumer.records import ConsumerRecord, TopicPartition
from zkcoord.data.partlog import PartitionReader, PartitionWriter, Record, WriterConfig, partition_dir
from zkcoord.data.partlog.format import HEADER_SIZE
from zkcoord.data.partlog.layout import PathLike, log_path
from zkcoord.errors import ConfigurationError, CorruptLogError, OffsetOutOfRangeError

A, B, C, D = (TopicPartition("t", p) for p in range(4))
WAIT = 10.0  # generous deadline for things that must happen; tests finish long before it when they pass


# --- helpers -------------------------------------------------------------------------------------------------------


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


# --- poll(): limits and KIP-41 fairness ----------------------------------------------------------------------------


def test_poll_returns_at_most_max_poll_records_and_max_records(
    tmp_path: Path, cid: str, managers: Callable[..., FetchManager]
) -> None:
    append(tmp_path, A, 0, 50, batch=13)
    manager = managers(tmp_path, max_poll_records=7)
    manager.assign({A: (0, f"{cid}-0")})
    sizes = []
    records: list[ConsumerRecord] = []
    while len(records) < 50:
        got = manager.poll(WAIT, max_records=3 if len(records) < 20 else None)
        assert 1 <= len(got) <= (3 if len(records) < 20 else 7)
        sizes.append(len(got))
        records += got
    assert [r.offset for r in records] == list(range(50))
    assert [r.value for r in records] == [value(A, i) for i in range(50)]
    assert manager.poll(0.0) == []  # nothing left: a zero timeout does not wait
    assert manager.positions() == {A: 50}
    with pytest.raises(ValueError, match="positive"):
        manager.poll(0.0, max_records=0)


@pytest.mark.parametrize("same_thread", [True, False], ids=["one-fetcher", "two-fetchers"])
@pytest.mark.parametrize("big", [A, B], ids=["big-first", "big-second"])
def test_a_small_partition_is_served_within_the_first_two_polls(
    tmp_path: Path, cid: str, managers: Callable[..., FetchManager], same_thread: bool, big: TopicPartition
) -> None:
    """KIP-41: with max_poll_records=10, 10 000 records in one partition cannot keep 10 in another waiting."""
    small = B if big == A else A
    append(tmp_path, big, 0, 10_000, batch=100)
    append(tmp_path, small, 0, 10)
    manager = managers(tmp_path, max_poll_records=10)
    manager.assign({big: (0, f"{cid}-0"), small: (0, f"{cid}-0" if same_thread else f"{cid}-1")})
    first, second = manager.poll(WAIT), manager.poll(WAIT)
    assert by_partition(first + second)[small] == list(range(10))
    assert len(first) == len(second) == 10
    rest = poll_until(manager, 30)
    assert by_partition(rest) == {big: list(range(10, 40))}


def make_record(tp: TopicPartition, offset: int) -> ConsumerRecord:
    return ConsumerRecord(tp.topic, tp.partition, offset, 0, None, b"")


def test_poll_takes_greedily_in_round_robin_from_after_the_partition_it_ended_on() -> None:
    """The drain order itself, on hand-filled buffers (no threads): the seed's greedy round robin."""
    core = FetchCore(max_poll=10, max_buffered=100, idle_wait=0.01, clock=lambda: 0.0, gate=lambda: True)
    states = {tp: PartitionFetch(tp, "c-0", 0, 0) for tp in (A, B, C, D)}
    for tp, count in ((A, 25), (B, 3), (D, 7)):
        for start in range(0, count, 4):  # several fetched chunks per partition
            states[tp].buffer.append([make_record(tp, i) for i in range(start, min(start + 4, count))])
    core.install(states, {"c-0": core.new_fetcher("c-0")})
    core.retained = 35

    def take() -> list[tuple[TopicPartition, int]]:
        with core.lock:
            return [(r.topic_partition, len(offsets)) for r, offsets in group(core.take(10))]

    assert take() == [(A, 10)]  # greedy: all of the limit from the first partition with data
    assert take() == [(B, 3), (D, 7)]  # from after A; C has nothing
    assert take() == [(A, 10)]  # from after D, around to A
    assert take() == [(A, 5)]  # from after A: B, C, D are empty, A has what is left
    assert {tp: s.consumed for tp, s in states.items()} == {A: 25, B: 3, C: 0, D: 7}
    assert core.retained == 0
    assert core.delivered_by_partition == Counter({A: 25, B: 3, D: 7})


def test_poll_returns_when_the_records_were_handed_out_read_before_the_gate() -> None:
    """``records.consumed`` is journalled with this time: read under the lock just before the gate let the records
    out, it is never after the deadline the gate enforces, however long the gate check itself takes."""
    now = [100.0]
    deadline = 100.002

    def slow_gate() -> bool:  # checks, then the clock moves on (a thread switch inside the check)
        valid = now[0] < deadline
        now[0] += 0.005
        return valid

    core = FetchCore(max_poll=10, max_buffered=100, idle_wait=0.01, clock=lambda: now[0], gate=slow_gate)
    state = PartitionFetch(A, "c-0", 0, 0)
    state.buffer.append([make_record(A, i) for i in range(3)])
    core.install({A: state}, {"c-0": core.new_fetcher("c-0")})
    core.retained = 3
    records, handed_at = core.poll(10, now[0] + 1)
    assert len(records) == 3 and handed_at == 100.0 < deadline < now[0]
    # Past the deadline the gate stays shut: nothing is handed out, whenever the poll gives up.
    state.buffer.append([make_record(A, 3)])
    core.retained = 1
    assert core.poll(10, now[0])[0] == []


def group(records: list[ConsumerRecord]) -> list[tuple[ConsumerRecord, list[int]]]:
    """Consecutive runs of one partition: (first record, offsets)."""
    runs: list[tuple[ConsumerRecord, list[int]]] = []
    for record in records:
        if runs and runs[-1][0].topic_partition == record.topic_partition:
            runs[-1][1].append(record.offset)
        else:
            runs.append((record, [record.offset]))
    return runs


# --- exactly once, in order, across revoke/assign cycles -----------------------------------------------------------


@settings(max_examples=25, deadline=None)
@given(
    initial=st.lists(st.lists(st.integers(1, 40), max_size=4), min_size=1, max_size=3),
    max_poll=st.integers(1, 25),
    max_buffered=st.one_of(st.none(), st.integers(1, 30)),
    cycles=st.lists(st.tuples(st.integers(0, 4), st.integers(0, 30)), min_size=1, max_size=4),
    threads=st.integers(1, 2),
)
def test_every_record_is_delivered_once_in_order_across_revoke_and_assign(
    initial: list[list[int]],
    max_poll: int,
    max_buffered: int | None,
    cycles: list[tuple[int, int]],
    threads: int,
) -> None:
    """Each cycle assigns from the positions the last revoke returned, polls a few times, revokes, and appends more.
    A final cycle drains: every record comes back exactly once, in offset order per partition (S3, S4).
    """
    partitions = [TopicPartition("t", p) for p in range(len(initial))]
    written = dict.fromkeys(partitions, 0)
    delivered: dict[TopicPartition, list[ConsumerRecord]] = {tp: [] for tp in partitions}
    with tempfile.TemporaryDirectory() as data_dir:
        for tp, batches in zip(partitions, initial, strict=True):
            for size in batches:
                append(data_dir, tp, written[tp], size, batch=size)
                written[tp] += size
        positions = dict.fromkeys(partitions, 0)
        with FetchManager(
            data_dir, max_poll_records=max_poll, max_buffered_records=max_buffered, idle_wait_s=0.002
        ) as manager:
            for i, (polls, appended) in enumerate([*cycles, (-1, 0)]):
                manager.assign({tp: (positions[tp], f"c-{tp.partition % threads}") for tp in partitions})
                done = 0
                while (polls < 0 or done < polls) and sum(written.values()) > sum(map(len, delivered.values())):
                    got = manager.poll(WAIT)
                    assert 1 <= len(got) <= max_poll
                    for record in got:
                        delivered[record.topic_partition].append(record)
                    done += 1
                positions = manager.revoke("cycle")
                assert positions == {tp: len(delivered[tp]) for tp in partitions}
                stats = manager.stats()
                assert stats.retained == 0
                assert stats.records_fetched == stats.records_delivered + stats.records_dropped
                tp = partitions[i % len(partitions)]
                append(data_dir, tp, written[tp], appended, batch=7)
                written[tp] += appended
    for tp in partitions:
        assert [r.offset for r in delivered[tp]] == list(range(written[tp]))
        assert [r.value for r in delivered[tp]] == [value(tp, i) for i in range(written[tp])]


# --- revoke is synchronous -----------------------------------------------------------------------------------------


def test_revoke_waits_for_a_read_in_progress_and_nothing_is_read_or_returned_after_it(
    tmp_path: Path, cid: str, managers: Callable[..., FetchManager]
) -> None:
    append(tmp_path, A, 0, 100)
    append(tmp_path, B, 0, 100)
    readers, events = Readers(), Events()
    manager = managers(
        tmp_path, max_poll_records=10, reader_factory=readers, on_started=events.started, on_stopped=events.stopped
    )
    manager.assign({A: (0, f"{cid}-0"), B: (0, f"{cid}-1")})
    polled = poll_until(manager, 25)
    readers.gate.clear()  # from now on a read stops inside the reader
    while not readers.inside():  # take what is buffered until a fetcher wants more and is caught reading
        polled += manager.poll(0.01)

    revoked: dict[TopicPartition, int] = {}
    done = threading.Event()

    def revoke() -> None:
        revoked.update(manager.revoke("stop-fetcher"))
        done.set()

    revoker = threading.Thread(target=revoke)
    revoker.start()
    assert not done.wait(0.2), "revoke returned while a fetcher was still reading"
    readers.gate.set()
    assert done.wait(WAIT)
    revoker.join()

    consumed = by_partition(polled)
    assert revoked == {tp: len(consumed.get(tp, [])) for tp in (A, B)}
    assert fetcher_threads(cid) == []
    reads = readers.total()
    append(tmp_path, A, 100, 50)
    assert manager.poll(0.1) == []
    assert readers.total() == reads
    assert manager.positions() == {} and manager.assignment() == {}
    stopped = events.of("stopped")
    assert sorted(stopped) == sorted(
        ("stopped", tp, revoked[tp], t, "stop-fetcher") for tp, t in zip((A, B), (f"{cid}-0", f"{cid}-1"), strict=True)
    )
    stats = manager.stats()
    assert stats.records_delivered == len(polled)
    assert stats.records_fetched == stats.records_delivered + stats.records_dropped
    assert manager.revoke("again") == {}  # idempotent
    assert len(events.of("stopped")) == 2


def test_revoke_some_stops_only_those_partitions_and_waits_for_their_read_in_progress(
    tmp_path: Path, cid: str, managers: Callable[..., FetchManager]
) -> None:
    for tp in (A, B, C):
        append(tmp_path, tp, 0, 100)
    readers, events = Readers(), Events()
    manager = managers(
        tmp_path, max_poll_records=10, reader_factory=readers, on_started=events.started, on_stopped=events.stopped
    )
    # A alone on thread 0; B and C share thread 1.
    manager.assign({A: (0, f"{cid}-0"), B: (0, f"{cid}-1"), C: (0, f"{cid}-1")})
    polled = poll_until(manager, 30)
    readers.gate.clear()
    while not readers.inside():
        polled += manager.poll(0.01)

    revoked: dict[TopicPartition, int] = {}
    done = threading.Event()

    def revoke() -> None:
        revoked.update(manager.revoke_some([A, B, D], "stop-fetcher"))  # D is not assigned: ignored
        done.set()

    with readers._lock:
        held = {tp for tp, n in readers.current.items() if n}
    revoker = threading.Thread(target=revoke)
    revoker.start()
    if held & {A, B}:
        assert not done.wait(0.2), "revoke_some returned while one of its partitions was being read"
    readers.gate.set()
    assert done.wait(WAIT)
    revoker.join()
    consumed = by_partition(polled)
    assert revoked == {tp: len(consumed.get(tp, [])) for tp in (A, B)}
    assert manager.assignment() == {C: f"{cid}-1"}
    assert [t.name for t in fetcher_threads(cid)] == [f"fetcher-{cid}-1"]  # thread 0 had nothing left: joined
    assert {e[1] for e in events.of("stopped")} == {A, B}
    assert len(events.of("stopped")) == 2
    # C goes on from where it was; A and B are never handed out again.
    rest = poll_until(manager, 100 - len(consumed.get(C, [])))
    assert {r.topic_partition for r in rest} == {C}
    assert [r.offset for r in rest] == list(range(len(consumed.get(C, [])), 100))
    stats = manager.stats()
    assert stats.records_fetched == stats.records_delivered + stats.records_dropped + stats.retained
    # Extending again with a revoked partition resumes it from the position given.
    manager.extend({A: (revoked[A], f"{cid}-0")})
    again = poll_until(manager, 100 - revoked[A])
    assert [r.offset for r in again] == list(range(revoked[A], 100))


def test_one_fetcher_thread_per_consumer_thread_id(
    tmp_path: Path, cid: str, managers: Callable[..., FetchManager]
) -> None:
    events = Events()
    manager = managers(tmp_path, on_started=events.started)
    owners = {A: f"{cid}-0", B: f"{cid}-1", C: f"{cid}-0", D: f"{cid}-1"}
    manager.assign({tp: (0, thread) for tp, thread in owners.items()})
    assert sorted(t.name for t in fetcher_threads(cid)) == [f"fetcher-{cid}-0", f"fetcher-{cid}-1"]
    assert sorted(events.of("started")) == sorted(("started", tp, 0, thread) for tp, thread in owners.items())
    assert manager.assignment() == owners
    with pytest.raises(RuntimeError, match="revoke"):
        manager.assign({A: (0, f"{cid}-2")})
    manager.revoke("rebalance")
    assert fetcher_threads(cid) == []


# --- pause, resume and the lease gate (S6) -------------------------------------------------------------------------


def test_the_lease_gates_reading_and_delivery_and_pause_rewinds_to_the_consumed_position(
    tmp_path: Path, cid: str, managers: Callable[..., FetchManager]
) -> None:
    append(tmp_path, A, 0, 30)
    clock = FakeClock()
    lease = Lease(1.0, clock=clock)
    readers, events = Readers(), Events()
    manager = managers(
        tmp_path,
        max_poll_records=10,
        gate=lease.valid,
        reader_factory=readers,
        on_started=events.started,
        on_stopped=events.stopped,
        on_fetched=events.fetched,
    )
    thread = f"{cid}-0"
    manager.assign({A: (0, thread)})
    assert manager.poll(0.05) == []  # never renewed: no record,
    assert readers.total() == 0  # and no read

    lease.renew(clock())
    assert [r.offset for r in manager.poll(WAIT)] == list(range(10))
    assert events.signal.wait_for(lambda: manager.retained() == 10)  # prefetched the next poll's worth

    clock.advance(1.0)  # the lease runs out before the consumer notices
    assert manager.poll(0.05) == []  # S6: buffered records are not handed out
    assert manager.positions() == {A: 10}

    manager.pause("lease expired")
    assert events.of("stopped") == [("stopped", A, 10, thread, "lease expired")]
    assert manager.buffered() == {A: 0}
    assert manager.stats().records_dropped == 10
    manager.pause("again")  # idempotent
    lease.renew(clock())
    assert manager.poll(0.05) == []  # paused, whatever the lease says
    manager.resume()
    assert events.of("started") == [("started", A, 0, thread), ("started", A, 10, thread)]
    rest = poll_until(manager, 20)
    assert [r.offset for r in rest] == list(range(10, 30))  # nothing lost, nothing twice


def test_a_blocked_poll_sees_the_gate_open(tmp_path: Path, cid: str, managers: Callable[..., FetchManager]) -> None:
    append(tmp_path, A, 0, 5)
    opened = threading.Event()
    manager = managers(tmp_path, gate=opened.is_set)
    manager.assign({A: (0, f"{cid}-0")})
    result: list[ConsumerRecord] = []
    poller = threading.Thread(target=lambda: result.extend(manager.poll(WAIT)))
    poller.start()
    opened.set()  # nobody notifies the manager: it looks at the gate again every idle_wait_s
    poller.join(WAIT)
    assert not poller.is_alive()
    assert [r.offset for r in result] == list(range(5))


def test_revoke_while_paused_reports_no_second_stop_and_assign_waits_for_resume(
    tmp_path: Path, cid: str, managers: Callable[..., FetchManager]
) -> None:
    append(tmp_path, A, 0, 10)
    readers, events = Readers(), Events()
    manager = managers(tmp_path, reader_factory=readers, on_started=events.started, on_stopped=events.stopped)
    manager.assign({A: (0, f"{cid}-0")})
    assert len(poll_until(manager, 10)) == 10
    manager.pause("zookeeper suspended")
    assert manager.revoke("session lost") == {A: 10}
    assert [e[-1] for e in events.of("stopped")] == ["zookeeper suspended"]
    manager.assign({A: (4, f"{cid}-0")})  # still paused: not started, nothing read
    assert len(events.of("started")) == 1
    reads = readers.total()
    assert manager.poll(0.05) == []
    assert readers.total() == reads
    manager.resume()
    assert events.of("started")[-1] == ("started", A, 4, f"{cid}-0")
    assert [r.offset for r in poll_until(manager, 6)] == list(range(4, 10))


# --- bounded prefetching (seed 004, heuristic 1) -------------------------------------------------------------------


def test_prefetching_stops_at_max_poll_records_while_the_application_does_not_poll(
    tmp_path: Path, cid: str, managers: Callable[..., FetchManager]
) -> None:
    for tp in (A, B, C):
        append(tmp_path, tp, 0, 34_000, batch=1000)  # about 100 000 records in all
    events = Events()
    manager = managers(tmp_path, max_poll_records=100, on_fetched=events.fetched)
    manager.assign({tp: (0, f"{cid}-{tp.partition}") for tp in (A, B, C)})
    bound = 2 * 100 - 1
    assert events.signal.wait_for(lambda: manager.retained() >= 100)
    assert not events.signal.wait_for(lambda: manager.retained() > 100, timeout=0.3)
    assert manager.stats().records_fetched == manager.retained() <= bound
    for _ in range(20):  # the application takes some now and then: the bound holds throughout
        manager.poll(WAIT, max_records=30)
        assert events.signal.wait_for(lambda: manager.retained() >= 100 - 30)
        assert manager.retained() <= bound
        assert all(count <= manager.max_buffered_records for count in manager.buffered().values())


def test_no_partition_buffers_more_than_max_buffered_records(
    tmp_path: Path, cid: str, managers: Callable[..., FetchManager]
) -> None:
    for tp in (A, B, C, D):
        append(tmp_path, tp, 0, 100)
    events = Events()
    manager = managers(tmp_path, max_poll_records=50, max_buffered_records=5, on_fetched=events.fetched)
    manager.assign(dict.fromkeys((A, B, C, D), (0, f"{cid}-0")))
    assert events.signal.wait_for(lambda: manager.buffered() == dict.fromkeys((A, B, C, D), 5))
    assert not events.signal.wait_for(lambda: manager.retained() > 20, timeout=0.2)
    assert sorted(r.offset for r in manager.poll(WAIT)) == sorted(list(range(5)) * 4)


# --- growing logs, new partitions, damage ---------------------------------------------------------------------------


def test_fetchers_follow_a_growing_log_and_a_partition_created_later(
    tmp_path: Path, cid: str, managers: Callable[..., FetchManager]
) -> None:
    append(tmp_path, A, 0, 5)
    assert not partition_dir(tmp_path, B.topic, B.partition).exists()  # no producer has written to B yet
    manager = managers(tmp_path, max_poll_records=4)
    manager.assign({A: (0, f"{cid}-0"), B: (0, f"{cid}-1")})
    records = poll_until(manager, 5)
    for step in range(5):
        append(tmp_path, A, 5 + 7 * step, 7, batch=3)
        append(tmp_path, B, 3 * step, 3, batch=1)
        records += poll_until(manager, 10)
    assert by_partition(records) == {A: list(range(40)), B: list(range(15))}
    assert manager.lag(A) == 0
    append(tmp_path, A, 40, 12)
    assert manager.lag(A) == 12
    with pytest.raises(KeyError):
        manager.lag(C)


def damage_middle_batch(data_dir: Path, tp: TopicPartition) -> None:
    """Write three batches of five records into ``tp`` and flip a byte inside the second one."""
    directory = partition_dir(data_dir, tp.topic, tp.partition)
    with PartitionWriter(data_dir, tp.topic, tp.partition, config=WriterConfig(index_interval_bytes=1 << 20)) as w:
        w.append_batch([(None, value(tp, i)) for i in range(5)])
        middle = log_path(directory, 0).stat().st_size
        w.append_batch([(None, value(tp, i)) for i in range(5, 10)])
        w.append_batch([(None, value(tp, i)) for i in range(10, 15)])
    with open(log_path(directory, 0), "r+b") as f:
        f.seek(middle + HEADER_SIZE + 10)
        byte = f.read(1)[0]
        f.seek(middle + HEADER_SIZE + 10)
        f.write(bytes([byte ^ 0x40]))


def test_a_damaged_log_stalls_its_partition_and_is_reported_while_the_others_go_on(
    tmp_path: Path, cid: str, managers: Callable[..., FetchManager]
) -> None:
    damage_middle_batch(tmp_path, A)
    append(tmp_path, B, 0, 10)
    events = Events()
    manager = managers(tmp_path, on_error=events.error)
    manager.assign({A: (0, f"{cid}-0"), B: (0, f"{cid}-0")})
    records = poll_until(manager, 15)  # A's records before the damage, and all of B's
    assert by_partition(records) == {A: list(range(5)), B: list(range(10))}
    assert events.signal.wait_for(lambda: len(events.errors) == 1)
    assert events.errors[0][0] == A
    assert isinstance(events.errors[0][1], CorruptLogError)
    assert list(manager.failed()) == [A]
    append(tmp_path, B, 10, 5)
    assert by_partition(poll_until(manager, 5)) == {B: list(range(10, 15))}  # B's fetcher goes on
    assert manager.positions() == {A: 5, B: 15}
    manager.pause("retry")
    manager.resume()  # tries A again: same damage, reported again
    assert events.signal.wait_for(lambda: len(events.errors) == 2)


def test_a_position_beyond_the_end_of_the_log_is_reported_not_waited_on(
    tmp_path: Path, cid: str, managers: Callable[..., FetchManager]
) -> None:
    append(tmp_path, A, 0, 10)
    events = Events()
    manager = managers(tmp_path, on_error=events.error)
    manager.assign({A: (50, f"{cid}-0")})
    assert events.signal.wait_for(lambda: len(events.errors) == 1)
    error = events.errors[0][1]
    assert isinstance(error, OffsetOutOfRangeError)
    assert (error.offset, error.start, error.end) == (50, 0, 10)
    assert manager.poll(0.02) == []
    assert manager.positions() == {A: 50}


# --- wakeup, close, misuse -----------------------------------------------------------------------------------------


def test_wakeup_returns_a_blocked_poll_at_once(tmp_path: Path, cid: str, managers: Callable[..., FetchManager]) -> None:
    manager = managers(tmp_path)
    manager.assign({A: (0, f"{cid}-0")})
    result: list[list[ConsumerRecord]] = []
    poller = threading.Thread(target=lambda: result.append(manager.poll(math.inf)))
    poller.start()
    manager.wakeup()
    poller.join(WAIT)
    assert not poller.is_alive()
    assert result == [[]]


def test_close_joins_every_fetcher_and_releases_a_blocked_poll(tmp_path: Path, cid: str) -> None:
    append(tmp_path, A, 0, 3)
    events = Events()
    manager = FetchManager(tmp_path, idle_wait_s=0.005, on_stopped=events.stopped).start()
    manager.assign({A: (0, f"{cid}-0"), B: (0, f"{cid}-1"), C: (0, f"{cid}-2")})
    poll_until(manager, 3)
    assert len(fetcher_threads(cid)) == 3
    outcome: list[object] = []

    def poll() -> None:
        try:
            outcome.append(manager.poll(60.0))
        except RuntimeError as e:  # closed before this poll began
            outcome.append(e)

    poller = threading.Thread(target=poll)
    poller.start()
    assert manager.close() == {A: 3, B: 0, C: 0}
    poller.join(WAIT)
    assert not poller.is_alive()
    assert outcome == [[]] or isinstance(outcome[0], RuntimeError)
    assert fetcher_threads(cid) == []
    assert [e[-1] for e in events.of("stopped")] == ["closed"] * 3
    assert manager.close() == {}  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        manager.poll(0.0)
    with pytest.raises(RuntimeError, match="closed"):
        manager.start()


def test_misuse_is_refused(tmp_path: Path, cid: str, managers: Callable[..., FetchManager]) -> None:
    with pytest.raises(ConfigurationError, match="max_poll_records"):
        FetchManager(tmp_path, max_poll_records=0)
    with pytest.raises(ConfigurationError, match="max_buffered_records"):
        FetchManager(tmp_path, max_buffered_records=0)
    unstarted = FetchManager(tmp_path)
    with pytest.raises(RuntimeError, match="not started"):
        unstarted.assign({A: (0, f"{cid}-0")})
    manager = managers(tmp_path)
    with pytest.raises(ValueError, match="offset -1"):
        manager.assign({A: (-1, f"{cid}-0")})
    with pytest.raises(ValueError, match="thread"):
        manager.assign({A: (0, "")})


def test_callbacks_cannot_call_the_control_methods(
    tmp_path: Path, cid: str, managers: Callable[..., FetchManager]
) -> None:
    append(tmp_path, A, 0, 5)
    refused: list[str] = []
    signal = Signal()
    holder: list[FetchManager] = []

    def try_control(*_: object) -> None:
        try:
            holder[0].revoke("from a callback")
        except RuntimeError as e:
            refused.append(str(e))
        signal.notify()

    manager = managers(tmp_path, on_started=try_control, on_fetched=try_control)
    holder.append(manager)
    manager.assign({A: (0, f"{cid}-0")})  # on_started runs on this thread, inside assign()
    assert signal.wait_for(lambda: len(refused) == 2)  # on_fetched runs on the fetcher thread
    assert all("callbacks" in message for message in refused)
    assert [r.offset for r in poll_until(manager, 5)] == list(range(5))
