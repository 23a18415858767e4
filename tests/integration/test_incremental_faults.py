"""Faults around incremental rebalances, against a real ZooKeeper with real processes and signals: a coordinator
killed between the partial stops and the start, a member SIGKILLed mid-run, a commit lost to a connection loss under
a partial stop (never acknowledged before its commit: S3), and a server that grants shorter sessions than asked
for (the lease follows the granted timeout: S6)."""

from __future__ import annotations

import dataclasses
import logging
import re
import signal
import time
from collections.abc import Iterator, Mapping
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from tests.clusters import Cluster
from tests.integration.test_consumer import drain, make, polling, produce
from tests.integration.test_consumer_e2e import Run, _id
from tests.integration.test_incremental import INCREMENTAL, started
from tests.ledger import Ledger
from tests.zkutil import TEST_CONFIG, ZkFactory
from zkcoord.consumer import Consumer
from zkcoord.consumer.records import TopicPartition
from zkcoord.data.topics import TopicAdmin
from zkcoord.errors import NoNodeError, ZkUnavailableError
from zkcoord.layout import paths
from zkcoord.layout.group_state import GroupPhase
from zkcoord.layout.registrations import CoordinatorInfo
from zkcoord.runtime import faults
from zkcoord.runtime.journal import read_journal
from zkcoord.testbed.procs import ChildProcess, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

#: The brokers' session timeout (s) in the test that holds the coordinator with SIGSTOP for a few seconds.
HELD_SESSION_S = 20


@pytest.fixture
def run(zk_hosts: str, tmp_path: Path) -> Iterator[Run]:
    with ExitStack() as stack:
        yield Run(zk_hosts, tmp_path, stack)


def _broker(run: Run, broker_id: int, fault_dir: Path, session: str | None = None) -> ChildProcess:
    common = run.common()
    if session is not None:  # a broker session longer than the consumers'
        common[common.index("--session-timeout") + 1] = session
    args = ["broker", "--id", str(broker_id), *common, "--rebalance-timeout", "5"]
    proc = ChildProcess(args, run.root / f"broker-{broker_id}.log", env={faults.DIR_ENV: str(fault_dir)})
    run.stack.enter_context(proc)
    return proc


def _coordinator(run: Run) -> int | None:
    try:
        return CoordinatorInfo.decode(run.zk.get(paths.COORDINATOR)[0], paths.COORDINATOR).broker_id
    except NoNodeError:
        return None  # between terms


def _holders(run: Run, group: str) -> dict[int, str]:
    """Who fetches each partition now, replayed from the journal's fetch.started / fetch.stopped."""
    holders: dict[int, str] = {}
    for e in sorted(read_journal(run.journal), key=lambda ev: (ev.ts_ms, ev.pid, ev.seq)):
        if e.fields.get("group") != group:
            continue
        if e.event == "fetch.started":
            holders[e.fields["partition"]] = e.fields["consumer"]
        elif e.event == "fetch.stopped" and holders.get(e.fields["partition"]) == e.fields["consumer"]:
            del holders[e.fields["partition"]]
    return holders


def test_a_takeover_in_the_middle_of_a_hand_over(run: Run) -> None:
    """Broker 1 dies once a join's hand-over is written, before anything is acknowledged: the losers hand their
    partitions over (or not yet) while broker 2 takes over, finds the group STARTING and rebalances eagerly, reading
    the owner znodes again before its start step.  Nothing may be owned twice, lost, or duplicated."""
    fault_dir = run.root / "faults"
    fault_dir.mkdir()
    first = _broker(run, 1, fault_dir)
    wait_until(lambda: _coordinator(run) == 1, 30, "broker 1 coordinating")
    _broker(run, 2, fault_dir)
    TopicAdmin(run.zk).create("t", 12)
    consumers = [run.consumer("x", "t", extra=INCREMENTAL) for _ in range(3)]
    run.wait_members("x", 3)
    producer = run.producer("t", 20_000, 4_000)
    wait_until(lambda: Ledger.read(run.journal, "x").consumed != {}, 30, "consumption to begin")
    faults.arm(fault_dir, first.proc.pid, "coordinator.mid_handover", "kill")
    consumers.append(run.consumer("x", "t", extra=INCREMENTAL))
    first.proc.wait(timeout=30)  # killed itself once the hand-over was written
    assert started(run, "x", "incremental"), "the join was not rebalanced incrementally"
    wait_until(lambda: _coordinator(run) == 2, 30, "broker 2 elected")
    run.wait_members("x", 4)
    assert producer.wait(60) == 0
    ledger = run.wait_consumed_all("x", {"t"})
    assert ledger.overlaps() == [], "two consumers owned a partition at the same time"
    assert ledger.duplicates() == {}, "no consumer crashed: nothing may be consumed twice"
    for c in consumers:
        c.signal(signal.SIGTERM)
        assert c.wait(20) == 0


