"""Hostile state against what the coordinator believes: a registration rewritten and written back in place, a
channel deleted with a command in flight, an owner znode deleted under its live owner before a failover.  Each
makes ZooKeeper's current content differ from what the coordinator saw or cached; each case checks that the
coordinator goes by what is stored now (or by what the group's state says, where the stored content lies), then
S2, S3 and S4 from the journals, and convergence within a deadline.  Real ZooKeeper, brokers, consumers, signals.
"""

from __future__ import annotations

import dataclasses
import signal
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.integration.test_consumer_e2e import Run
from tests.ledger import Ledger
from zkcoord.consumer.offsets import OffsetCommitFencedError, OffsetStore
from zkcoord.consumer.records import TopicPartition
from zkcoord.data.topics import TopicAdmin
from zkcoord.errors import ZkCoordError
from zkcoord.layout import paths
from zkcoord.layout.group_state import GroupPhase, GroupState, encode_owner
from zkcoord.layout.registrations import CoordinatorInfo, MemberRegistration
from zkcoord.layout.znodes import decode_int
from zkcoord.runtime.journal import read_journal
from zkcoord.testbed.procs import ChildProcess, wait_until
from zkcoord.zk import ZkClient, ZkConfig

pytestmark = [pytest.mark.integration, pytest.mark.slow]

GROUP, TOPIC = "g", "t"
DEADLINE = 30.0


@pytest.fixture
def stack() -> Iterator[ExitStack]:
    with ExitStack() as s:
        yield s


def _coordinator(run: Run) -> int | None:
    try:
        return CoordinatorInfo.decode(run.zk.get(paths.COORDINATOR)[0]).broker_id
    except ZkCoordError:  # absent between terms
        return None


def _events(run: Run, kind: str) -> list[dict[str, object]]:
    return [e.fields for e in read_journal(run.journal) if e.event == kind]


def _members(run: Run) -> list[str]:
    return sorted(run.zk.get_children(paths.group_ids(GROUP)))


def _process_of(run: Run, procs: list[ChildProcess], consumer_id: str) -> ChildProcess:
    return next(p for p in procs if consumer_id in p.log_path.read_text(errors="replace"))


def _shares(state: GroupState | None) -> dict[str, set[tuple[str, int]]]:
    out: dict[str, set[tuple[str, int]]] = {}
    for topic, parts in (state.target if state else {}).items():
        for p, thread in parts.items():
            out.setdefault(thread.rsplit("-", 1)[0], set()).add((topic, p))
    return out


def _stable(run: Run) -> GroupState | None:
    state = run.state(GROUP)
    return state if state is not None and state.phase is GroupPhase.STABLE else None


def _check_clean(run: Run, produced: int, topics: set[str]) -> Ledger:
    """S3 within a deadline, then S2 and S4 (no consumer crashed, so no duplicate at all)."""
    ledger = run.wait_consumed_all(GROUP, topics, timeout=60)
    assert ledger.total_produced(topics) == produced
    assert ledger.overlaps() == [], "S2: a partition was fetched by two consumers at overlapping times"
    dups = {tp: len(offsets) for tp, offsets in ledger.duplicates().items()}
    assert dups == {}, f"S4: offsets consumed twice with no crash: {dups}"
    return ledger


# --- A: a registration rewritten in place, then written back by its consumer ---------------------------------------


