"""The coordinator against a real ZooKeeper: election, rebalance barrier, retries, aborts, watchers, bad input."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from tests.clusters import Cluster
from tests.scripted import ScriptedConsumer
from zkcoord.coordinator import Role
from zkcoord.coordinator.events import Event as _Event
from zkcoord.data.topics import TopicAdmin
from zkcoord.errors import ZkError, ZkUnavailableError
from zkcoord.layout import paths
from zkcoord.layout.commands import CommandOption
from zkcoord.layout.group_state import GroupPhase
from zkcoord.layout.registrations import Pattern
from zkcoord.layout.znodes import decode_int
from zkcoord.testbed.procs import wait_until
from zkcoord.zk import ConnState, Transaction, ZkClient

pytestmark = pytest.mark.integration


def owners_registry(zk: ZkClient, group: str) -> dict[str, dict[int, str]]:
    out: dict[str, dict[int, str]] = {}
    for topic in zk.get_children(f"{paths.group(group)}/owners"):
        for p in zk.get_children(paths.owners(group, topic)):
            out.setdefault(topic, {})[int(p)] = zk.get(paths.owner(group, topic, int(p)))[0].decode()
    return {t: v for t, v in out.items() if v}


def union(consumers: list[ScriptedConsumer]) -> dict[tuple[str, int], str]:
    owned: dict[tuple[str, int], str] = {}
    for c in consumers:
        for t, parts in c.owned.items():
            for p, thread in parts.items():
                assert (t, p) not in owned, f"{t}/{p} owned twice"
                owned[(t, p)] = thread
    return owned


def all_owned(partitions: dict[str, int]) -> Callable[[list[ScriptedConsumer]], bool]:
    expected = {(t, p) for t, n in partitions.items() for p in range(n)}

    def check(consumers: list[ScriptedConsumer]) -> bool:
        try:
            return set(union(consumers)) == expected
        except AssertionError:
            return False

    return check


# --- election -----------------------------------------------------------------------------------------------------


def test_one_of_three_brokers_is_elected_and_a_successor_takes_over(cluster: Cluster) -> None:
    for b in (1, 2, 3):
        cluster.broker(b)
    wait_until(lambda: len(cluster.acting()) == 1, 10, "one coordinator")
    first = cluster.acting()[0]
    info = json.loads(cluster.admin_zk.get(paths.COORDINATOR)[0])
    epoch = decode_int("epoch", cluster.admin_zk.get(paths.COORDINATOR_EPOCH)[0])
    assert info["brokerid"] == first and info["epoch"] == epoch
    cluster.brokers[first].stop()  # closes its session: the ephemeral goes at once
    wait_until(lambda: len(cluster.acting()) == 1 and cluster.acting()[0] != first, 10, "a successor")
    assert decode_int("epoch", cluster.admin_zk.get(paths.COORDINATOR_EPOCH)[0]) == epoch + 1
    assert [e.fields["epoch"] for e in cluster.events("coordinator.elected")] == [epoch, epoch + 1]


# --- rebalance -----------------------------------------------------------------------------------------------------


def test_rebalance_stops_everyone_before_starting_anyone(cluster: Cluster) -> None:
    cluster.broker(1)
    TopicAdmin(cluster.admin_zk).create("t", 6)
    a = cluster.consumer("g", {"t": 1})
    b = cluster.consumer("g", {"t": 2})
    state = cluster.wait_stable("g", 2)
    wait_until(lambda: all_owned({"t": 6})([a, b]), 10, "all partitions owned")
    assert owners_registry(cluster.admin_zk, "g") == state.target
    assert {t for c in (a, b) for parts in c.owned.values() for t in parts.values()} <= {
        f"{a.consumer_id}-0",
        f"{b.consumer_id}-0",
        f"{b.consumer_id}-1",
    }
    # The barrier, from the journal: for every generation, every stop ack precedes the first start sent.
    for gen in {e.fields["generation"] for e in cluster.events("rebalance.completed", group="g")}:
        acks = list(cluster.events("command.acked", group="g", generation=gen, option="stop-fetcher"))
        starts = list(cluster.events("command.sent", group="g", generation=gen, option="start-fetcher"))
        assert acks and starts and max(e.seq for e in acks) < min(e.seq for e in starts)
    # Commands carry the epoch and generation; each consumer saw stop before start in every generation.
    for c in (a, b):
        kinds = [(cmd.generation, cmd.option) for cmd in c.commands()]
        assert kinds == sorted(kinds, key=lambda k: (k[0], k[1] is CommandOption.START_FETCHER))


def test_a_member_that_never_acknowledges_blocks_starts_then_fails_after_retries(cluster: Cluster) -> None:
    cluster.broker(1, rebalance_timeout_s=0.4, max_rebalance_retries=2, rebalance_backoff_s=0.05)
    TopicAdmin(cluster.admin_zk).create("t", 4)
    good = cluster.consumer("g", {"t": 1})
    stuck = cluster.consumer("g", {"t": 1}, ack=False)
    wait_until(lambda: bool(cluster.events("rebalance.failed", group="g")), 20, "final failure")
    failed = cluster.events("rebalance.failed", group="g")[0]
    assert failed.fields["retries"] == 2 and "timed out in stopping" in failed.fields["reason"]
    assert len(cluster.events("rebalance.retrying", group="g")) == 2
    with_stuck = {
        e.fields["generation"]
        for e in cluster.events("rebalance.started", group="g")
        if stuck.consumer_id in e.fields["members"]
    }
    assert len(with_stuck) >= 3  # the first attempt and two retries, each a new generation (and maybe a re-trigger)
    assert not [
        e for e in cluster.events("command.sent", option="start-fetcher") if e.fields["generation"] in with_stuck
    ]
    started = {c.generation for c in good.commands(CommandOption.START_FETCHER)}
    assert not started & with_stuck, "a start was sent before every stop was acknowledged"
    # The failure is persisted (a request that arrived meanwhile may start one more round, which fails the same way).
    wait_until(lambda: cluster.state("g").phase is GroupPhase.FAILED, 20, "the failure persisted in the state")
    assert "timed out" in cluster.state("g").error


def test_a_member_leaving_mid_rebalance_aborts_at_once(cluster: Cluster) -> None:
    cluster.broker(1, rebalance_timeout_s=60)  # a timeout would take a minute: the abort must not wait for it
    TopicAdmin(cluster.admin_zk).create("t", 4)
    stuck = cluster.consumer("g", {"t": 1}, ack=False)
    good = cluster.consumer("g", {"t": 1})
    wait_until(lambda: bool(cluster.events("command.sent", consumer=stuck.consumer_id)), 10, "stop sent")
    stuck.close()
    cluster.wait_stable("g", 1, timeout=10)
    assert cluster.events("rebalance.aborted", group="g")
    good.wait_for(lambda c: c.partitions() == {("t", p) for p in range(4)})


def test_a_burst_of_joins_costs_few_rebalances(cluster: Cluster) -> None:
    cluster.broker(1)
    TopicAdmin(cluster.admin_zk).create("big", 100)
    consumers = [cluster.consumer("burst", {"big": 1}, defer_register=True) for _ in range(50)]
    cluster.admin_zk.ensure_path(paths.group_ids("burst"))
    # 50 member znodes created at once (each consumer's create sent before any reply is awaited): one burst.
    for pending in [consumer.register_async() for consumer in consumers]:
        pending.get(timeout=10)
    cluster.wait_stable("burst", 50, timeout=60)
    wait_until(lambda: all_owned({"big": 100})(consumers), 20, "every partition owned")
    started = [e for e in cluster.events("rebalance.started", group="burst") if e.fields["attempt"] == 0]
    assert 1 <= len(started) <= 3, f"{len(started)} rebalances for a burst of 50 joins"
    # 50 membership changes, but requests made while the group was queued or rebalancing were folded together.
    assert len(cluster.events("rebalance.requested", group="burst")) <= 8


def test_watchers_new_topic_wildcard_partition_growth_and_new_group(cluster: Cluster) -> None:
    cluster.broker(1)
    admin = TopicAdmin(cluster.admin_zk)
    admin.create("orders", 2)
    wild = cluster.consumer("w", {"ord.*": 1}, pattern=Pattern.WHITE_LIST)
    wild.wait_for(lambda c: c.partitions() == {("orders", 0), ("orders", 1)})
    admin.create("ordinals", 1)  # a new topic matching the wildcard
    wild.wait_for(lambda c: ("ordinals", 0) in c.partitions())
    admin.alter("orders", 3)  # partition growth
    wild.wait_for(lambda c: ("orders", 2) in c.partitions())
    static = cluster.consumer("s", {"orders": 1})  # a new group
    static.wait_for(lambda c: c.partitions() == {("orders", p) for p in range(3)})
    assert ("ordinals", 0) in wild.partitions()


def test_bad_input_is_refused_and_the_group_rebalanced_without_it(cluster: Cluster) -> None:
    cluster.broker(1)
    TopicAdmin(cluster.admin_zk).create("t", 2)
    good = cluster.consumer("g", {"t": 1, "missing-topic": 1})
    zk = cluster.admin_zk
    zk.create(paths.member("g", "g_bad-1-deadbeef"), b"{not json", ephemeral=True)
    zk.create(
        paths.member("g", "g_bad-2-deadbeef"),
        b'{"version":1,"pattern":"nope","subscription":{"t":1},"timestamp":"1"}',
        ephemeral=True,
    )
    zk.create(
        paths.member("g", "g_bad-3-deadbeef"),
        b'{"version":1,"pattern":"white_list","subscription":{"(":1},"timestamp":"1"}',
        ephemeral=True,
    )
    # Python compiles it (case-insensitive), Java may read it otherwise: outside the topic-pattern dialect
    zk.create(
        paths.member("g", "g_bad-4-deadbeef"),
        b'{"version":1,"pattern":"white_list","subscription":{"(?i)T":1},"timestamp":"1"}',
        ephemeral=True,
    )
    zk.create(f"{paths.channel('g', good.consumer_id)}/garbage", b"?")  # an unexpected node in a channel
    other = cluster.consumer("h", {"t": 1})
    good.wait_for(lambda c: c.partitions() == {("t", 0), ("t", 1)})
    other.wait_for(lambda c: c.partitions() == {("t", 0), ("t", 1)})
    reasons = " | ".join(str(e.fields) for e in cluster.events("input.rejected"))
    assert "not JSON" in reasons and "unknown pattern" in reasons and "invalid regex" in reasons
    assert "inline flags" in reasons
    assert "'missing-topic' does not exist" in reasons
    assert cluster.coordinator(1).role is Role.COORDINATOR


def test_a_phase_cut_by_a_connection_loss_resumes_without_losing_or_duplicating(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    broker = cluster.broker(1, batch_size=2)  # 5 members: 3 transactions per phase
    wait_until(lambda: cluster.acting() == [1], 10, "broker 1 coordinating")
    TopicAdmin(cluster.admin_zk).create("t", 8)
    real = broker.zk.commit_many
    cut: list[int] = []

    def first_batch_only(txns: list[Transaction]) -> list[list[object] | ZkError]:
        if cut or len(txns) < 3:
            return real(txns)
        # The connection drops after the first transaction reached the server: the rest never do, and the
        # coordinator cannot know which committed.  Then the connection comes back (same session).
        cut.append(len(txns))
        results = real(txns[:1])
        cluster.coordinator(1)._events.put(_Event("state", data=ConnState.CONNECTED))
        return [*results, *[ZkUnavailableError("connection loss (injected)") for _ in txns[1:]]]

    monkeypatch.setattr(broker.zk, "commit_many", first_batch_only)
    consumers = [cluster.consumer("g", {"t": 1}, defer_register=True) for _ in range(5)]
    for consumer in consumers:
        consumer.register()
    cluster.wait_stable("g", 5)
    wait_until(lambda: all_owned({"t": 8})(consumers), 10, "all partitions owned")
    assert cut and cut[0] >= 3  # the injected cut really hit a multi-transaction phase
    for consumer in consumers:
        per_phase: dict[tuple[int, CommandOption], int] = {}
        for command in consumer.commands():
            key = (command.generation, command.option)
            per_phase[key] = per_phase.get(key, 0) + 1
        assert set(per_phase.values()) == {1}, f"duplicated commands: {per_phase}"
    final = cluster.state("g").generation
    assert all(
        (final, CommandOption.STOP_FETCHER) in {(c.generation, c.option) for c in x.commands()} for x in consumers
    )


def test_a_malformed_owner_znode_is_overwritten_not_recreated(cluster: Cluster) -> None:
    """An owner znode whose data is garbage is refused (S7) but still exists: the next start phase must set or
    delete it, not create it (a create would fail every attempt and leave the group stopped)."""
    cluster.broker(1)
    TopicAdmin(cluster.admin_zk).create("t", 2)
    first = cluster.consumer("m", {"t": 1})
    cluster.wait_stable("m", 1)
    zk = cluster.admin_zk
    zk.set(paths.owner("m", "t", 0), b"not a thread id!")
    zk.create(paths.owner("m", "t", 7), b"??", makepath=True)  # a partition the topic does not have
    # Rewrite the state as it is: its new version tells the coordinator that the registry is no longer the one it
    # left (it trusts its own writes otherwise: snapshot.KnownRegistry), as a successor coordinator would read it.
    zk.set(paths.group_state("m"), zk.get(paths.group_state("m"))[0])
    second = cluster.consumer("m", {"t": 1})  # a join: the coordinator rewrites the registry
    cluster.wait_stable("m", 2)
    first.wait_for(lambda c: len(c.partitions()) == 1)
    second.wait_for(lambda c: len(c.partitions()) == 1)
    owners = {p: zk.get(paths.owner("m", "t", p))[0].decode() for p in (0, 1)}
    assert sorted(owners.values()) == sorted([f"{first.consumer_id}-0", f"{second.consumer_id}-0"])
    assert zk.exists(paths.owner("m", "t", 7)) is None
    assert not cluster.events("rebalance.failed", group="m")


# --- the worker's supervisor ----------------------------------------------------------------------------------------


def test_a_step_that_crashes_ends_the_term_and_a_new_one_rebalances(cluster: Cluster) -> None:
    """A bug in a step (an error no boundary translates) must not leave a broker holding the seat with a dead worker:
    the term ends, a new one is elected and the group is rebalanced again."""
    cluster.broker(1)
    wait_until(lambda: cluster.acting() == [1], 10, "broker 1 coordinates")
    TopicAdmin(cluster.admin_zk).create("t", 4)
    first = cluster.consumer("g", {"t": 1})
    cluster.wait_stable("g", 1)
    coordinator = cluster.coordinator(1)
    pump, crashes = coordinator._pump, list[int]()

    def broken() -> None:
        if not crashes:
            crashes.append(1)
            raise KeyError("a bug")
        pump()

    broken.__name__ = "_pump"
    coordinator._pump = broken  # type: ignore[method-assign]
    second = cluster.consumer("g", {"t": 1})
    cluster.wait_stable("g", 2)
    assert all_owned({"t": 4})([first, second])
    (crash,) = cluster.events("coordinator.crashed", broker=1)
    assert crash.fields["step"] == "pump" and crash.fields["error"] == "KeyError: 'a bug'"
    assert any(e.fields["reason"] == "crashed in pump: KeyError" for e in cluster.events("coordinator.resigned"))
    epochs = [e.fields["epoch"] for e in cluster.events("coordinator.elected", broker=1)]
    assert len(epochs) == 2 and epochs[1] > epochs[0]


def test_a_crashed_term_hands_the_seat_to_a_standby_during_its_backoff(cluster: Cluster) -> None:
    """A broker whose steps keep crashing waits out a backoff (here at its 30 s maximum, as after repeated crashes)
    before it tries the election again; the seat is handed back at the crash, so the standby coordinates meanwhile
    and the group is rebalanced by it, not after the backoff."""
    cluster.broker(1)
    wait_until(lambda: cluster.acting() == [1], 10, "broker 1 coordinates")
    cluster.broker(2)
    TopicAdmin(cluster.admin_zk).create("t", 4)
    first = cluster.consumer("g", {"t": 1})
    cluster.wait_stable("g", 1)
    coordinator = cluster.coordinator(1)
    coordinator._crashes, coordinator._last_crash = 7, coordinator.clock()  # the next crash waits 30 s
    pump = coordinator._pump

    def broken() -> None:
        if coordinator.role is Role.COORDINATOR:
            raise KeyError("a bug")
        pump()

    broken.__name__ = "_pump"
    coordinator._pump = broken  # type: ignore[method-assign]
    second = cluster.consumer("g", {"t": 1})
    wait_until(lambda: cluster.acting() == [2], 10, "broker 2 coordinating during broker 1's backoff")
    cluster.wait_stable("g", 2)
    assert all_owned({"t": 4})([first, second])
    (crash,) = cluster.events("coordinator.crashed", broker=1)
    assert crash.fields["retry_in_s"] == 30.0
    assert len(cluster.events("coordinator.elected", broker=1)) == 1  # not elected back meanwhile
