"""Racks end to end, with real processes: two brokers registered with racks ``a`` and ``b``, a topic whose
partitions have one replica each (TopicAdmin alternates them over the two brokers), and two consumer-protocol
members with ``--rack a`` and ``--rack b``: each ends up with exactly the partitions of its rack.  A broker coming
back with another rack changes the partitions' racks: the coordinator reads it from the brokers' registrations and
bumps the group epoch (KIP-848: partition metadata changed), and, stickiness before racks, moves nothing."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.integration.test_consumer_e2e import Run, _id
from tests.integration.test_incremental import events
from tests.integration.test_kip848 import CONSUMER, reconciled, records
from zkcoord.data.topics import TopicAdmin
from zkcoord.layout import paths
from zkcoord.layout.partition_set import PartitionSet
from zkcoord.testbed.procs import ChildProcess, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture
def run(zk_hosts: str, tmp_path: Path) -> Iterator[Run]:
    with ExitStack() as stack:
        yield Run(zk_hosts, tmp_path, stack)


def broker(run: Run, broker_id: int, rack: str) -> ChildProcess:
    proc = ChildProcess(
        ["broker", "--id", str(broker_id), "--rack", rack, *run.common()], run.root / f"broker-{broker_id}-{rack}.log"
    )
    run.stack.enter_context(proc)
    wait_until(lambda: registered_rack(run, broker_id) == rack, 30, f"broker {broker_id} registered in rack {rack}")
    return proc


def registered_rack(run: Run, broker_id: int) -> str | None:
    stat = run.zk.exists(paths.broker(broker_id))
    if stat is None:
        return None
    rack = json.loads(run.zk.get(paths.broker(broker_id))[0]).get("rack")
    return rack if isinstance(rack, str) else None


def assigned(run: Run, group: str) -> dict[str, PartitionSet]:
    return {m: c.assigned for m, c in records(run, group)[2].items()}


def test_each_member_gets_exactly_the_partitions_of_its_rack(run: Run) -> None:
    broker(run, 1, "a")  # first: the coordinator
    second = broker(run, 2, "b")
    TopicAdmin(run.zk).create("t", 4)
    replicas = TopicAdmin(run.zk).describe("t").assignment.replicas
    assert replicas == ((1,), (2,), (1,), (2,)), "TopicAdmin alternates single replicas over the sorted brokers"
    # a joins first and gets everything; b's join makes a give up two: those outside its rack (without racks, its
    # highest two, 2 and 3, which are one of each rack).
    first = run.consumer("r", "t", extra=(*CONSUMER, "--rack", "a"))
    wait_until(lambda: reconciled(run, "r", 1), 30, "the first member reconciled")
    member_a = _id(run, first)
    assert assigned(run, "r") == {member_a: PartitionSet({"t": [0, 1, 2, 3]})}
    joiner = run.consumer("r", "t", extra=(*CONSUMER, "--rack", "b"))
    wait_until(lambda: reconciled(run, "r", 2), 30, "both members reconciled")
    member_b = _id(run, joiner)
    assert json.loads(run.zk.get(paths.member("r", member_b))[0])["rack"] == "b"
    assert assigned(run, "r") == {member_a: PartitionSet({"t": [0, 2]}), member_b: PartitionSet({"t": [1, 3]})}

    # Broker 2 comes back in rack c: partitions 1 and 3 lose rack b (while it is away) and gain c.  Each change of
    # the partitions' racks bumps the group epoch; nothing held moves (stickiness comes before racks).
    epoch = records(run, "r")[0].group_epoch
    second.signal(signal.SIGTERM)
    assert second.wait(timeout=30) == 0
    broker(run, 2, "c")
    wait_until(
        lambda: reconciled(run, "r", 2) and records(run, "r")[0].group_epoch > epoch, 30, "an epoch for the new racks"
    )
    triggers = {e["trigger"] for e in events(run, "r", "rebalance.started")}
    assert "partition racks changed: t" in triggers, triggers
    assert assigned(run, "r") == {member_a: PartitionSet({"t": [0, 2]}), member_b: PartitionSet({"t": [1, 3]})}
