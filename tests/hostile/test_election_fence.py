"""Hostile state around the election, part two (issue 14, item 3; a review of the first part): the fence of a deposed
coordinator after the epoch znode was deleted, epochs lowered after a repair once the brokers restart, the deletion
of a left-over coordinator znode racing an election, and the two states only a person can fix (a coordinator znode
with children, the largest epoch) -- each said once, and left as soon as the person fixed it.

The rules under test (``docs/protocol.md``, "Bad state"; ``zkcoord/coordinator/election.py``, ``seat.py``):

* every write of a term also checks the term's own node, ``/consumers/coordinator_terms/<epoch>``, which the next
  election deletes and no election recreates (epochs only grow), so a deposed coordinator stays fenced whatever
  happened to the epoch znode (S1);
* the next epoch is above every record of an epoch (the epoch znode's value and version, the term nodes, the group
  states, what the broker has seen), whichever of them was lowered (S5);
* the deletion of one's own left-over coordinator znode checks the epoch znode's version read before it (S1).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from tests.clusters import Cluster
from tests.hostile.test_election import TOPIC, Fleet, s1_violations, stale_refusals
from zkcoord.coordinator.election import Fence, try_elect
from zkcoord.coordinator.seat import BLOCKED_RETRY_S, Seat
from zkcoord.data.topics import TopicAdmin
from zkcoord.errors import FencedError
from zkcoord.layout import paths
from zkcoord.layout.registrations import CoordinatorInfo
from zkcoord.layout.znodes import decode_int
from zkcoord.runtime.journal import Journal, JournalEvent, read_journal
from zkcoord.testbed.procs import wait_until
from zkcoord.zk import Transaction, ZkClient, ZkConfig

pytestmark = pytest.mark.integration


def _clients(zk_hosts: str, stack: ExitStack, count: int) -> list[ZkClient]:
    return [stack.enter_context(ZkClient(ZkConfig.from_string(zk_hosts))) for _ in range(count)]


# --- S1: the fence of a deposed term ------------------------------------------------------------------------------


def test_a_deposed_term_stays_fenced_after_the_epoch_znode_was_deleted(zk_hosts: str) -> None:
    with ExitStack() as stack:
        a, b, admin = _clients(zk_hosts, stack, 3)
        journal = Journal(None, "coordinator")
        term_a = try_elect(a, 1, journal, 0)
        assert term_a is not None and (term_a.epoch, term_a.epoch_version) == (1, 1)
        fence_a = Fence(a, term_a)  # A pauses here, its session alive: a zombie once its node is gone
        admin.delete(paths.COORDINATOR)
        term_b = try_elect(b, 2, journal, 0)
        assert term_b is not None and term_b.epoch == 2
        admin.delete(paths.COORDINATOR_EPOCH)
        b.delete(paths.COORDINATOR)  # B hands the election back (as after its own fence failed) and wins again
        term_b2 = try_elect(b, 2, journal, 0, known=term_b.epoch)
        assert term_b2 is not None and term_b2.epoch == 3
        # The recreated epoch znode handed out A's version again, and B's node is at version 0 like A's was.
        assert term_b2.epoch_version == term_a.epoch_version

        txn = fence_a.transaction()
        txn.create("/consumers/deposed-write")
        with pytest.raises(FencedError):
            fence_a.commit(txn)
        assert admin.exists("/consumers/deposed-write") is None
        fence_b = Fence(b, term_b2)
        txn = fence_b.transaction()
        txn.create("/consumers/current-write")
        fence_b.commit(txn)
        assert admin.get_children(paths.COORDINATOR_TERMS) == ["3"]


def test_a_zombie_coordinator_stays_fenced_after_the_epoch_znode_was_deleted(zk_hosts: str, tmp_path: Path) -> None:
    journal = tmp_path / "journal"
    with ExitStack() as stack:
        cluster = Cluster(zk_hosts, journal, stack)
        cluster.broker(1)
        wait_until(lambda: cluster.acting() == [1], 10, "broker 1 coordinating")
        cluster.broker(2)
        TopicAdmin(cluster.admin_zk).create("t", 4)
        first = cluster.consumer("g", {"t": 1})
        cluster.wait_stable("g", 1)
        # Broker 1's node is taken while its session lives on: broker 2 wins epoch 2, broker 1 is a zombie.
        cluster.admin_zk.delete(paths.COORDINATOR)
        wait_until(lambda: cluster.acting() == [1, 2], 10, "broker 2 elected beside the zombie")
        # The epoch znode is deleted, and broker 2 re-elected (its node rewritten: it resigns and hands back) at
        # epoch 3 -- with the epoch znode at version 1 again, the version broker 1's term was fenced with.
        cluster.admin_zk.delete(paths.COORDINATOR_EPOCH)
        cluster.admin_zk.set(paths.COORDINATOR, CoordinatorInfo(2, 2, 0).encode())

        def reelected() -> bool:
            term = cluster.coordinator(2).term
            return term is not None and term.epoch == 3

        wait_until(reelected, 10, "broker 2 re-elected at epoch 3")
        zombie_term, current_term = cluster.coordinator(1).term, cluster.coordinator(2).term
        assert zombie_term is not None and current_term is not None
        assert zombie_term.epoch_version == current_term.epoch_version == 1
        mark = time.monotonic_ns()
        second = cluster.consumer("g", {"t": 1})  # a change both coordinators act on
        wait_until(lambda: bool(cluster.events("coordinator.resigned", broker=1)), 10, "broker 1 to resign")
        reason = cluster.events("coordinator.resigned", broker=1)[0].fields["reason"]
        assert reason.startswith("fenced") and paths.coordinator_term(1) in reason
        state = cluster.wait_stable("g", 2)
        assert state.epoch == 3
        events = list(read_journal(journal))
        assert [e for e in events if e.event == "command.sent" and e.role == "broker-1" and e.mono_ns >= mark] == []
        assert s1_violations(events, zombies={1, 2}) == []
        for consumer in (first, second):
            assert consumer.commands()[-1].epoch == 3


# --- S1: deleting one's own left-over node, racing an election ----------------------------------------------------


def test_a_left_over_node_is_not_deleted_once_another_election_replaced_it(
    zk_hosts: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with ExitStack() as stack:
        a, b, admin = _clients(zk_hosts, stack, 3)
        journal = Journal(None, "coordinator")
        assert try_elect(a, 1, journal, 0) is not None  # A's node, left over once A's term ends (A holds no term)
        seat = Seat(a, 1, journal)
        real: Callable[[], Transaction] = a.transaction
        won: list[Any] = []

        def raced() -> Transaction:
            # Between A's reads and its delete: A's node goes (as with a session that expired, the transaction then
            # sent on a new one) and B wins the next election; B's node is at version 0 as A's was.
            if not won:
                admin.delete(paths.COORDINATOR)
                won.append(try_elect(b, 2, journal, 0))
            return real()

        monkeypatch.setattr(a, "transaction", raced)
        assert seat.take(0) is None
        assert won and won[0] is not None
        stat = admin.exists(paths.COORDINATOR)
        assert stat is not None and stat.ephemeralOwner == b.session_id, "B's node was deleted by A's stale decision"


# --- S5: a lowered epoch after a repair, brokers restarted ---------------------------------------------------------


def test_a_lowered_epoch_does_not_go_back_once_the_brokers_restarted(zk_hosts: str, tmp_path: Path) -> None:
    with ExitStack() as stack:
        fleet = Fleet(zk_hosts, tmp_path, stack)
        before = fleet.epoch()
        # An earlier repair (here: a raise by hand) leaves the epoch value far above its znode version.
        fleet.zk.set(paths.COORDINATOR_EPOCH, str(before + 20).encode())
        fleet.grow()
        assert fleet.converged(before).epoch == before + 21
        for broker in fleet.cluster.brokers.values():
            broker.stop()  # (broker 2 may take over from broker 1 before it stops too)
        fleet.cluster.brokers.clear()
        high = decode_int("epoch", fleet.zk.get(paths.COORDINATOR_EPOCH)[0])
        # Lowered by hand while no broker runs: still above its version, and no broker remembers the last epoch.
        version = fleet.zk.exists(paths.COORDINATOR_EPOCH).version  # type: ignore[union-attr]
        low = version + 2
        fleet.zk.set(paths.COORDINATOR_EPOCH, str(low).encode())
        assert version + 1 < low < high
        mark = time.monotonic_ns()
        fleet.cluster.broker(3)
        fleet.cluster.broker(4)
        fleet.grow()
        fleet.produce(100)
        state = fleet.converged(high)
        fleet.consumed_all()
        since = [e for e in read_journal(fleet.cluster.journal_dir) if e.mono_ns >= mark]
        assert stale_refusals(since) == [], "consumers refused the new coordinator's commands (S5 stall)"
        assert state.epoch == high + 1
        assert [e.fields["epoch"] for e in since if e.event == "coordinator.epoch_repaired"] == [high]


# --- states only a person can fix: said once, left as soon as fixed ------------------------------------------------


def _blocked(seat: Seat) -> bool:
    return seat.blocked


def _rejections(cluster: Cluster, path: str) -> list[JournalEvent]:
    return [e for e in cluster.events("input.rejected") if e.fields["path"] == path]


def test_a_coordinator_znode_with_children_is_reported_once_and_left_once_emptied(
    zk_hosts: str, tmp_path: Path
) -> None:
    with ExitStack() as stack:
        cluster = Cluster(zk_hosts, tmp_path / "journal", stack)
        cluster.broker(1)
        wait_until(lambda: cluster.acting() == [1], 10, "broker 1 coordinating")
        TopicAdmin(cluster.admin_zk).create(TOPIC, 2)
        member = cluster.consumer("g", {TOPIC: 1})
        cluster.wait_stable("g", 1)
        member.wait_for(lambda c: c.fetching)
        # Replaced by a persistent node with a child: the holder resigns, and no broker may delete a subtree.
        txn = cluster.admin_zk.transaction()
        txn.delete(paths.COORDINATOR)
        txn.create(paths.COORDINATOR, b"{}")
        txn.create(f"{paths.COORDINATOR}/x")
        txn.commit()
        wait_until(lambda: bool(_rejections(cluster, paths.COORDINATOR)), 10, "the broker to say why it waits")
        assert cluster.acting() == []
        # More election triggers meanwhile (every change of the node reaches the broker): still said once.
        seat = cluster.coordinator(1).seat
        assert seat is not None
        assert seat.blocked
        for n in range(2):  # one at a time: a data watch may see two quick changes as one
            attempts = seat.attempts
            cluster.admin_zk.set(paths.COORDINATOR, b"{}" + b" " * (n + 1))
            wait_until(lambda: seat.attempts > attempts, 5, "another election attempt")  # noqa: B023
        assert len(_rejections(cluster, paths.COORDINATOR)) == 1
        assert member.fetching, "the member must keep fetching"
        # The person removes the child only: the watch on the node's children brings the election back at once --
        # well before the blocked seat's own retry.  (Not counted in attempts: the attempt the last set started may
        # be the one that reads the node after the deletion, and wins.)
        cluster.admin_zk.delete(f"{paths.COORDINATOR}/x")
        wait_until(lambda: cluster.acting() == [1], BLOCKED_RETRY_S / 2, "broker 1 coordinating again")
        assert _blocked(seat) is False
        assert len(_rejections(cluster, paths.COORDINATOR)) == 1
        TopicAdmin(cluster.admin_zk).alter(TOPIC, 3)
        member.wait_for(lambda c: len(c.owned.get(TOPIC, {})) == 3)
