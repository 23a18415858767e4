"""Hostile state on a live member's own znodes: its owner znode rewritten to another thread, its id taken by another
process, a commit fenced.  Real ZooKeeper; real broker, consumer and producer processes where the cluster's whole
reaction matters (S2, S3, S4 from the journals), an in-process consumer driven by scripted commands where one rule of
the consumer is checked alone."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.cli import run_cli
from tests.hostile.test_group_state import GROUP, TOPIC, _balanced, _events, _members, _produce
from tests.integration.test_consumer import drain, produce
from tests.integration.test_consumer_e2e import Run
from tests.integration.test_handover import member, send, start
from tests.ledger import Ledger
from zkcoord.consumer import TopicPartition
from zkcoord.consumer.offsets import OffsetCommitFencedError
from zkcoord.data.topics import TopicAdmin
from zkcoord.layout import paths
from zkcoord.layout.group_state import GroupState, encode_owner
from zkcoord.runtime.journal import read_journal
from zkcoord.testbed.procs import wait_until
from zkcoord.zk import ZkClient, ZkConfig

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture
def run(zk_hosts: str, tmp_path: Path) -> Iterator[Run]:
    with ExitStack() as stack:
        yield Run(zk_hosts, tmp_path, stack)


def _clean(run: Run, produced: int) -> None:
    ledger = run.wait_consumed_all(GROUP, {TOPIC}, timeout=60)
    assert ledger.total_produced({TOPIC}) == produced
    assert ledger.overlaps() == [], "S2: a partition was fetched by two consumers at overlapping times"
    assert ledger.duplicates() == {}, "S4: offsets consumed twice with no crash"


def test_an_owner_znode_rewritten_to_another_thread_under_its_live_owner_is_repaired(run: Run) -> None:
    """The group's state still gives the partition to its live owner, so nobody but a hand wrote another thread
    there: the owner's next commit repairs it (``owner.repaired``) and it goes on fetching; no join is needed for the
    partition to be consumed (S3), and nothing is consumed twice."""
    run.broker(1)
    TopicAdmin(run.zk).create(TOPIC, 2)
    run.consumer(GROUP, TOPIC)
    run.wait_members(GROUP, 1)
    [first] = _members(run)
    _produce(run, 200)
    wait_until(lambda: not Ledger.read(run.journal, GROUP).missing({TOPIC}), 30, "the first records consumed")
    run.zk.set(paths.owner(GROUP, TOPIC, 0), f"{first}x-0".encode())
    _produce(run, 200)
    _clean(run, 400)

    def repairs() -> list[dict[str, object]]:
        return [e for e in _events(run, "owner.repaired") if e["consumer"] == first and e["partition"] == 0]

    # The repair comes with the owner's next commit (auto-commit: the positions as its next poll() found them).
    wait_until(lambda: bool(repairs()), 10, "the owner znode repaired")
    assert "named" in str(repairs()[0]["reason"])
    assert run.zk.get(paths.owner(GROUP, TOPIC, 0))[0].decode() == f"{first}-0"


def test_a_commit_fenced_by_an_owner_the_state_agrees_with_stops_that_partition(zk_hosts: str, tmp_path: Path) -> None:
    """When the group's state gives the partition to another thread too, the coordinator moved it: another member may
    be fetching it now, so the member stops fetching it at once (S2), not at its next command; its other partition
    goes on.  (A scripted coordinator: one rule of the consumer, alone.)"""
    data, journal = tmp_path / "data", tmp_path / "journal"
    produce(data, TOPIC, 2, 40)
    p0, p1 = TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)
    with ExitStack() as stack, ZkClient(ZkConfig.from_string(zk_hosts)) as zk:
        m = member(zk_hosts, data, journal, stack, polled=False)  # the test polls it
        mine = f"{m.consumer_id}-0"
        zk.ensure_path(paths.owners(GROUP, TOPIC))
        for tp in (p0, p1):
            zk.create(paths.owner(GROUP, tp.topic, tp.partition), encode_owner(mine))
        first = send(zk, m, start(1, m, {0: mine, 1: mine}))
        wait_until(lambda: zk.exists(first) is None, 10, "the start acknowledged")
        drain(m, 80)
        # What a coordinator's next generation would have written for p0 had it already moved it.
        other = "g_elsewhere-1-0000ffff-0"
        raw, _ = zk.get(paths.group_state(GROUP))
        state = GroupState.decode(raw)
        moved = dataclasses.replace(state, target={TOPIC: {0: other, 1: mine}})
        zk.set(paths.group_state(GROUP), moved.encode())
        zk.set(paths.owner(GROUP, TOPIC, 0), encode_owner(other))
        produce(data, TOPIC, 2, 10)
        drain(m, 20)  # both partitions' new records were handed out: the next commit covers both
        with pytest.raises(OffsetCommitFencedError):
            m.commit()
        wait_until(lambda: p0 not in m.assignment(), 10, "the fenced partition stopped")
        assert p1 in m.assignment()
        stops = [e for e in read_journal(journal) if e.event == "fetch.stopped" and e.fields["partition"] == 0]
        assert stops and "fenced" in str(stops[-1].fields["reason"])


def test_a_second_process_with_a_live_consumers_id_is_refused_in_one_line(run: Run) -> None:
    """Two processes with one ``--consumer-id`` would take the registration from each other for ever, both fetching
    as the same threads.  The second is refused at start with one line; the first goes on consuming."""
    run.broker(1)
    TopicAdmin(run.zk).create(TOPIC, 2)
    run.consumer(GROUP, TOPIC, extra=("--consumer-id", "g_twin"))
    run.wait_members(GROUP, 1)
    second = run_cli(
        "consume", "--group", GROUP, "--topic", TOPIC, *run.common(), "--data-dir", str(run.data),
        "--consumer-id", "g_twin", timeout=30,
    )  # fmt: skip
    assert second.returncode == 1
    lines = second.stderr.strip().splitlines()
    assert len(lines) == 1 and "consumer id g_twin is registered by another live session" in lines[0], lines
    _produce(run, 200)
    _clean(run, 200)


def test_our_id_taken_by_another_live_session_stops_the_member_until_it_is_gone(run: Run) -> None:
    """A live member's registration is deleted and an ephemeral of another session created at its id.  The member
    stops (it is not the registration the coordinator sees), does not take the id from the live session, leaves the
    commands meant for that registration in the channel, and registers again once the session is gone: then the group
    converges and consumes everything (S2, S3)."""
    run.broker(1)
    TopicAdmin(run.zk).create(TOPIC, 2)
    run.consumer(GROUP, TOPIC)
    run.wait_members(GROUP, 1)
    [first] = _members(run)
    _produce(run, 200)
    wait_until(lambda: not Ledger.read(run.journal, GROUP).missing({TOPIC}), 30, "the first records consumed")
    path = paths.member(GROUP, first)
    data, _ = run.zk.get(path)
    with ZkClient(ZkConfig.from_string(run.hosts)) as other:
        # Delete and create in one transaction: done apart, the member noticed the deletion and registered again
        # first (seen under load), and the test's create met its new registration.
        txn = other.transaction()
        txn.delete(path)
        txn.create(path, data, ephemeral=True)
        txn.commit()

        def displaced() -> bool:
            return any("not registered again" in str(e["reason"]) for e in _events(run, "registration.repaired"))

        wait_until(displaced, 20, "the member to see its id held by another session")
        held = run.zk.exists(path)
        assert held is not None and held.ephemeralOwner == other.session_id, "the member took a live session's id"
    run.wait_members(GROUP, 1)  # the other session closed: the member registered again
    _produce(run, 200)
    wait_until(lambda: _balanced(run, 1, 2), 30, "the group balanced on the member")
    ledger = run.wait_consumed_all(GROUP, {TOPIC}, timeout=60)
    assert ledger.overlaps() == [], "S2: a partition was fetched by two consumers at overlapping times"