def test_a_takeover_between_the_two_steps_of_an_incremental_rebalance(run: Run) -> None:
    """An incremental rebalance takes two steps (every stop acknowledged before any start is written) when a member
    both gives a partition up and receives one.  Here one rebalance sees a member leave and another join (the
    coordinator is held with SIGSTOP while both happen, within its session): the first member gives a partition of
    ``y`` to the newcomer and receives the leaver's partition of ``x``.  Broker 1 then dies once every stop is
    acknowledged, before any start is written; broker 2 takes over, finds the group STOPPING and rebalances eagerly.
    Nothing may be owned twice, lost, or duplicated."""
    fault_dir = run.root / "faults"
    fault_dir.mkdir()
    first = _broker(run, 1, fault_dir, session=str(HELD_SESSION_S))
    wait_until(lambda: _coordinator(run) == 1, 30, "broker 1 coordinating")
    _broker(run, 2, fault_dir, session=str(HELD_SESSION_S))
    admin = TopicAdmin(run.zk)
    admin.create("x", 2)
    admin.create("y", 3)
    # Joining one by one, the uniform assignor leaves x = {0: b, 1: b} and y = {0: a, 1: a, 2: c} (b's only topic is x,
    # so it takes both; a keeps what balance allows).  When b leaves, x has a alone: a gains it and gives y up.
    a = run.consumer("m", "x", "y", extra=INCREMENTAL)
    run.wait_members("m", 1)
    b = run.consumer("m", "x", extra=INCREMENTAL)
    run.wait_members("m", 2)
    c = run.consumer("m", "y", extra=INCREMENTAL)
    run.wait_members("m", 3)
    producers = [run.producer("x", 8_000, 2_000), run.producer("y", 12_000, 3_000)]
    wait_until(lambda: Ledger.read(run.journal, "m").consumed != {}, 30, "consumption to begin")
    before = set(run.zk.get_children(paths.group_ids("m")))
    b_id = _id(run, b)
    assert b_id in before, (b_id, before)
    held = time.monotonic()
    first.proc.send_signal(signal.SIGSTOP)  # held: it sees the leave and the join in one read of the group
    try:
        b.signal(signal.SIGTERM)
        assert b.wait(20) == 0
        d = run.consumer("m", "y", extra=INCREMENTAL)

        def b_gone_d_registered() -> bool:
            now = set(run.zk.get_children(paths.group_ids("m")))
            return b_id not in now and len(now - before) == 1

        wait_until(b_gone_d_registered, 20, "b deregistered and d registered")
        faults.arm(fault_dir, first.proc.pid, "coordinator.before_start", "kill")
    finally:
        first.proc.send_signal(signal.SIGCONT)
    # Past its session, broker 2 would have taken over and run the rebalance instead: say so, not a timeout below.
    assert time.monotonic() - held < HELD_SESSION_S - 5, "broker 1 was held too long: the machine is too slow"
    first.proc.wait(timeout=30)  # killed itself between the steps
    (two_step,) = [e for e in started(run, "m", "incremental") if set(e["revoking"]) & set(e["gaining"])]
    assert "steps" not in two_step, "a member that gives and receives was sent a hand-over"
    injected = [e.fields["detail"] for e in read_journal(run.journal) if e.event == "fault.injected"]
    assert injected == ["coordinator.before_start"], injected
    wait_until(lambda: _coordinator(run) == 2, 30, "broker 2 elected")
    run.wait_members("m", 3)
    # Broker 2 found the group STOPPING: it rebalanced eagerly (reading the owner znodes again at its start step).
    after = [e for e in started(run, "m", "eager") if e["ts"] > two_step["ts"]]
    assert after and after[0]["epoch"] > two_step["epoch"], "the new coordinator did not rebalance eagerly"
    for p in producers:
        assert p.wait(60) == 0
    ledger = run.wait_consumed_all("m", {"x", "y"})
    assert ledger.overlaps() == [], "two consumers owned a partition at the same time"
    assert ledger.duplicates() == {}, "no consumer crashed: nothing may be consumed twice"
    for consumer in (a, c, d):
        consumer.signal(signal.SIGTERM)
        assert consumer.wait(20) == 0


