"""Acknowledgements through one-shot data watches on the commands written, across connection losses, against a real
ZooKeeper: a command whose watch could not be set is looked at again at the next reconnect, also when setting it
fails a second time during that very recheck (a review found the second case lost: the phase then waited for its
timeout)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from zkcoord.consumer.acks import acknowledge
from zkcoord.coordinator.attempt import Step
from zkcoord.coordinator.commands import PhaseWriter
from zkcoord.coordinator.config import CoordinatorConfig
from zkcoord.coordinator.election import Fence, try_elect
from zkcoord.coordinator.rebalancer import Rebalancer
from zkcoord.errors import ZkUnavailableError
from zkcoord.layout import paths
from zkcoord.layout.registrations import MemberRegistration, Pattern
from zkcoord.runtime.journal import Journal
from zkcoord.testbed.procs import wait_until
from zkcoord.zk import WatchEvent, ZkClient, ZkConfig

pytestmark = pytest.mark.integration

G = "g"
A, B = "g_a-1-00000001", "g_b-1-00000002"


@pytest.fixture
def zk(zk_hosts: str) -> Iterator[ZkClient]:
    with ZkClient(ZkConfig.from_string(zk_hosts)) as client:
        yield client


def _rebalancer(zk: ZkClient, events: list[WatchEvent]) -> Rebalancer:
    journal = Journal(None, "coordinator")
    zk.ensure_path(paths.COORDINATOR_EPOCH.rsplit("/", 1)[0])
    term = try_elect(zk, 1, journal, 0)
    assert term is not None
    return Rebalancer(
        zk,
        PhaseWriter(Fence(zk, term), 200),
        CoordinatorConfig(rebalance_timeout_s=60),
        journal,
        schedule=lambda *_: None,
        topics=lambda: {"t": 2},
        ack_watch=events.append,
    )


def _members(zk: ZkClient) -> None:
    reg = MemberRegistration(Pattern.STATIC, {"t": 1}, 1)
    for cid in (A, B):
        zk.ensure_path(paths.channel(G, cid))  # as a consumer does, before registering
        zk.create(paths.member(G, cid), reg.encode(), ephemeral=True, makepath=True)


def _deliver(r: Rebalancer, events: list[WatchEvent], expected: int) -> None:
    """Hand the worker the ``expected`` watch events (they arrive on kazoo's thread)."""
    wait_until(lambda: len(events) >= expected, 10, f"{expected} watch event(s)")
    while events:
        r.on_ack(events.pop(0))


def _ack(zk: ZkClient, cid: str) -> None:
    """Acknowledge as a consumer does (deleted and recorded in the channel)."""
    for name in zk.get_children(paths.channel(G, cid)):
        acknowledge(zk, f"{paths.channel(G, cid)}/{name}")


def test_a_watch_failing_during_the_reconnect_recheck_is_rechecked_at_the_next_reconnect(zk: ZkClient) -> None:
    events: list[WatchEvent] = []
    _members(zk)
    r = _rebalancer(zk, events)
    real = zk.get_many
    calls = {"n": 0}

    def flaky(paths_: list[str], watch: object = None, watched: object = None) -> object:
        if watch is None:  # the group's own reads
            return real(paths_)
        calls["n"] += 1
        if calls["n"] <= 2:
            # 1: the watches on the stop commands just written fail (the first connection loss): unwatched;
            # 2: at the reconnect, the re-watch of A's command is in flight when the connection drops again.
            raise ZkUnavailableError("connection lost")
        return real(paths_, watch=watch)  # type: ignore[arg-type]

    zk.get_many = flaky  # type: ignore[method-assign,assignment]
    r.begin(G, "test", time.monotonic())
    attempt = r.active[G]
    assert attempt.outstanding == {A, B}
    assert r.unwatched == {G}
    r.on_reconnected()  # rechecks A (its watch fails again: G is unwatched once more...) and B (watched)
    zk.get_many = real  # type: ignore[method-assign]
    assert calls["n"] == 3
    # Both consumers acknowledge while the coordinator is disconnected (again) ...
    _ack(zk, A)
    _ack(zk, B)
    _deliver(r, events, 1)  # B's, through its watch
    assert attempt.outstanding == {A}
    # ... and the second reconnect comes: A's channel is listed again, its command is gone, the barrier is passed
    # and the start step is written (to both members: this group is eager).
    r.on_reconnected()
    assert attempt.step is Step.STARTING, f"acknowledgement never seen: {sorted(attempt.outstanding)}"
    assert attempt.outstanding == {A, B}
