"""Hostile state around the election (issue 14, item 3): ``/consumers/coordinator`` and ``/consumers/coordinator_epoch``
changed by hand under a running cluster, the way a buggy client or an operator's mistake would.

The rules under test (``docs/protocol.md``, "Bad state"):

* a coordinator whose fence breaks (either znode changed under it) resigns and hands the election back: a broker
  holding no term deletes a coordinator znode that its own session owns (never another session's), and the
  election runs again;
* a coordinator znode that is not ephemeral (no session would ever remove it) is deleted by the broker that finds it;
* an epoch znode that is malformed, out of range, lowered or missing is repaired: the next epoch is above every
  epoch on record (the znode's value and version, every group's state, and the epochs the broker has seen).

Every case injects the fault, then makes a change (the topic grows by a partition) and produces records; afterwards
exactly one coordinator acts (S1), the group converges to a complete assignment within a deadline, every record is
consumed (S3), no partition is fetched by two consumers at once (S2), nothing is consumed twice (S4), and the
consumers accept the new epoch (S5: no command refused as stale).  The parametrized cases share one in-process
cluster (each starts from the state the previous one left, so epochs keep growing as in a long-lived cluster); one
more test runs real ``zkcoord broker``, ``consume`` and ``produce`` processes through several faults in turn.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.clusters import Cluster
from tests.ledger import Ledger
from zkcoord.consumer import Consumer, ConsumerConfig, Subscription
from zkcoord.coordinator.seat import BLOCKED_RETRY_S
from zkcoord.data.producer import ProduceConfig, Producer
from zkcoord.data.topics import TopicAdmin
from zkcoord.errors import ZkCoordError
from zkcoord.layout import paths
from zkcoord.layout.group_state import GroupPhase, GroupState
from zkcoord.layout.registrations import CoordinatorInfo
from zkcoord.layout.znodes import decode_int
from zkcoord.runtime.journal import Journal, JournalEvent, read_journal
from zkcoord.testbed.procs import ChildProcess, wait_until
from zkcoord.zk import ZkClient, ZkConfig
from zkcoord.zkserver import ZkServer

pytestmark = pytest.mark.integration

GROUP = "g"
TOPIC = "t"
CONVERGE_S = 15.0


# --- the faults ---------------------------------------------------------------------------------------------------


def _set(path: str, value: bytes) -> Callable[[ZkClient, int], None]:
    def inject(zk: ZkClient, _epoch: int) -> None:
        zk.set(path, value)

    return inject


def _set_epoch(value: Callable[[int], int]) -> Callable[[ZkClient, int], None]:
    def inject(zk: ZkClient, epoch: int) -> None:
        zk.set(paths.COORDINATOR_EPOCH, str(value(epoch)).encode())

    return inject


def _delete(path: str) -> Callable[[ZkClient, int], None]:
    def inject(zk: ZkClient, _epoch: int) -> None:
        zk.delete(path)

    return inject


def _recreated_lower(zk: ZkClient, epoch: int) -> None:
    # Lost and recreated in one transaction: version 0, a value above it but below the epochs consumers have seen.
    txn = zk.transaction()
    txn.delete(paths.COORDINATOR_EPOCH)
    txn.create(paths.COORDINATOR_EPOCH, str(max(epoch - 1, 1)).encode())
    txn.commit()


def _persistent(zk: ZkClient, epoch: int) -> None:
    # Replaced in one transaction: the watchers never see the node absent, only its data change.
    txn = zk.transaction()
    txn.delete(paths.COORDINATOR)
    txn.create(paths.COORDINATOR, CoordinatorInfo(7, epoch, 0).encode())
    txn.commit()


@dataclass(frozen=True)
class Fault:
    name: str
    inject: Callable[[ZkClient, int], None]
    #: the holder's node vanished under it: it is a zombie (fenced at its next write) while its successor is elected
    zombie: bool = False


FAULTS = [
    Fault("coordinator-garbage", _set(paths.COORDINATOR, b"{garbage")),
    Fault("coordinator-non-utf8", _set(paths.COORDINATOR, b"\xff\xfe\x00\x81")),
    Fault("coordinator-other-json", _set(paths.COORDINATOR, CoordinatorInfo(9, 2**63 - 1, 0).encode())),
    Fault("coordinator-deleted", _delete(paths.COORDINATOR), zombie=True),
    Fault("coordinator-persistent", _persistent, zombie=True),
    Fault("epoch-abc", _set(paths.COORDINATOR_EPOCH, b"abc")),
    Fault("epoch-negative", _set(paths.COORDINATOR_EPOCH, b"-5")),
    Fault("epoch-huge", _set(paths.COORDINATOR_EPOCH, str(10**30).encode())),
    Fault("epoch-beyond-int64", _set(paths.COORDINATOR_EPOCH, str(2**63).encode())),
    Fault("epoch-higher", _set_epoch(lambda e: e + 100)),
    Fault("epoch-deleted", _delete(paths.COORDINATOR_EPOCH)),
    # After the deletion the znode's version is far below its value, so a lowered value is not below the version:
    # only the epochs the brokers have seen (and the group states) tell that it went back.
    Fault("epoch-lower", _set_epoch(lambda e: e - 3)),
    Fault("epoch-zero", _set(paths.COORDINATOR_EPOCH, b"0")),
    Fault("epoch-recreated-lower", _recreated_lower),
]


# --- journal checks -----------------------------------------------------------------------------------------------


def s1_violations(events: list[JournalEvent], zombies: set[int]) -> list[str]:
    """S1 from a journal (times: ``ts``, then ``mono`` within one process): elected epochs grow strictly in time; no
    ``command.sent`` carries an epoch below one elected before it; every term but the last is resigned, and before
    the next election, except a term in ``zombies`` (its node was taken from under it: it learns at its next write)."""
    events = sorted(events, key=lambda e: (e.ts_ms, e.mono_ns))
    out: list[str] = []
    elected = [e for e in events if e.event == "coordinator.elected"]
    resigned = {(e.role, e.fields["epoch"]): e for e in events if e.event == "coordinator.resigned"}
    for a, b in itertools.pairwise(elected):
        if b.fields["epoch"] <= a.fields["epoch"]:
            out.append(f"epoch regression: {a.fields['epoch']} then {b.fields['epoch']}")
        end = resigned.get((a.role, a.fields["epoch"]))
        if end is None:
            out.append(f"term {a.fields['epoch']} of {a.role} never resigned")
        elif a.fields["epoch"] not in zombies and not _before(end, b):
            out.append(f"term {a.fields['epoch']} still live when {b.fields['epoch']} was elected")
    for sent in (e for e in events if e.event == "command.sent"):
        if any(b.fields["epoch"] > sent.fields["epoch"] and _strictly_before(b, sent) for b in elected):
            out.append(f"deposed write: {sent.fields}")
    return out


def _before(a: JournalEvent, b: JournalEvent) -> bool:
    """``a`` happened no later than ``b``: by the monotonic clock within one process, else by wall milliseconds."""
    return a.mono_ns <= b.mono_ns if a.pid == b.pid else a.ts_ms <= b.ts_ms


def _strictly_before(a: JournalEvent, b: JournalEvent) -> bool:
    return a.mono_ns < b.mono_ns if a.pid == b.pid else a.ts_ms < b.ts_ms


def stale_refusals(events: list[JournalEvent]) -> list[str]:
    return [
        e.fields["reason"]
        for e in events
        if e.event == "command.rejected" and str(e.fields.get("reason", "")).startswith("stale: coordinator epoch")
    ]


def check_records(journal: Path) -> Ledger:
    ledger = Ledger.read(journal, GROUP)
    assert ledger.total_produced() > 0
    assert ledger.missing() == {}, "records produced were not consumed (S3)"
    assert ledger.overlaps() == [], "a partition was fetched by two consumers at once (S2)"
    assert ledger.duplicates() == {}, "a clean rebalance consumed records twice (S4)"
    return ledger


# --- the shared in-process cluster --------------------------------------------------------------------------------


class Fleet:
    """Two in-process brokers, a group of two in-process consumers polled by threads, a producer on demand."""

    def __init__(self, hosts: str, root: Path, stack: ExitStack) -> None:
        self.root = root
        self.data = root / "data"
        self.cluster = Cluster(hosts, root / "journal", stack)
        self.zk = self.cluster.admin_zk
        self.partitions = 2
        self.zombies: set[int] = set()  # terms whose node was taken from under them (by earlier cases too)
        self.cluster.broker(1)
        wait_until(lambda: self.cluster.acting() == [1], 10, "broker 1 coordinating")
        self.cluster.broker(2)
        TopicAdmin(self.zk).create(TOPIC, self.partitions)
        self.stop = threading.Event()
        self.consumers = [self._consumer(stack) for _ in range(2)]
        self.converged(-1)
        self.produce(100)
        self.consumed_all()

    def _consumer(self, stack: ExitStack) -> Consumer:
        config = ConsumerConfig(
            group=GROUP,
            subscription=Subscription.static({TOPIC: 1}),
            zk=self.cluster.hosts,
            data_dir=self.data,
            session_timeout_s=4.0,
            auto_commit_interval_s=0.2,
        )
        consumer = Consumer(config, journal=Journal(self.cluster.journal_dir, "consumer"))
        stack.enter_context(consumer)
        poller = threading.Thread(target=self._poll, args=(consumer,), daemon=True)
        poller.start()
        stack.callback(self._stop_polling, poller)  # runs before the consumer's close (LIFO)
        return consumer

    def _stop_polling(self, poller: threading.Thread) -> None:
        self.stop.set()
        poller.join(5)

    def _poll(self, consumer: Consumer) -> None:
        while not self.stop.is_set():
            consumer.poll(0.05)

    def produce(self, count: int) -> None:
        producer = Producer(self.zk, self.data, ProduceConfig(TOPIC, count=count), Journal(self.root / "journal", "p"))
        try:
            producer.start().run()
        finally:
            producer.close()

    def epoch(self) -> int:
        [broker] = self.cluster.acting()
        term = self.cluster.coordinator(broker).term
        assert term is not None
        return term.epoch

    def converged(self, above: int, timeout: float = CONVERGE_S) -> GroupState:
        """Wait until one broker coordinates under an epoch above ``above``, the group is STABLE under it with both
        members and every partition assigned, and both consumers fetch what the state says."""
        expected = set(range(self.partitions))

        def done() -> bool:
            acting = self.cluster.acting()
            if len(acting) != 1:
                return False
            term = self.cluster.coordinator(acting[0]).term
            try:
                state = self.cluster.state(GROUP)
            except ZkCoordError:  # not written yet (NoNodeError), or written by hand (CodecError)
                return False
            if term is None or term.epoch <= above or state.epoch != term.epoch:
                return False
            if state.phase is not GroupPhase.STABLE or len(state.members) != 2:
                return False
            fetched = [tp.partition for c in self.consumers for tp in c.assignment()]
            return set(state.target.get(TOPIC, {})) == expected and sorted(fetched) == sorted(expected)

        wait_until(done, timeout, "one coordinator under a new epoch and the group STABLE, complete", interval=0.05)
        return self.cluster.state(GROUP)

    def consumed_all(self, timeout: float = CONVERGE_S) -> None:
        wait_until(lambda: not Ledger.read(self.cluster.journal_dir, GROUP).missing(), timeout, "every record consumed")

    def grow(self) -> None:
        self.partitions += 1
        TopicAdmin(self.zk).alter(TOPIC, self.partitions)


@pytest.fixture(scope="module")
def fleet(zk_server: ZkServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    hosts = f"{zk_server.connect_string}/t_{uuid.uuid4().hex}"  # created on first use
    with ExitStack() as stack:
        yield Fleet(hosts, tmp_path_factory.mktemp("election"), stack)


@pytest.mark.parametrize("fault", FAULTS, ids=[f.name for f in FAULTS])
def test_the_cluster_recovers_by_itself(fleet: Fleet, fault: Fault) -> None:
    journal = fleet.cluster.journal_dir
    assert len(fleet.cluster.acting()) == 1, "an earlier case left the cluster without exactly one coordinator"
    before = fleet.epoch()
    mark = time.monotonic_ns()  # (every event of this test is of this process)
    fault.inject(fleet.zk, before)
    fleet.grow()
    fleet.produce(100)
    state = fleet.converged(before)
    fleet.consumed_all()

    events = list(read_journal(journal))
    since = [e for e in events if e.mono_ns >= mark]
    if fault.zombie:
        fleet.zombies.add(before)
    assert s1_violations(events, fleet.zombies) == []
    assert stale_refusals(since) == [], "consumers refused the new coordinator's commands (S5 stall)"
    check_records(journal)
    # The new epoch is on record where the next election reads it, and the coordinator znode is the acting one's.
    info = CoordinatorInfo.decode(fleet.zk.get(paths.COORDINATOR)[0])
    assert info.epoch == state.epoch == decode_int("epoch", fleet.zk.get(paths.COORDINATOR_EPOCH)[0])
    assert info.broker_id == fleet.cluster.acting()[0]
    assert fleet.zk.exists(paths.COORDINATOR).ephemeralOwner != 0  # type: ignore[union-attr]
    # Both consumers applied a command of the new epoch.
    applied = {e.fields["consumer"] for e in since if e.event == "command.applied" and e.fields["epoch"] == state.epoch}
    assert applied == {c.consumer_id for c in fleet.consumers}


# --- real processes ------------------------------------------------------------------------------------------------


def test_real_brokers_and_consumers_recover_from_faults_in_turn(zk_hosts: str, tmp_path: Path) -> None:
    journal, data = tmp_path / "journal", tmp_path / "data"
    common = ["--zk", zk_hosts, "--session-timeout", "2", "--journal", str(journal)]
    with ExitStack() as stack:
        zk = stack.enter_context(ZkClient(ZkConfig.from_string(zk_hosts)))

        def spawn(name: str, *args: str) -> ChildProcess:
            return stack.enter_context(ChildProcess([*args, *common], tmp_path / f"{name}.log"))

        def coordinator() -> CoordinatorInfo | None:
            with contextlib.suppress(ZkCoordError):
                return CoordinatorInfo.decode(zk.get(paths.COORDINATOR)[0])
            return None

        def converged(above: int, partitions: int) -> bool:
            info = coordinator()
            try:
                state = GroupState.decode(zk.get(paths.group_state(GROUP))[0])
            except ZkCoordError:  # not there yet
                return False
            return (
                info is not None
                and info.epoch > above
                and state.epoch == info.epoch
                and state.phase is GroupPhase.STABLE
                and len(state.members) == 2
                and set(state.target.get(TOPIC, {})) == set(range(partitions))
            )

        for broker in (1, 2):
            spawn(f"broker-{broker}", "broker", "--id", str(broker))
        wait_until(lambda: coordinator() is not None, 30, "a coordinator")
        admin = TopicAdmin(zk)
        partitions = 2
        admin.create(TOPIC, partitions)
        for n in range(2):
            spawn(f"consumer-{n}", "consume", "--group", GROUP, "--topic", TOPIC, "--data-dir", str(data),
                  "--auto-commit-interval", "0.2")  # fmt: skip
        wait_until(lambda: converged(0, partitions), 30, "the group STABLE")
        producer = spawn("producer", "produce", TOPIC, "--count", "2000", "--rate", "400", "--data-dir", str(data))

        def consumed() -> int:
            return sum(sum(c.values()) for c in Ledger.read(journal, GROUP).consumed.values())

        epochs = []
        for fault in (FAULTS[0], FAULTS[5], FAULTS[10], FAULTS[4]):  # garbage node, "abc", epoch deleted, persistent
            info = coordinator()
            assert info is not None
            epochs.append(info.epoch)
            fault.inject(zk, info.epoch)
            partitions += 1
            admin.alter(TOPIC, partitions)
            wait_until(lambda: converged(epochs[-1], partitions), 20, f"recovery from {fault.name}")  # noqa: B023
            count = consumed()
            wait_until(lambda: consumed() > count, 10, f"consumption after {fault.name}")  # noqa: B023
        assert producer.wait(30) == 0
        wait_until(lambda: not Ledger.read(journal, GROUP).missing(), 30, "every record consumed")
        events = list(read_journal(journal))
        zombies = {epochs[3]}  # the persistent replacement took the holder's node away
        assert s1_violations(events, zombies) == []
        assert stale_refusals(events) == []
        ledger = check_records(journal)
        assert ledger.total_produced() == 2000
        # Each consumer saw the epochs only grow.
        applied = [e for e in events if e.event == "command.applied"]
        for consumer in {e.fields["consumer"] for e in applied}:
            seen = [e.fields["epoch"] for e in applied if e.fields["consumer"] == consumer]
            assert seen == sorted(seen)


# --- the one state only a person can leave ------------------------------------------------------------------------


def test_an_epoch_at_the_largest_value_stops_elections_until_a_person_fixes_it(zk_hosts: str, tmp_path: Path) -> None:
    with ExitStack() as stack:
        cluster = Cluster(zk_hosts, tmp_path / "journal", stack)
        cluster.broker(1)
        wait_until(lambda: cluster.acting() == [1], 10, "broker 1 coordinating")
        TopicAdmin(cluster.admin_zk).create(TOPIC, 2)
        member = cluster.consumer(GROUP, {TOPIC: 1})
        cluster.wait_stable(GROUP, 1)
        member.wait_for(lambda c: c.fetching)
        # Valid (a Java long), so taken as the highest epoch on record: no next epoch exists.
        cluster.admin_zk.set(paths.COORDINATOR_EPOCH, str(2**63 - 1).encode())
        TopicAdmin(cluster.admin_zk).alter(TOPIC, 3)  # a write: the coordinator is fenced and hands back

        def said() -> list[JournalEvent]:
            return [e for e in cluster.events("input.rejected") if "largest" in e.fields["reason"]]

        wait_until(lambda: bool(said()), 10, "the broker to say that no epoch is left")
        assert cluster.acting() == []
        assert cluster.admin_zk.exists(paths.COORDINATOR) is None
        assert cluster.brokers[1].registered.is_set(), "the broker must keep running"
        assert member.fetching and member.owned == {TOPIC: {0: f"{member.consumer_id}-0", 1: f"{member.consumer_id}-0"}}
        # A person sets a valid epoch: the brokers watch the epoch znode while they wait, so coordination resumes
        # at once (well before the quiet periodic attempt), and the change made meanwhile is acted on.
        cluster.admin_zk.set(paths.COORDINATOR_EPOCH, b"100")
        wait_until(lambda: cluster.acting() == [1], BLOCKED_RETRY_S / 2, "broker 1 coordinating again")
        assert cluster.coordinator(1).term.epoch == 101  # type: ignore[union-attr]
        member.wait_for(lambda c: len(c.owned.get(TOPIC, {})) == 3)
        assert len(said()) == 1