def test_incremental_joins_leaves_growth_and_a_crash(run: Run) -> None:
    """The eager end-to-end scenario, incrementally, plus a SIGKILLed member whose partitions are taken free."""
    run.broker()
    admin = TopicAdmin(run.zk)
    admin.create("a", 8)
    admin.create("b", 8)
    consumers = [run.consumer("g", "a", "b", extra=INCREMENTAL) for _ in range(3)]
    run.wait_members("g", 3)
    producers = [run.producer("a", 20_000, 4_000), run.producer("b", 20_000, 4_000)]
    wait_until(lambda: Ledger.read(run.journal, "g").consumed != {}, 30, "consumption to begin")
    consumers.append(run.consumer("g", "a", "b", extra=INCREMENTAL))
    run.wait_members("g", 4)
    consumers[0].signal(signal.SIGTERM)
    assert consumers[0].wait(20) == 0
    run.wait_members("g", 3)
    admin.alter("a", 12)
    victim = consumers[1]
    wait_until(lambda: bool(_id(run, victim)), 10, "victim id")
    victim.signal(signal.SIGKILL)
    victim.wait(10)
    run.wait_members("g", 2)
    for p in producers:
        assert p.wait(60) == 0
    ledger = run.wait_consumed_all("g", {"a", "b"})
    assert ledger.consumed.get(("a", 11))
    assert ledger.overlaps() == [], "two consumers owned a partition at the same time"
    victim_id = _id(run, victim)
    uncommitted: set[tuple[tuple[str, int], int]] = set()
    for _ts, topic, partition, first, last in ledger.deliveries.get(victim_id, []):
        floor = ledger.committed.get((victim_id, (topic, partition)), 0)
        uncommitted.update(((topic, partition), o) for o in range(max(first, floor), last + 1))
    dups = {(tp, o) for tp, offsets in ledger.duplicates().items() for o in offsets}
    assert dups <= uncommitted, f"{len(dups - uncommitted)} duplicates were not the killed consumer's uncommitted"
    assert started(run, "g", "incremental")
    state = run.state("g")
    assert state is not None and state.phase is GroupPhase.STABLE
    for c in (consumers[2], consumers[3]):
        c.signal(signal.SIGTERM)
        assert c.wait(20) == 0


# --- a lost commit, a shorter session than asked for --------------------------------------------------------------


def _sole_member_drained(cluster: Cluster, data: Path, stack: ExitStack) -> Consumer:
    """A broker, topic ``t`` of 2 partitions with 50 records each, and the only member of group ``g`` (incremental,
    auto-commit on but its interval longer than the test: a stop's commit is the first), which has handed out all 100
    records and committed nothing."""
    cluster.broker(1)
    TopicAdmin(cluster.admin_zk).create("t", 2)
    a = make(cluster, data, stack, rebalance="incremental", auto_commit_interval_s=3600)
    wait_until(polling([a], lambda: cluster.is_stable("g", 1)), 20, "g stable with a", interval=0)
    wait_until(lambda: len(a.assignment()) == 2, 10, "a holds both partitions")
    produce(data, "t", 2, 50)  # after the polls above, which hand out and drop records
    assert len(drain(a, 100)) == 100
    return a


