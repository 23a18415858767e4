"""Hostile group state: a group's znodes damaged under a running group, the way an operator's mistake or a buggy
client would, then the join or failover that exposes it.  Real ZooKeeper, real broker, consumer and producer
processes, real signals; every case checks, from the journals, S2 (no partition fetched by two consumers at
overlapping times), S3 (every record produced consumed), S4 (nothing consumed twice: no consumer crashes here), and
that the group converges by itself within a deadline.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.clusters import Cluster
from tests.integration.test_consumer_e2e import Run
from tests.ledger import Ledger, uncommitted_tails
from zkcoord.data.topics import TopicAdmin
from zkcoord.errors import NodeExistsError, NotEmptyError, ZkCoordError
from zkcoord.layout import paths
from zkcoord.layout.commands import CommandOption
from zkcoord.layout.group_state import GroupPhase, GroupState
from zkcoord.layout.registrations import CoordinatorInfo, MemberRegistration
from zkcoord.runtime.journal import read_journal
from zkcoord.testbed.procs import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

GROUP, TOPIC = "g", "t"

#: registration data no codec accepts, each a different way to be wrong
BAD_REGISTRATIONS = {
    "invalid-json": b'{"pattern":',
    "wrong-types": b'{"pattern":"static","subscription":{"t":"two"},"timestamp":7,"version":1}',
    "huge-threads": b'{"pattern":"static","subscription":{"t":1000000000},"timestamp":"1","version":1}',
    "non-utf8": b"\xff\xfe\x00garbage",
    "empty": b"",
}


@pytest.fixture
def run(zk_hosts: str, tmp_path: Path) -> Iterator[Run]:
    with ExitStack() as stack:
        yield Run(zk_hosts, tmp_path, stack)


def _members(run: Run) -> list[str]:
    return sorted(run.zk.get_children(paths.group_ids(GROUP)))


def _state(run: Run) -> GroupState | None:
    return run.state(GROUP)


def _coordinator(run: Run) -> int | None:
    try:
        return CoordinatorInfo.decode(run.zk.get(paths.COORDINATOR)[0]).broker_id
    except ZkCoordError:  # absent between terms
        return None


def _balanced(run: Run, members: int, partitions: int) -> bool:
    """STABLE with ``members`` members, each owning its share of the ``partitions`` (so none is left out)."""
    state = _state(run)
    if state is None or state.phase is not GroupPhase.STABLE or len(state.members) != members:
        return False
    owners = [thread.rsplit("-", 1)[0] for parts in state.target.values() for thread in parts.values()]
    return len(owners) == partitions and all(owners.count(m) == partitions // members for m in state.members)


def _check_clean(run: Run, produced: int, *, fenced_tails: bool = False) -> Ledger:
    """S3 within a deadline, then S2 and S4: no consumer crashed, so no duplicate at all -- except, with
    ``fenced_tails``, what a member whose registration was deleted under it had consumed and not committed (the bound
    docs/protocol.md states: to the coordinator it was gone, as after a session loss)."""
    ledger = run.wait_consumed_all(GROUP, {TOPIC}, timeout=60)
    assert ledger.total_produced({TOPIC}) == produced
    assert ledger.overlaps() == [], "S2: a partition was fetched by two consumers at overlapping times"
    tails = uncommitted_tails(run.journal, GROUP) if fenced_tails else {}
    dups = {tp: len(o - tails.get(tp, set())) for tp, o in ledger.duplicates().items() if o - tails.get(tp, set())}
    assert dups == {}, f"S4: offsets consumed twice with no crash (beyond a fenced member's uncommitted tail): {dups}"
    return ledger


def _delete_tree(run: Run, node: str) -> None:
    """Delete ``node`` and everything under it, as an operator's ``deleteall`` does, again while its live members
    create children in it (a member re-registers as soon as its registration is deleted)."""

    def deleted() -> bool:
        try:
            run.zk.delete(node, recursive=True)
        except NotEmptyError:
            return False
        return True

    wait_until(deleted, 10, f"{node} deleted")


def _produce(run: Run, count: int, rate: int = 2000) -> None:
    assert run.producer(TOPIC, count, rate).wait(60) == 0


def _events(run: Run, kind: str) -> list[dict[str, object]]:
    return [e.fields for e in read_journal(run.journal) if e.event == kind]


# --- item 1: a member whose registration cannot be read -----------------------------------------------------------


@pytest.mark.parametrize("bad", sorted(BAD_REGISTRATIONS))
def test_a_damaged_registration_then_a_join_and_a_failover_keep_s2_s3_s4(run: Run, bad: str) -> None:
    coordinator = run.broker(1)
    run.broker(2)  # the standby
    TopicAdmin(run.zk).create(TOPIC, 2)
    run.consumer(GROUP, TOPIC)
    run.wait_members(GROUP, 1)
    [first] = _members(run)
    run.zk.set(paths.member(GROUP, first), BAD_REGISTRATIONS[bad])
    run.consumer(GROUP, TOPIC)
    run.wait_members(GROUP, 2)
    _produce(run, 400)
    assert _coordinator(run) == 1
    # SIGTERM the coordinator: the standby takes over and reads the group afresh (the first coordinator had read the
    # registration before it was damaged, and never reads a known registration again).
    coordinator.signal(signal.SIGTERM)
    assert coordinator.wait(20) == 0
    wait_until(lambda: _coordinator(run) == 2, 30, "broker 2 to take over")
    _produce(run, 400)
    _check_clean(run, 800)
    wait_until(lambda: _balanced(run, 2, 2), 30, "the group balanced over both members")
    data, _ = run.zk.get(paths.member(GROUP, first))
    MemberRegistration.decode(data)  # repaired by its own consumer
    assert any(e["consumer"] == first for e in _events(run, "registration.repaired"))


def test_the_coordinator_stops_an_unreadable_member_first_and_gives_it_its_share_once_repaired(
    zk_hosts: str, tmp_path: Path
) -> None:
    """The coordinator's rule alone (a scripted member, which never repairs its registration): a member it cannot
    read that holds partitions is stopped before any of them moves, gets nothing while unreadable, is journalled,
    and gets its share as soon as its registration is readable again (a data watch, no membership change)."""
    with ExitStack() as stack:
        cluster = Cluster(zk_hosts, tmp_path / "journal", stack)
        cluster.broker(1)
        wait_until(lambda: cluster.acting() == [1], 10, "broker 1 coordinating")
        cluster.broker(2)
        TopicAdmin(cluster.admin_zk).create(TOPIC, 2)
        a = cluster.consumer(GROUP, {TOPIC: 1})
        cluster.wait_stable(GROUP, 1)
        path = paths.member(GROUP, a.consumer_id)
        good, _ = cluster.admin_zk.get(path)
        cluster.admin_zk.set(path, BAD_REGISTRATIONS["invalid-json"])
        cluster.brokers[1].stop()
        wait_until(lambda: cluster.acting() == [2], 20, "broker 2 to take over")
        b = cluster.consumer(GROUP, {TOPIC: 1})
        b.wait_for(lambda c: len(c.partitions()) == 2)
        state = cluster.wait_stable(GROUP, 1)
        assert a.partitions() == set()
        # a held both partitions: whichever coordinator read the damaged registration first stopped it (and gave it
        # nothing) before any of them moved -- broker 1 through its data watch on the registration, before it was
        # stopped, or broker 2 at its takeover; once it held nothing it was left out of later rebalances (a
        # registration holding nothing blocks nobody).  A stop and a start may share a generation (its stop step
        # comes first), and the stop may be broker 1's, which need not have seen it acknowledged before it stopped:
        # order a's stop and b's first start as the two members applied them, on this process's monotonic clock.
        stops = [s.at_ns for s in a.seen if s.command is not None and s.command.option is CommandOption.STOP_FETCHER]
        starts = [s.at_ns for s in b.seen if s.command is not None and s.command.ownership]
        assert stops, f"a was never stopped: {a.seen}"
        assert starts and min(stops) < min(starts), "b started before a stopped"
        assert not [c for c in a.commands(CommandOption.START_FETCHER) if c.epoch == state.epoch and c.ownership]
        assert cluster.events("member.unreadable", consumer=a.consumer_id)
        cluster.admin_zk.set(path, good)  # repaired: seen through the watch on the unreadable registration
        a.wait_for(lambda c: len(c.partitions()) == 1)
        b.wait_for(lambda c: len(c.partitions()) == 1)
        assert a.partitions().isdisjoint(b.partitions())


# --- item 2: a subtree of the group deleted under it ---------------------------------------------------------------

#: subtree -> whether it is deleted right after the join (concurrently with the rebalance) rather than before it
SUBTREES = {
    "owners": False,
    "owners-during-join": True,
    "channel": False,
    "offsets": False,
    "state": False,
    "ids": False,
}


@pytest.mark.parametrize("subtree", sorted(SUBTREES))
def test_a_subtree_deleted_under_a_running_group_then_a_join_keeps_s2_s3_s4(run: Run, subtree: str) -> None:
    run.broker(1)
    TopicAdmin(run.zk).create(TOPIC, 3)
    run.consumer(GROUP, TOPIC)
    run.wait_members(GROUP, 1)
    run.consumer(GROUP, TOPIC)
    run.wait_members(GROUP, 2)  # two generations in at least: a lost state must not send the count back (S5)
    _produce(run, 300)
    wait_until(lambda: not Ledger.read(run.journal, GROUP).missing({TOPIC}), 30, "the first records consumed")
    node = f"{paths.group(GROUP)}/{subtree.split('-', 1)[0]}"
    if not SUBTREES[subtree]:
        _delete_tree(run, node)
    run.consumer(GROUP, TOPIC)
    if SUBTREES[subtree]:
        _delete_tree(run, node)
    _produce(run, 300)
    wait_until(lambda: _balanced(run, 3, 3), 30, "the group balanced over its three members")
    _produce(run, 300)
    # Deleting ids deletes every registration under its live session: each member stops and registers again, and
    # the coordinator may move its partitions before its last commit lands (the bound docs/protocol.md states).
    _check_clean(run, 900, fenced_tails=subtree == "ids")
    stale = [e["reason"] for e in _events(run, "command.rejected") if "stale" in str(e["reason"])]
    assert stale == [], "S5: a command of the current coordinator was refused as stale"


# --- item 6: an owner znode that cannot be decoded -----------------------------------------------------------------

BAD_OWNERS = {"non-utf8": b"\xff\xfe\xfd", "empty": b"", "not-a-thread": b"{}"}


@pytest.mark.parametrize("bad", sorted(BAD_OWNERS))
def test_a_damaged_owner_znode_under_its_live_owner_then_a_join_converges_and_consumes(run: Run, bad: str) -> None:
    run.broker(1)
    TopicAdmin(run.zk).create(TOPIC, 2)
    run.consumer(GROUP, TOPIC)
    run.wait_members(GROUP, 1)
    _produce(run, 300)
    wait_until(lambda: not Ledger.read(run.journal, GROUP).missing({TOPIC}), 30, "the first records consumed")
    run.zk.set(paths.owner(GROUP, TOPIC, 0), BAD_OWNERS[bad])
    _produce(run, 300)
    run.consumer(GROUP, TOPIC)
    wait_until(lambda: _balanced(run, 2, 2), 30, "the group balanced over both members")
    _produce(run, 300)
    _check_clean(run, 900)
    state = _state(run)
    assert state is not None
    for p, thread in state.target[TOPIC].items():  # the registry says what the target says: repaired
        assert run.zk.get(paths.owner(GROUP, TOPIC, p))[0].decode() == thread


# --- a live member's registration replaced, its owner znode taken: the member must stop before it answers ------------


def _create_over_the_member(run: Run, path: str, data: bytes) -> None:
    """Create a persistent registration at ``path``; if its member registered again first (it notices the deletion
    while a joiner starts), replace that one in one transaction: someone else's registration at its id either way."""
    try:
        run.zk.create(path, data)
    except NodeExistsError:
        txn = run.zk.transaction()
        txn.delete(path)
        txn.create(path, data)
        txn.commit()


