"""The consumer protocol's assignment channel (``assignment/<c>`` written by the coordinator, ``ack/<c>`` by the
member) under hostile state and faults: a stale acknowledgement, a deposed coordinator's write, a member that misses
its watch's fire, a failover while a revocation is in flight.

Real ZooKeeper, coordinators in this process (``Cluster``), scripted members (``ScriptedConsumer``) where the test
plays the member's side, real in-process consumers where the consumer's own judgement is under test.  Each test
checks what must hold afterwards: nobody takes a partition its previous owner has not released (S2), every partition
is fetched again (convergence).
"""

from __future__ import annotations

import time
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.clusters import Cluster
from tests.integration.test_consumer import make, polling, produce
from tests.ledger import Ledger
from zkcoord.consumer import Consumer
from zkcoord.data.topics import TopicAdmin
from zkcoord.errors import BadVersionError, CodecError, NoNodeError
from zkcoord.layout import paths
from zkcoord.layout.commands import Command, CommandOption
from zkcoord.layout.group_state import GroupPhase
from zkcoord.layout.kip848 import AssignmentAck
from zkcoord.runtime.journal import JournalEvent
from zkcoord.testbed.procs import wait_until
from zkcoord.zk import ZkClient

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _ack(zk: ZkClient, group: str, member: str) -> AssignmentAck | None:
    try:
        return AssignmentAck.decode(zk.get(paths.ack(group, member))[0])
    except (NoNodeError, CodecError):
        return None


def test_a_stale_acknowledgement_is_not_taken_for_the_revocation_in_flight(cluster: Cluster) -> None:
    """A member told to revoke never acknowledges; its previous acknowledgement (of the start it was given) is
    written again -- a retry landing late.  It names an earlier write than the stop in flight: ignored, so the
    member is fenced at its rebalance timeout and the joiner is granted nothing before that (S2)."""
    cluster.broker(1, rebalance_timeout_s=1.0, fence_grace_s=3.0)
    TopicAdmin(cluster.admin_zk).create("t", 4)
    hung = cluster.consumer("h", {"t": 1}, consumer_protocol=True)
    hung.wait_for(lambda c: len(c.partitions()) == 4)
    zk = cluster.admin_zk
    wait_until(lambda: _ack(zk, "h", hung.consumer_id) is not None, 10, "the start acknowledged")
    previous = _ack(zk, "h", hung.consumer_id)
    assert previous is not None and not previous.refused, "the start was acknowledged in ack/<c>"
    hung.ack = False  # from here it acknowledges nothing (read at every command)
    joiner = cluster.consumer("h", {"t": 1}, consumer_protocol=True)

    def stop_sent() -> bool:
        return bool(cluster.events("command.sent", consumer=hung.consumer_id, option="stop-fetcher"))

    wait_until(stop_sent, 10, "the stop written to the hung member")
    written = zk.exists(paths.assignment("h", hung.consumer_id))
    assert written is not None and written.mzxid > previous.assignment
    zk.set(paths.ack("h", hung.consumer_id), previous.encode())  # the earlier acknowledgement, again
    wait_until(lambda: bool(cluster.events("kip848.member_fenced")), 10, "the hung member fenced")
    [fenced] = cluster.events("kip848.member_fenced")
    assert fenced.fields["consumer"] == hung.consumer_id
    acked = cluster.events("command.acked", consumer=hung.consumer_id, option="stop-fetcher")
    assert acked == [], f"a stale acknowledgement was taken for the stop in flight: {acked}"
    grants = [e for e in cluster.events("command.sent", consumer=joiner.consumer_id) if e.fields["partitions"] >= 3]
    assert all(g.mono_ns > fenced.mono_ns for g in grants), "the joiner was granted the hung member's partitions"


def test_a_deposed_coordinators_assignment_is_refused_and_the_member_keeps_fetching(
    cluster: Cluster, tmp_path: Path
) -> None:
    """The member applied its assignment from coordinator epoch 2; a write of epoch 1 (a deposed coordinator's,
    vouched for by a state write in the same transaction) lands in its assignment znode: a stop of everything.  The
    member refuses it as stale, acknowledges it as refused (naming that write), and goes on fetching."""
    cluster.broker(1)
    TopicAdmin(cluster.admin_zk).create("t", 2)
    wait_until(lambda: bool(cluster.events("coordinator.elected")), 10, "the first coordinator elected")
    cluster.brokers[1].stop()
    cluster.broker(2)
    data = tmp_path / "data"
    produce(data, "t", 2, 10)
    zk = cluster.admin_zk
    with ExitStack() as stack:
        consumer = make(cluster, data, stack, rebalance="consumer")
        wait_until(polling([consumer], lambda: len(consumer.assignment()) == 2), 20, "the member fetching both")

        def applied_events() -> list[JournalEvent]:
            return cluster.events("command.applied", consumer=consumer.consumer_id)

        wait_until(lambda: bool(applied_events()), 10, "the start journalled as applied")
        [applied] = applied_events()
        assert applied.fields["epoch"] == 2
        wait_until(polling([consumer], lambda: cluster.state("g").phase is GroupPhase.STABLE), 10, "the group stable")
        state_path = paths.group_state("g")
        registration = zk.exists(paths.member("g", consumer.consumer_id))
        assert registration is not None
        stale = Command(
            CommandOption.STOP_FETCHER,
            1,
            int(applied.fields["generation"]),
            "g",
            {},
            int(time.time() * 1000),
            incarnation=registration.czxid,
        )
        written: list[int] = []

        def forge() -> bool:
            # With a state write in the same transaction, as a coordinator writes; conditional on the state read, so
            # a write of the live coordinator in between (a late step of the join) makes the test forge again.
            state, stat = zk.get(state_path)
            txn = zk.transaction()
            txn.set_data(state_path, state, stat.version)
            txn.set_data(paths.assignment("g", consumer.consumer_id), stale.encode())
            try:
                written.append(txn.commit()[-1].mzxid)
            except BadVersionError:
                return False
            return True

        wait_until(forge, 10, "the stale write landed")
        zxid = written[0]

        def refused() -> bool:
            return _ack(zk, "g", consumer.consumer_id) == AssignmentAck(zxid, refused=True)

        wait_until(polling([consumer], refused), 10, "the stale write acknowledged as refused")
        name = f"assignment-{zxid}"
        [rejected] = cluster.events("command.rejected", consumer=consumer.consumer_id, name=name)
        assert "stale" in rejected.fields["reason"]
        assert not cluster.events("command.applied", name=name), "the stale stop was applied"
        assert len(consumer.assignment()) == 2, "the member stopped fetching"