def test_a_registration_rewritten_and_written_back_is_used_as_written_back(
    zk_hosts: str, tmp_path: Path, stack: ExitStack
) -> None:
    """The coordinator reads a hostile subscription (a failover makes it read every registration), the member writes
    its own back in place (no listing changes): the coordinator must plan with what is stored now, not keep the
    hostile one cached until the member re-registers."""
    run = Run(zk_hosts, tmp_path, stack, session="8")  # the member is paused below for less than this
    first_broker = run.broker(1)
    run.broker(2)
    admin = TopicAdmin(run.zk)
    admin.create(TOPIC, 2)
    admin.create("u", 2)
    a = run.consumer(GROUP, TOPIC)
    run.wait_members(GROUP, 1)
    [member] = _members(run)
    path = paths.member(GROUP, member)
    own, _ = run.zk.get(path)
    registration = MemberRegistration.decode(own)
    hostile = dataclasses.replace(registration, subscription={"u": 1}).encode()
    a.signal(signal.SIGSTOP)  # it cannot write its registration back until the coordinator has read the hostile one
    try:
        run.zk.set(path, hostile)
        first_broker.signal(signal.SIGTERM)
        assert first_broker.wait(20) == 0
        wait_until(lambda: _coordinator(run) == 2, DEADLINE, "broker 2 to take over")
        wait_until(
            lambda: "u" in (run.state(GROUP) or GroupState(0, GroupPhase.STABLE, 0, {}, {})).target,
            DEADLINE,
            "the successor to plan with the hostile subscription",
        )
    finally:
        a.signal(signal.SIGCONT)
    wait_until(lambda: run.zk.get(path)[0] == own, DEADLINE, "the member to write its registration back")
    run.consumer(GROUP, TOPIC)  # a join: the coordinator plans again (before the fix, with the hostile one cached)

    def balanced_over_t() -> bool:
        shares = _shares(_stable(run))
        return len(shares) == 2 and all(len(s) == 1 and {t for t, _ in s} == {TOPIC} for s in shares.values())

    wait_until(balanced_over_t, DEADLINE, "each member given one partition of t, none of u")
    assert run.producer(TOPIC, 400, 2000).wait(60) == 0
    _check_clean(run, 400, {TOPIC})


# --- B: a channel deleted with a stop-fetcher in it ------------------------------------------------------------


def test_a_channel_deleted_with_a_stop_in_flight_is_not_taken_for_an_acknowledgement(
    zk_hosts: str, tmp_path: Path, stack: ExitStack
) -> None:
    """``deleteall`` of a member's channel while its stop-fetcher is unread (the member paused): the command's
    deletion must not count as the member's acknowledgement -- no barrier is passed without it; the command is
    reported lost and sent again, and the group converges once the member runs again."""
    run = Run(zk_hosts, tmp_path, stack, session="8")
    run.broker(1)
    TopicAdmin(run.zk).create(TOPIC, 4)
    procs = [run.consumer(GROUP, TOPIC) for _ in range(2)]
    run.wait_members(GROUP, 2)
    assert run.producer(TOPIC, 200, 2000).wait(60) == 0
    run.wait_consumed_all(GROUP, {TOPIC})
    before = run.state(GROUP)
    assert before is not None
    victim = _members(run)[0]
    channel = paths.channel(GROUP, victim)
    paused = _process_of(run, procs, victim)
    paused.signal(signal.SIGSTOP)
    try:
        procs.append(run.consumer(GROUP, TOPIC))  # the join: a stop-fetcher to every member
        wait_until(lambda: any("stop" in c for c in run.zk.get_children(channel)), DEADLINE, "a stop in the channel")
        txn = run.zk.transaction()  # as zkCli's deleteall does it: the children and the node in one multi
        for name in run.zk.get_children(channel):
            txn.delete(f"{channel}/{name}")
        txn.delete(channel)
        txn.commit()
        generation = before.generation + 1
        wait_until(
            lambda: (
                any(e["consumer"] == victim for e in _events(run, "command.lost"))
                or any(int(str(e["generation"])) >= generation for e in _events(run, "rebalance.barrier"))
            ),
            DEADLINE,
            "the coordinator to report the victim's stop lost (or, wrongly, to pass the barrier without it)",
        )
        lost = [e for e in _events(run, "command.lost") if e["consumer"] == victim]
        assert lost, "the stop deleted with its channel was taken for the paused member's acknowledgement"
        assert (lost[0]["option"], lost[0]["channel"]) == ("stop-fetcher", "deleted")
        barriers = [e for e in _events(run, "rebalance.barrier") if e["generation"] == lost[0]["generation"]]
        assert barriers == [], "the barrier was passed while the paused member had read no stop (S2)"
    finally:
        paused.signal(signal.SIGCONT)
    run.wait_members(GROUP, 3, timeout=DEADLINE)
    assert run.producer(TOPIC, 400, 2000).wait(60) == 0
    _check_clean(run, 600, {TOPIC})