def test_a_partial_stop_is_not_acknowledged_before_its_commit_succeeds(cluster: Cluster, tmp_path: Path) -> None:
    """S3/S4: "a consumer commits its offsets before it acknowledges stop-fetcher".  If the auto-commit of a partial
    stop (in poll(), before the revoke callback) fails with a connection loss (nothing committed), the partitions are
    out of the fetcher already: the stop's own transaction must commit them before it acknowledges, or the gainer
    starts from the old committed offset and hands out again what the loser handed out, although no consumer
    crashed."""
    data = tmp_path / "data"
    with ExitStack() as stack:
        a = _sole_member_drained(cluster, data, stack)
        real_commit = a.offsets.commit
        failures: list[dict[TopicPartition, int]] = []

        def flaky(positions: Mapping[TopicPartition, int], *args: Any, **kw: Any) -> dict[TopicPartition, int]:
            if not failures:  # the first commit of the partial stop: the connection drops under it
                failures.append(dict(positions))
                raise ZkUnavailableError("connection loss (injected)")
            return real_commit(positions, *args, **kw)

        a.offsets.commit = flaky  # type: ignore[method-assign,assignment,unused-ignore]
        b = make(cluster, data, stack, rebalance="incremental", auto_commit=False)
        wait_until(polling([a, b], lambda: cluster.is_stable("g", 2)), 20, "g stable with a and b", interval=0)
        wait_until(lambda: len(b.assignment()) == 1, 10, "b gained one partition")
        assert failures, "the partial stop's commit was never attempted"
        (moved,) = b.assignment()
        assert failures[0] == {moved: 50}
        # S3: the stop was acknowledged, so the loser's position was committed first (by the redelivered stop),
        # and the gainer starts after everything a handed out.
        committed = cluster.admin_zk.get(paths.offset("g", moved.topic, moved.partition))[0]
        assert committed == b"50", f"stop acknowledged with {moved} at {committed!r}, not 50"
        assert b.fetcher.positions() == {moved: 50}
        assert b.poll(0.2) == []


def test_a_commit_whose_reply_was_lost_is_not_committed_again_later(cluster: Cluster, tmp_path: Path) -> None:
    """S4: a partial stop's auto-commit (in poll()) and then its own transaction (the acknowledgement) both land but
    their replies are lost with the connection.  The consumer keeps the positions and tries the stop's transaction
    again; whatever it keeps must not be committed over the offsets of the partition's later owners: the consumer's
    next stop or incremental start commits anything kept under its old claim first (before any fresh claim of the
    partition), and the hand-over changed the owner znode's version, so such a commit is fenced."""
    data = tmp_path / "data"
    with ExitStack() as stack:
        a = _sole_member_drained(cluster, data, stack)
        real_transaction = a.offsets.zk.transaction
        lost: list[str] = []

        def landing_then_lost() -> Any:
            txn = real_transaction()
            real_commit = txn.commit

            def commit(timeout: float | None = None) -> Any:
                result = real_commit(timeout)
                if len(lost) < 2:  # the stop's auto-commit, then its transaction: applied by the server, reply lost
                    lost.append("lost")
                    raise ZkUnavailableError("connection loss after the transaction was applied (injected)")
                return result

            txn.commit = commit  # type: ignore[method-assign]
            return txn

        a.offsets.zk.transaction = landing_then_lost  # type: ignore[method-assign]
        b = make(cluster, data, stack, rebalance="incremental", auto_commit=False)
        wait_until(polling([a, b], lambda: cluster.is_stable("g", 2)), 20, "g stable with a and b", interval=0)
        wait_until(lambda: len(b.assignment()) == 1, 10, "b gained one partition")
        (moved,) = b.assignment()
        assert lost, "the partial stop committed nothing"
        produce(data, "t", 2, 30)  # offsets 50-79 of both partitions
        assert sorted(o for _p, o in drain(b, 30)) == list(range(50, 80))
        b.commit()
        b.close()  # 80 committed for `moved`, and it leaves: the partition goes back to a
        wait_until(polling([a], lambda: cluster.is_stable("g", 1)), 20, "g stable with a", interval=0)
        wait_until(lambda: moved in a.assignment(), 10, "a claimed the partition again")
        assert a.fetcher.positions()[moved] == 80
        # a's incremental start (the leave) first committed what it kept under its old claim: refused by the fence.
        assert a.handler.commits.unsettled == {}, "a position of the lost reply is still waiting to be committed"
        committed = cluster.admin_zk.get(paths.offset("g", moved.topic, moved.partition))[0]
        assert committed == b"80", f"the lost reply's position was committed over b's: {committed!r}"
        assert len(lost) == 2, "the stop's two transactions did not both lose their replies"


