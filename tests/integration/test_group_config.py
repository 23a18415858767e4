"""A group's dynamic config (``/config/groups/<g>``) applied by the coordinator, against a real ZooKeeper: in-process
brokers (tests/integration/test_coordinator.py's Cluster) and scripted consumers that record every command.

The config is written as an operator does (:mod:`zkcoord.admin.group_config`, what ``zkcoord group config`` runs);
the coordinator sees it through its watches, reads it afresh and examines the group again.
"""

from __future__ import annotations

import pytest

from tests.clusters import Cluster
from tests.integration.test_coordinator import all_owned, union
from tests.scripted import ScriptedConsumer
from zkcoord.admin.group_config import delete_config, set_config
from zkcoord.data.topics import TopicAdmin
from zkcoord.layout.commands import CommandOption
from zkcoord.layout.group_config import GroupConfig
from zkcoord.testbed.procs import wait_until

pytestmark = pytest.mark.integration


def counts(consumers: list[ScriptedConsumer]) -> list[int]:
    return [len(c.partitions()) for c in consumers]


def barrier_held(cluster: Cluster, group: str, generation: int) -> bool:
    """S2 on the coordinator's side, from the journal: every stop of ``generation`` acknowledged before its first
    start was sent."""
    acks = cluster.events("command.acked", group=group, generation=generation, option="stop-fetcher")
    starts = cluster.events("command.sent", group=group, generation=generation, option="start-fetcher")
    return bool(acks and starts) and max(e.seq for e in acks) < min(e.seq for e in starts)


def test_max_size_below_the_member_count_leaves_the_last_member_with_nothing_and_the_rest_balanced(
    cluster: Cluster,
) -> None:
    cluster.broker(1)
    TopicAdmin(cluster.admin_zk).create("t", 6)
    a, b, c = (cluster.consumer("g", {"t": 1}) for _ in range(3))  # registered in this order
    cluster.wait_stable("g", 3)
    wait_until(lambda: all_owned({"t": 6})([a, b, c]) and counts([a, b, c]) == [2, 2, 2], 10, "2 partitions each")

    set_config(cluster.admin_zk, "g", GroupConfig(max_size=2))
    wait_until(lambda: all_owned({"t": 6})([a, b, c]) and counts([a, b, c]) == [3, 3, 0], 20, "c given nothing")
    [changed] = cluster.events("group.config.changed", group="g")
    assert changed.fields["config"] == {"max.size": "2"} and changed.fields["previous"] == {}
    [reached] = cluster.events("group.max_size_reached", group="g")
    assert reached.fields == {"group": "g", "max_size": 2, "excluded": [c.consumer_id], "stopped": [c.consumer_id]}
    started = cluster.events("rebalance.started", group="g", trigger="group config changed")
    assert len(started) == 1 and c.consumer_id in started[0].fields["members"]
    generation = started[0].fields["generation"]
    # c held partitions: it was stopped with everyone before any moved (S2), and told it has nothing.
    assert barrier_held(cluster, "g", generation)
    assert [cmd.ownership for cmd in c.commands(CommandOption.START_FETCHER) if cmd.generation == generation] == [{}]
    assert cluster.state("g").members.keys() == {a.consumer_id, b.consumer_id, c.consumer_id}

    # A join beyond the maximum changes nothing: no rebalance, no command for it, the journal says so.
    rebalances = len(cluster.events("rebalance.started", group="g"))
    d = cluster.consumer("g", {"t": 1})
    wait_until(lambda: len(cluster.events("group.max_size_reached", group="g")) == 2, 10, "d excluded too")
    assert cluster.events("group.max_size_reached", group="g")[1].fields["excluded"] == sorted(
        [c.consumer_id, d.consumer_id]
    )
    wait_until(
        lambda: bool(cluster.events("rebalance.skipped", group="g", trigger="membership change")), 10, "d examined"
    )
    assert len(cluster.events("rebalance.started", group="g")) == rebalances
    assert d.seen == []

    # The config deleted: everyone is let in, the group balanced over four.
    delete_config(cluster.admin_zk, "g")
    wait_until(
        lambda: all_owned({"t": 6})([a, b, c, d]) and sorted(counts([a, b, c, d])) == [1, 1, 2, 2], 20, "four in"
    )
    assert union([a, b, c, d])  # no partition owned twice
    assert cluster.events("group.config.changed", group="g")[-1].fields["config"] == {}