def _paused_members_stop_deleted(
    zk_hosts: str,
    tmp_path: Path,
    stack: ExitStack,
    delete: Callable[[Run, str], None],
    then: Callable[[Run, str], None] | None = None,
) -> None:
    """A member's unread stop-fetcher deleted by someone else (``delete(run, channel)``, the member paused): the
    deletion must not count as its acknowledgement -- its channel does not record the stop -- so the stop is
    reported lost (the channel kept: ``unacknowledged``) and no barrier of that generation is passed; ``then``
    runs after the coordinator's verdict, the member runs again, and the group converges with S2, S3, S4 intact."""
    run = Run(zk_hosts, tmp_path, stack, session="8")
    run.broker(1)
    TopicAdmin(run.zk).create(TOPIC, 4)
    procs = [run.consumer(GROUP, TOPIC) for _ in range(2)]
    run.wait_members(GROUP, 2)
    assert run.producer(TOPIC, 200, 2000).wait(60) == 0
    run.wait_consumed_all(GROUP, {TOPIC})
    before = run.state(GROUP)
    assert before is not None
    victim = _members(run)[0]
    channel = paths.channel(GROUP, victim)
    paused = _process_of(run, procs, victim)
    paused.signal(signal.SIGSTOP)
    try:
        procs.append(run.consumer(GROUP, TOPIC))  # the join: a stop-fetcher to every member
        wait_until(lambda: any("stop" in c for c in run.zk.get_children(channel)), DEADLINE, "a stop in the channel")
        delete(run, channel)
        generation = before.generation + 1
        wait_until(
            lambda: (
                any(e["consumer"] == victim for e in _events(run, "command.lost"))
                or any(int(str(e["generation"])) >= generation for e in _events(run, "rebalance.barrier"))
            ),
            DEADLINE,
            "the coordinator to report the victim's stop lost (or, wrongly, to pass the barrier without it)",
        )
        lost = [e for e in _events(run, "command.lost") if e["consumer"] == victim]
        assert lost, "a stop deleted by someone else was taken for the paused member's acknowledgement"
        assert (lost[0]["option"], lost[0]["channel"]) == ("stop-fetcher", "unacknowledged")
        barriers = [e for e in _events(run, "rebalance.barrier") if e["generation"] == lost[0]["generation"]]
        assert barriers == [], "the barrier was passed while the paused member had read no stop (S2)"
        if then is not None:
            then(run, channel)
    finally:
        paused.signal(signal.SIGCONT)
    run.wait_members(GROUP, 3, timeout=DEADLINE)
    assert run.producer(TOPIC, 400, 2000).wait(60) == 0
    _check_clean(run, 600, {TOPIC})


def test_a_channel_deleted_children_first_is_not_taken_for_an_acknowledgement(
    zk_hosts: str, tmp_path: Path, stack: ExitStack
) -> None:
    """A non-atomic delete of a channel with a stop in flight, as kazoo's ``delete(recursive=True)``, Curator and
    zkCli before 3.6 do it: the children first, the channel a round trip later -- here after the coordinator has
    judged the deletion of the stop, so that it finds the channel still there (the czxid check alone passes)."""

    def children_first(run: Run, channel: str) -> None:
        for name in run.zk.get_children(channel):
            run.zk.delete(f"{channel}/{name}")

    def then_the_channel(run: Run, channel: str) -> None:
        run.zk.delete(channel, recursive=True)  # and anything the retry wrote into it meanwhile

    _paused_members_stop_deleted(zk_hosts, tmp_path, stack, children_first, then_the_channel)