def _negotiated_timeout_ms(records: list[logging.LogRecord]) -> int:
    for record in records:
        found = re.search(r"negotiated session timeout: (\d+)", record.getMessage())
        if found:
            return int(found.group(1))
    raise AssertionError("kazoo did not log the negotiated session timeout")


def test_the_lease_is_shorter_than_the_negotiated_session_timeout(zk_factory: ZkFactory, tmp_path: Path) -> None:
    """S6 (pre-existing): the consumer's lease is a fraction of the *requested* session timeout
    (zkcoord/consumer/client.py), while lease.lease_duration says to use the one the server *negotiated*.  A server
    whose maxSessionTimeout is below twice the requested value expires the session while the lease is still valid: a
    consumer paused for longer than the negotiated timeout wakes up with a valid lease and may fetch and hand out
    records of partitions the coordinator has already given away (the incremental path, with no stop at all)."""
    server = zk_factory.server(dataclasses.replace(TEST_CONFIG, max_session_timeout_ms=1_000))
    hosts = server.connect_string
    logger = logging.getLogger("kazoo")
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Keep(level=1)
    old_level = logger.level
    logger.addHandler(handler)
    logger.setLevel(1)
    try:
        with ExitStack() as stack:
            cluster = Cluster(hosts, tmp_path / "journal", stack)
            cluster.broker(1)
            TopicAdmin(cluster.admin_zk).create("t", 1)
            records.clear()
            consumer: Consumer = make(cluster, tmp_path / "data", stack)  # requests 4 s: lease 2 s
            negotiated = _negotiated_timeout_ms(records)
            assert negotiated == 1_000
            assert consumer.lease.duration_s * 1000 < negotiated, (
                f"lease {consumer.lease.duration_s} s outlives the {negotiated} ms session the server granted"
            )
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)


def test_a_paused_member_wakes_up_fenced_when_the_server_caps_the_session_timeout(
    zk_factory: ZkFactory, tmp_path: Path
) -> None:
    """The consequence of the lease bug above, end to end: the server grants 1 s sessions, the processes ask for
    10 s (lease 5 s).  A member paused for 3 s loses its session after about 1 s and its partitions are taken by the
    other member (incrementally: no stop); when it wakes its lease is still valid, so until kazoo reports the
    disconnection its fetchers and poll() are open on partitions the other member is fetching.  The journal's
    verdict (Ledger.overlaps) reports the overlap; with a lease shorter than the granted session it cannot."""
    server = zk_factory.server(dataclasses.replace(TEST_CONFIG, max_session_timeout_ms=1_000))
    with ExitStack() as stack:
        run = Run(server.connect_string, tmp_path, stack, session="10")
        run.broker()
        TopicAdmin(run.zk).create("t", 4)
        sleeper = run.consumer("s", "t", extra=INCREMENTAL)
        other = run.consumer("s", "t", extra=INCREMENTAL)
        run.wait_members("s", 2)
        producer = run.producer("t", 20_000, 2_000)
        wait_until(lambda: bool(_id(run, sleeper)), 10, "consumer id")
        sleeper_id = _id(run, sleeper)
        wait_until(lambda: sleeper_id in Ledger.read(run.journal, "s").deliveries, 30, "the sleeper consuming")
        sleeper.signal(signal.SIGSTOP)
        run.wait_members("s", 1, timeout=30)  # its 1 s session expired; the other took every partition
        other_id = _id(run, other)
        # ... and fetches it all: a sleeper waking with a lease still valid would now overlap it.
        wait_until(lambda: _holders(run, "s") == dict.fromkeys(range(4), other_id), 30, "the other fetching all")
        sleeper.signal(signal.SIGCONT)
        run.wait_members("s", 2, timeout=30)
        assert producer.wait(60) == 0
        ledger = run.wait_consumed_all("s", {"t"})
        assert ledger.overlaps() == [], "two consumers owned a partition at the same time"
        for c in (sleeper, other):
            c.signal(signal.SIGTERM)
            assert c.wait(20) == 0
