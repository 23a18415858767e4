"""The consumer's data plane on real partition logs: poll() limits and KIP-41 fairness, exactly-once delivery across
revoke/assign cycles, synchronous revoke, pause/resume and the lease gate (S6), bounded prefetching.  Growing and
damaged logs, wakeup and close are in ``test_consumer_fetcher_edges.py``.  No ZooKeeper, no sleeping: tests wait on
conditions with deadlines.
"""

from __future__ import annotations

import tempfile
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit import fetcher_helpers as helpers
from tests.unit.fetcher_helpers import (
    WAIT,
    A,
    B,
    C,
    D,
    Events,
    Readers,
    append,
    by_partition,
    fetcher_threads,
    poll_until,
    value,
)
from tests.unit.test_consumer_lease import FakeClock
from zkcoord.consumer.fetch_state import FetchCore, PartitionFetch
from zkcoord.consumer.fetcher import FetchManager
from zkcoord.consumer.lease import Lease
from zkcoord.consumer.records import ConsumerRecord, TopicPartition

cid, managers = helpers.cid, helpers.managers  # the shared fixtures

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
