"""A coordinator failover over many groups: every group examined once, in batches, and none needlessly rebalanced.

The new coordinator lists every group's members in one pipelined burst (setting a one-shot watch on each), then reads
the queued groups ``examine_batch`` at a time (pipelined across groups) and plans each.  These tests form many stable
groups with a swarm (one process, a real session per consumer), hand the coordinator over, and check from the
journals that the successor examined each group exactly once, rebalanced none of them, still notices a membership
change through the watches it set in bulk, and re-lists a group whose watch was only reset without rebalancing it.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from tests.clusters import Cluster
from tests.integration.test_swarm import TOPIC, Swarm
from zkcoord.coordinator.events import Event as _Event
from zkcoord.data.topics import TopicAdmin
from zkcoord.errors import CodecError, ZkError
from zkcoord.layout import paths
from zkcoord.layout.group_state import GroupPhase
from zkcoord.runtime.journal import JournalEvent, read_journal
from zkcoord.testbed.procs import wait_until
from zkcoord.zk import WatchKind

pytestmark = pytest.mark.integration

GROUPS = [f"many-{i:02d}" for i in range(23)]
PER_GROUP = 3
BATCH = 5  # 23 groups: four full batches and a ragged one


def broker_events(journal_dir: Path, broker_id: int, kind: str, since: int = 0) -> list[JournalEvent]:
    return [
        e
        for e in read_journal(journal_dir)
        if e.role == f"broker-{broker_id}" and e.event == kind and e.mono_ns >= since
    ]


def all_stable(cluster: Cluster, members: int = PER_GROUP) -> bool:
    for group in GROUPS:
        try:
            state = cluster.state(group)
        except (ZkError, CodecError):  # not written yet
            return False
        if state.phase is not GroupPhase.STABLE or len(state.members) != members:
            return False
    return True


@pytest.fixture
def formed(cluster: Cluster, zk_hosts: str, tmp_path: Path) -> Swarm:
    """Broker 1 coordinating ``GROUPS`` (all STABLE), broker 2 standing by."""
    cluster.broker(1, examine_batch=BATCH)
    wait_until(lambda: cluster.acting() == [1], 10, "broker 1 coordinating")
    cluster.broker(2, examine_batch=BATCH)
    TopicAdmin(cluster.admin_zk).create(TOPIC, 4)
    swarm = Swarm(tmp_path, zk_hosts, ",".join(GROUPS), per_group=PER_GROUP, session_timeout=30.0)
    cluster.stack.callback(swarm.stop)
    swarm.wait_ready(60)
    wait_until(lambda: all_stable(cluster), 60, "every group STABLE", interval=0.1)
    return swarm


def test_a_successor_examines_every_group_once_and_rebalances_none(cluster: Cluster, formed: Swarm) -> None:
    before = {g: cluster.state(g).generation for g in GROUPS}
    cluster.brokers[1].stop()  # closes its session: the successor is elected at once
    wait_until(lambda: cluster.acting() == [2], 10, "broker 2 coordinating")
    journal = cluster.journal_dir
    elected = broker_events(journal, 2, "coordinator.elected")[-1].mono_ns

    def examined() -> set[str]:
        return {e.fields["group"] for e in broker_events(journal, 2, "rebalance.skipped", elected)}

    wait_until(lambda: examined() == set(GROUPS), 20, "every group examined by broker 2")
    requested = Counter(e.fields["trigger"] for e in broker_events(journal, 2, "rebalance.requested", elected))
    skipped = broker_events(journal, 2, "rebalance.skipped", elected)
    assert requested == {"coordinator startup": len(GROUPS)}
    assert [e.fields["group"] for e in skipped] == GROUPS  # each once, in order, across the batches
    assert {e.fields["reason"] for e in skipped} == {"assignment unchanged"}
    assert not broker_events(journal, 2, "rebalance.started", elected)
    assert {g: cluster.state(g).generation for g in GROUPS} == before

    # The members watches set in bulk work: a consumer joining one group is noticed and rebalanced in.
    joiner = cluster.consumer(GROUPS[7], {TOPIC: 1})
    cluster.wait_stable(GROUPS[7], PER_GROUP + 1)
    joiner.wait_for(lambda c: c.fetching)
    started = broker_events(journal, 2, "rebalance.started", elected)
    assert {e.fields["group"] for e in started} == {GROUPS[7]}
    assert {e.fields["trigger"] for e in started} == {"membership change"}


def test_a_reset_watch_is_relisted_and_its_group_examined_again_without_a_rebalance(
    cluster: Cluster, formed: Swarm
) -> None:
    coordinator = cluster.coordinator(1)
    journal = cluster.journal_dir
    mark = max(e.mono_ns for e in read_journal(journal))
    term = coordinator.term_no
    # A connection loss resets every raw watch (kazoo fires them with a NONE event).  Meanwhile a member may have
    # re-registered under the same id (a new incarnation, the same names), so the coordinator examines every such
    # group again; none of them needs a rebalance here, and each is examined exactly once.
    for group in GROUPS:
        coordinator._events.put(_Event("members", term, name=paths.group_ids(group), data=WatchKind.RESET))
    coordinator._events.put(_Event("members", term, name=paths.group_ids(GROUPS[3]), data=WatchKind.CHILD))

    def examined() -> list[str]:
        return [e.fields["group"] for e in broker_events(journal, 1, "rebalance.skipped", mark)]

    wait_until(lambda: len(examined()) >= len(GROUPS), 20, "every group examined again")
    assert sorted(examined()) == sorted(GROUPS)
    requested = broker_events(journal, 1, "rebalance.requested", mark)
    assert sorted(e.fields["group"] for e in requested) == sorted(GROUPS)
    assert {e.fields["trigger"] for e in requested} == {"membership change"}
    assert not broker_events(journal, 1, "rebalance.started", mark)
    assert not coordinator.watchers.relist
