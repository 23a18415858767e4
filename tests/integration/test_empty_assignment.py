"""A member given no partition hears so: a real coordinator (in-process broker) and three in-process consumers on a
topic of two partitions, against a real ZooKeeper.  The third member's channel gets a start-fetcher with nothing in
it, and its journal shows it applied -- in an eager group (every member is started every time) and in an incremental
one (where only members that gain or join are started: a joiner given nothing is one of them)."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.clusters import Cluster
from tests.integration.test_consumer import make
from zkcoord.consumer import Consumer
from zkcoord.data.topics import TopicAdmin
from zkcoord.runtime.journal import JournalEvent
from zkcoord.testbed.poll_loop import PollLoop
from zkcoord.testbed.procs import wait_until

pytestmark = pytest.mark.integration


def _consumer(cluster: Cluster, data: Path, stack: ExitStack, rebalance: str) -> Consumer:
    consumer = make(cluster, data, stack, rebalance=rebalance)
    loop = stack.enter_context(PollLoop())  # its application: a stop waits for the application's poll()
    loop.add(consumer)
    stack.callback(loop.remove, consumer)
    return consumer


def _starts(cluster: Cluster, kind: str, consumer: str, generation: int) -> list[JournalEvent]:
    """``kind`` events of the start-fetchers to ``consumer`` in ``generation`` (an eager one stops it first)."""
    return cluster.events(kind, group="g", consumer=consumer, generation=generation, option="start-fetcher")


@pytest.mark.parametrize("rebalance", ["eager", "incremental"])
def test_a_member_given_no_partition_gets_and_applies_an_empty_start(
    cluster: Cluster, tmp_path: Path, rebalance: str
) -> None:
    cluster.broker(1)
    TopicAdmin(cluster.admin_zk).create("t", 2)
    data = tmp_path / "data"
    with ExitStack() as stack:
        first, second = (_consumer(cluster, data, stack, rebalance) for _ in range(2))
        cluster.wait_stable("g", 2)
        wait_until(lambda: len(first.assignment()) == len(second.assignment()) == 1, 10, "one partition each")
        third = _consumer(cluster, data, stack, rebalance)
        state = cluster.wait_stable("g", 3)
        assert third.consumer_id in state.members
        (started,) = cluster.events("rebalance.started", group="g", generation=state.generation)
        assert started.fields["mode"] == rebalance
        # The start-fetcher written into the third member's channel, with no partition in it, and applied.
        gen, cid = state.generation, third.consumer_id
        wait_until(lambda: bool(_starts(cluster, "command.applied", cid, gen)), 10, "the third member's start applied")
        assert [e.fields["partitions"] for e in _starts(cluster, "command.sent", cid, gen)] == [0]
        assert [e.fields["partitions"] for e in _starts(cluster, "command.applied", cid, gen)] == [0]
        assert third.assignment() == {} and len(first.assignment()) == len(second.assignment()) == 1
        if rebalance == "incremental":
            # Nothing moved: the two others heard nothing; the joiner is named among those started.
            assert started.fields["gaining"] == [third.consumer_id] and started.fields["revoking"] == []
            for other in (first, second):
                assert not cluster.events("command.sent", consumer=other.consumer_id, generation=state.generation)