def test_a_stop_deleted_alone_is_not_taken_for_an_acknowledgement(
    zk_hosts: str, tmp_path: Path, stack: ExitStack
) -> None:
    """A stop-fetcher deleted by hand, alone (its channel kept), before its member read it."""

    def the_stop_alone(run: Run, channel: str) -> None:
        [stop] = [name for name in run.zk.get_children(channel) if "stop" in name]
        run.zk.delete(f"{channel}/{stop}")

    _paused_members_stop_deleted(zk_hosts, tmp_path, stack, the_stop_alone)


# --- C: an owner znode deleted under its live owner, then a failover and a join --------------------------------


def test_an_owner_znode_deleted_then_a_new_coordinator_and_a_join_do_not_give_it_away_unstopped(
    zk_hosts: str, tmp_path: Path, stack: ExitStack
) -> None:
    """Incremental members.  An owner znode deleted by hand while its owner idles (nothing to commit, so nothing
    repairs it), the coordinator gone, a second member joining, then a new coordinator: it must not take the
    partition for free (a start to the newcomer while the old owner still fetches it, S2), but stop its owner first."""
    run = Run(zk_hosts, tmp_path, stack)
    incremental = ("--rebalance", "incremental")
    first_broker = run.broker(1)
    TopicAdmin(run.zk).create(TOPIC, 2)
    run.consumer(GROUP, TOPIC, extra=incremental)
    run.wait_members(GROUP, 1)
    assert run.producer(TOPIC, 200, 2000).wait(60) == 0
    ledger = run.wait_consumed_all(GROUP, {TOPIC})

    def committed_all() -> bool:
        for (topic, p), offsets in ledger.produced.items():
            try:
                data, _ = run.zk.get(paths.offset(GROUP, topic, p))
            except ZkCoordError:
                return False
            if decode_int("offset", data) != max(offsets) + 1:
                return False
        return True

    wait_until(committed_all, DEADLINE, "every position committed (the member idles from here on)")
    run.zk.delete(paths.owner(GROUP, TOPIC, 0))
    first_broker.signal(signal.SIGTERM)
    assert first_broker.wait(20) == 0
    wait_until(lambda: _coordinator(run) is None, DEADLINE, "no coordinator")
    run.consumer(GROUP, TOPIC, extra=incremental)
    wait_until(lambda: len(_members(run)) == 2, DEADLINE, "the second member registered")
    run.broker(2)  # the new coordinator reads the registry afresh, the join and the missing owner znode together

    def two_members() -> bool:
        shares = _shares(_stable(run))
        return len(shares) == 2 and all(len(s) == 1 for s in shares.values())

    wait_until(two_members, DEADLINE, "the group balanced over both members")
    assert run.producer(TOPIC, 400, 2000).wait(60) == 0
    _check_clean(run, 600, {TOPIC})


def test_a_claims_commit_fence_tells_a_recreated_owner_znode_from_the_one_it_claimed(zk_hosts: str) -> None:
    """The consumer's side of C: an owner znode deleted and created again for another thread restarts at version 0,
    the version a claim made on the coordinator's first write holds; the commit fence must still refuse it."""
    owner, tp = paths.owner(GROUP, TOPIC, 0), TopicPartition(TOPIC, 0)
    with ZkClient(ZkConfig.from_string(zk_hosts)) as zk:
        zk.create(owner, encode_owner("g_a-1-0"), makepath=True)
        store = OffsetStore(zk, GROUP)
        assert store.claim({tp: "g_a-1-0"}).claims[tp].owner_version == 0
        assert store.commit({tp: 5}) == {tp: 5}
        zk.delete(owner)
        zk.create(owner, encode_owner("g_b-2-0"))  # given to another member: version 0 again
        with pytest.raises(OffsetCommitFencedError):
            store.commit({tp: 9})
        assert decode_int("offset", zk.get(paths.offset(GROUP, TOPIC, 0))[0]) == 5
        # Recreated naming our own thread (a person restoring it), it is still ours: the claim follows it.
        zk.set(owner, encode_owner("g_a-1-0"))
        store.claim({tp: "g_a-1-0"})
        zk.delete(owner)
        zk.create(owner, encode_owner("g_a-1-0"))
        assert store.commit({tp: 11}) == {tp: 11}