def test_rebalance_timeout_ms_replaces_the_coordinators_for_the_groups_steps(cluster: Cluster) -> None:
    cluster.broker(1, rebalance_timeout_s=60, max_rebalance_retries=1, rebalance_backoff_s=0.05)
    TopicAdmin(cluster.admin_zk).create("t", 4)
    wait_until(lambda: cluster.acting() == [1], 10, "broker 1 coordinating")
    # Set before the group exists (a config outlives its group and may precede it).
    set_config(cluster.admin_zk, "g", GroupConfig(rebalance_timeout_ms=300))
    # Seen through the watch (journalled as a change), or read by the coordinator's startup, which may still be
    # running when the broker is already acting (loaded, not journalled as a change).
    configs = cluster.coordinator(1).watchers.configs
    wait_until(lambda: configs.get("g").rebalance_timeout_ms == 300, 10, "the config seen")
    cluster.consumer("g", {"t": 1})
    cluster.consumer("g", {"t": 1}, ack=False)  # never acknowledges: the stop step times out
    wait_until(lambda: bool(cluster.events("rebalance.retrying", group="g")), 10, "the stop step timed out")
    reason = cluster.events("rebalance.retrying", group="g")[0].fields["reason"]
    assert "timed out in stopping" in reason and "(the step's timeout: 0.3 s)" in reason


def test_a_config_change_that_leaves_the_assignment_alone_starts_no_rebalance(cluster: Cluster) -> None:
    cluster.broker(1)
    TopicAdmin(cluster.admin_zk).create("t", 4)
    a, b = cluster.consumer("g", {"t": 1}), cluster.consumer("g", {"t": 1})
    state = cluster.wait_stable("g", 2)
    wait_until(lambda: all_owned({"t": 4})([a, b]), 10, "all owned")
    rebalances = len(cluster.events("rebalance.started", group="g"))
    set_config(cluster.admin_zk, "g", GroupConfig(rebalance_timeout_ms=5000, max_size=2))
    wait_until(
        lambda: bool(cluster.events("rebalance.skipped", group="g", trigger="group config changed")), 10, "examined"
    )
    assert len(cluster.events("rebalance.started", group="g")) == rebalances
    assert cluster.state("g").generation == state.generation


def test_the_assignor_is_the_configs_from_the_change_on(cluster: Cluster) -> None:
    cluster.broker(1)  # the coordinator's assignor: range, which puts ten one-partition topics on one member
    topics = {f"t{i}": 1 for i in range(10)}
    admin = TopicAdmin(cluster.admin_zk)
    for topic in topics:
        admin.create(topic, 1)
    members = [cluster.consumer("g", dict.fromkeys(topics, 1)) for _ in range(3)]
    cluster.wait_stable("g", 3)
    wait_until(lambda: sorted(counts(members)) == [0, 0, 10], 10, "range: all on one member")
    assert cluster.state("g").assignor == "range"

    set_config(cluster.admin_zk, "g", GroupConfig(assignor="uniform"))
    wait_until(lambda: sorted(counts(members)) == [3, 3, 4] and all_owned(topics)(members), 20, "uniform: 4/3/3")
    [started] = cluster.events("rebalance.started", group="g", trigger="group config changed")
    assert started.fields["assignor"] == "uniform" and cluster.state("g").assignor == "uniform"
    # ...and at every later change: a fourth member, balanced over all four (range would give it nothing).
    members.append(cluster.consumer("g", dict.fromkeys(topics, 1)))
    cluster.wait_stable("g", 4)
    wait_until(lambda: sorted(counts(members)) == [2, 2, 3, 3] and all_owned(topics)(members), 20, "uniform: 3/3/2/2")
    assert {e.fields["assignor"] for e in cluster.events("rebalance.started", group="g")[-1:]} == {"uniform"}


def test_a_consumer_protocol_group_takes_its_assignor_from_the_config_at_once(cluster: Cluster) -> None:
    """KIP-848: the group config's assignor is part of what the target is computed from, so a change bumps the
    group epoch and the members reconcile to the new assignor's target (here KIP-848's server-side range:
    contiguous blocks); every partition still owned once."""
    cluster.broker(1)
    TopicAdmin(cluster.admin_zk).create("t", 8)
    members = [cluster.consumer("g", {"t": 1}, consumer_protocol=True) for _ in range(3)]
    wait_until(lambda: sorted(counts(members)) == [2, 3, 3], 20, "uniform: 3/3/2")
    epochs = [e.fields["generation"] for e in cluster.events("rebalance.started", group="g")]
    set_config(cluster.admin_zk, "g", GroupConfig(assignor="range"))

    def contiguous() -> bool:
        blocks = [sorted(p for _, p in c.partitions()) for c in members]
        return sorted(len(b) for b in blocks) == [2, 3, 3] and all(
            b == list(range(b[0], b[0] + len(b))) for b in blocks
        )

    wait_until(contiguous, 20, "range: contiguous blocks")
    assert set(union(members)) == {("t", p) for p in range(8)}
    started = cluster.events("rebalance.started", group="g")[-1].fields
    assert started["assignor"] == "range" and started["mode"] == "consumer" and started["generation"] > max(epochs)