@pytest.mark.parametrize("order", ["recreated-at-once", "recreated-after-a-join"])
def test_a_registration_replaced_by_someone_else_makes_its_member_stop_and_register_again(run: Run, order: str) -> None:
    """Someone deletes a live member's registration and creates another at its id (persistent, not the member's
    session).  The coordinator addresses that other registration from then on; the member refuses its commands, and
    a refusal deletes a command, which the coordinator takes for an acknowledgement.  So the member must have stopped
    before it refuses anything, and it takes its id back (S2); everything is consumed once (S3, S4)."""
    run.broker(1)
    TopicAdmin(run.zk).create(TOPIC, 2)
    run.consumer(GROUP, TOPIC)
    run.wait_members(GROUP, 1)
    [first] = _members(run)
    _produce(run, 300)
    wait_until(lambda: not Ledger.read(run.journal, GROUP).missing({TOPIC}), 30, "the first records consumed")
    path = paths.member(GROUP, first)
    data, _ = run.zk.get(path)
    run.zk.delete(path)
    if order == "recreated-after-a-join":
        run.consumer(GROUP, TOPIC)
    _create_over_the_member(run, path, data)
    if order == "recreated-at-once":
        run.consumer(GROUP, TOPIC)
    _produce(run, 300)
    wait_until(lambda: _balanced(run, 2, 2), 30, "the group balanced over both members")
    _produce(run, 300)
    ledger = run.wait_consumed_all(GROUP, {TOPIC}, timeout=60)
    assert ledger.overlaps() == [], "S2: a partition was fetched by two consumers at overlapping times"
    # To the coordinator the member was gone (fenced, as by a session loss): what it had consumed but not committed
    # may be consumed again, nothing else.
    tails = uncommitted_tails(run.journal, GROUP)
    beyond = {tp: len(o - tails.get(tp, set())) for tp, o in ledger.duplicates().items() if o - tails.get(tp, set())}
    assert beyond == {}, f"S4: consumed twice beyond the fenced member's uncommitted tail: {beyond}"
    stat = run.zk.exists(path)
    assert stat is not None and stat.ephemeralOwner != 0, "the member took its id back with its own registration"
    assert any(e["consumer"] == first for e in _events(run, "registration.repaired"))
