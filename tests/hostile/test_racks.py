"""Hostile state around racks: broker registrations a stray client wrote (an ephemeral one with a malformed rack, a
persistent one with a rack, a child that is no broker id) and a topic whose replicas name brokers that are not
registered.  The coordinator refuses the malformed registration in the journal (``input.rejected``), takes no rack
from the persistent one (no broker writes one, as ``TopicAdmin.live_brokers`` rules), and a replica on a broker
without a readable rack, or not registered, gives its partition no rack: the group is assigned by the racks that
are there, and still reconciles.  Replicas rewritten by hand (the same partitions on other brokers) change the
partitions' racks: the group epoch is bumped."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.integration.test_consumer_e2e import Run, _id
from tests.integration.test_incremental import events
from tests.integration.test_kip848 import CONSUMER, reconciled, records
from tests.integration.test_racks import broker
from zkcoord.layout import paths
from zkcoord.layout.partition_set import PartitionSet
from zkcoord.layout.registrations import TopicAssignment
from zkcoord.runtime.journal import read_journal
from zkcoord.testbed.procs import wait_until

pytestmark = pytest.mark.integration

MALFORMED = b'{"host":"h","port":1,"timestamp":"1","version":1,"rack":5}'
PERSISTENT = b'{"host":"h","port":1,"timestamp":"1","version":1,"rack":"a"}'


@pytest.fixture
def run(zk_hosts: str, tmp_path: Path) -> Iterator[Run]:
    with ExitStack() as stack:
        yield Run(zk_hosts, tmp_path, stack)


def test_stray_broker_registrations_and_unregistered_replicas_give_no_rack(run: Run) -> None:
    broker(run, 1, "a")
    broker(run, 2, "b")
    run.zk.create(paths.broker(3), MALFORMED, ephemeral=True)  # a stray client's session
    run.zk.create(paths.broker(4), PERSISTENT)
    run.zk.create(f"{paths.BROKER_IDS}/not-a-broker", PERSISTENT)
    # By hand: one replica each, on brokers 1 (a), 2 (b), 3 (malformed), 4 (persistent: "a" not taken), 9 (none).
    replicas = ((1,), (2,), (3,), (4,), (9,), (1,))
    run.zk.create(paths.topic("t"), TopicAssignment(replicas).encode(), makepath=True)

    def rejected() -> bool:
        return any(
            e.event == "input.rejected" and e.fields.get("path") == paths.broker(3) for e in read_journal(run.journal)
        )

    wait_until(rejected, 20, "the malformed broker registration refused in the journal")
    first = run.consumer("h", "t", extra=(*CONSUMER, "--rack", "a"))
    wait_until(lambda: reconciled(run, "h", 1), 30, "the first member reconciled")
    joiner = run.consumer("h", "t", extra=(*CONSUMER, "--rack", "b"))
    wait_until(lambda: reconciled(run, "h", 2), 30, "both members reconciled")
    member_a, member_b = _id(run, first), _id(run, joiner)
    assigned = {m: c.assigned for m, c in records(run, "h")[2].items()}
    # a held all six and keeps three: its rack's 0 and 5 first, then its lowest other, 2 (no rack: broker 3's was
    # refused); it gives up 1 (rack b), 3 (broker 4's rack "a" is not taken) and 4 (broker 9 is not registered).
    # Were broker 4's rack taken, a would keep 3 instead of 2.
    assert assigned == {member_a: PartitionSet({"t": [0, 2, 5]}), member_b: PartitionSet({"t": [1, 3, 4]})}
    assert all(e.get("mode") == "consumer" for e in events(run, "h", "rebalance.started"))

    # The replicas rewritten by hand, the count unchanged (no tool of ours moves replicas): partition 2 now on
    # broker 2.  The partitions' racks changed, so the group epoch is bumped; nothing held moves.
    epoch = records(run, "h")[0].group_epoch
    moved = ((1,), (2,), (2,), (4,), (9,), (1,))
    run.zk.set(paths.topic("t"), TopicAssignment(moved).encode())
    wait_until(lambda: records(run, "h")[0].group_epoch > epoch and reconciled(run, "h", 2), 20, "an epoch bump")
    assert "partition racks changed: t" in {e["trigger"] for e in events(run, "h", "rebalance.started")}
    assert {m: c.assigned for m, c in records(run, "h")[2].items()} == assigned