def test_a_member_that_misses_every_watch_fire_still_converges(
    cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two consumer-protocol members whose assignment watches never reach their command threads (each fire lost):
    they hear every write through their heartbeat's round trip instead, revoke before the other starts (S2), and
    the group converges, one partition each."""
    cluster.broker(1)
    TopicAdmin(cluster.admin_zk).create("t", 2)
    data = tmp_path / "data"
    produce(data, "t", 2, 20)
    lost: list[str] = []

    def deaf(self: object, _event: object) -> None:
        lost.append("fire")

    monkeypatch.setattr("zkcoord.consumer.assignment.AssignmentReader._fired", deaf)
    with ExitStack() as stack:
        first = make(cluster, data, stack, rebalance="consumer", auto_commit=False)
        wait_until(polling([first], lambda: len(first.assignment()) == 2), 20, "the first member fetching both")
        second = make(cluster, data, stack, rebalance="consumer", auto_commit=False)
        both = [first, second]
        wait_until(
            polling(both, lambda: len(first.assignment()) == 1 and len(second.assignment()) == 1),
            30,
            "one partition each",
        )
        wait_until(polling(both, lambda: cluster.state("g").phase is GroupPhase.STABLE), 20, "the group stable")
    assert lost, "no watch fired: the test did not exercise a missed fire"
    ledger = Ledger.read(cluster.journal_dir, "g")
    assert ledger.overlaps() == [], "S2: a partition was fetched by two members at overlapping times"


def test_a_successor_waits_for_the_revocation_its_predecessor_wrote(cluster: Cluster) -> None:
    """The coordinator stops while a member's stop is in flight (written, not acknowledged).  Its successor reads
    the assignment and its acknowledgement back: it waits for that stop (never writes it twice), takes the member's
    acknowledgement of its predecessor's write, and only then grants the joiner the released partitions (S2)."""
    cluster.broker(1, rebalance_timeout_s=30.0)
    cluster.broker(2, rebalance_timeout_s=30.0)
    TopicAdmin(cluster.admin_zk).create("t", 4)
    old = cluster.consumer("f", {"t": 1}, consumer_protocol=True, stop_ack_delay_s=3.0)
    old.wait_for(lambda c: len(c.partitions()) == 4)
    joiner = cluster.consumer("f", {"t": 1}, consumer_protocol=True)

    def stop_sent() -> bool:
        return bool(cluster.events("command.sent", consumer=old.consumer_id, option="stop-fetcher"))

    wait_until(stop_sent, 10, "the stop written by the first coordinator")
    cluster.brokers[1].stop()
    joiner.wait_for(lambda c: len(c.partitions()) == 2, timeout=30)
    old.wait_for(lambda c: len(c.partitions()) == 2)
    resumed = [e for e in cluster.events("kip848.resumed") if e.fields["epoch"] == 2]
    assert resumed and resumed[0].fields["in_flight"] == 1, f"the stop was not taken as in flight: {resumed}"
    assert len(old.commands(CommandOption.STOP_FETCHER)) == 1, "the stop was written twice"
    [acked] = cluster.events("command.acked", consumer=old.consumer_id, option="stop-fetcher")
    assert acked.fields["epoch"] == 2, "the successor took the acknowledgement of its predecessor's write"

    def grants() -> list[JournalEvent]:
        sent = cluster.events("command.sent", consumer=joiner.consumer_id)
        return [e for e in sent if e.fields["partitions"] >= 1]

    # The coordinator journals a grant right after the transaction that writes it, which the joiner may act on
    # first: on a loaded machine the event can follow the joiner's start by a moment.
    wait_until(lambda: bool(grants()), 10, "the joiner's grant journalled")
    assert all(g.mono_ns > acked.mono_ns for g in grants()), "granted before the stop was acknowledged"
    assert not old.partitions() & joiner.partitions()


def test_consumers_reach_their_assignment_with_fetching_members(cluster: Cluster, tmp_path: Path) -> None:
    """Sanity of the channel with real consumers: each step's assignment is acknowledged in ``ack/<c>`` by the
    zxid of the write it handled."""
    cluster.broker(1)
    TopicAdmin(cluster.admin_zk).create("t", 2)
    data = tmp_path / "data"
    produce(data, "t", 2, 5)
    with ExitStack() as stack:
        consumer: Consumer = make(cluster, data, stack, rebalance="consumer")
        wait_until(polling([consumer], lambda: len(consumer.assignment()) == 2), 20, "the member fetching both")
        written = cluster.admin_zk.exists(paths.assignment("g", consumer.consumer_id))
        assert written is not None
        wait_until(
            lambda: _ack(cluster.admin_zk, "g", consumer.consumer_id) == AssignmentAck(written.mzxid),
            10,
            "the acknowledgement naming the write",
        )
