"""The multi-host faults: partitions that drop packets between hosts, and the ensemble's leader killed.

Written against :class:`Deployment`, which both the network-namespace run (:mod:`.cluster`) and the Compose
deployment (:mod:`.compose`) implement, so the same faults run on both.  Each fault journals ``fault.injected``
(``partition`` / ``partition-healed``, ``zk-leader-kill``), waits on conditions with deadlines, and leaves the
deployment as it found it: healed, every server serving, every broker registered, every group stable with all its
members -- so faults compose in any order.  A fault heals its partition, or restarts the server it killed, even
when a wait of its aftermath times out (:class:`~zkcoord.testbed.procs.ProcessError`, raised after that): a soak run
that reports the fault and goes on must not go on against a partitioned deployment or two servers.  A fault that
finds nothing to inject into returns :class:`~zkcoord.testbed.scenario.faults.Skipped`.  Run from one thread.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from zkcoord.testbed.multihost.net import Host
from zkcoord.testbed.procs import wait_until
from zkcoord.testbed.scenario.faults import Skipped

Say = Callable[[str], None]


class Deployment(Protocol):
    """What the faults need of a deployment: its hosts, ZooKeeper servers, brokers and groups."""

    #: seconds for a session cut off to expire on the servers and everyone to notice, plus a rebalance
    grace_s: float

    def zk_hosts(self) -> list[Host]: ...
    def zk_mode(self, index: int) -> str | None: ...
    def kill_zk(self, index: int) -> None: ...
    def start_zk(self, index: int) -> None: ...
    def coordinator(self) -> int | None: ...
    def broker_host(self, broker_id: int) -> Host: ...
    def broker_registered(self, broker_id: int) -> bool: ...
    def consumer_hosts(self) -> list[tuple[str, Host]]: ...
    def other_hosts(self) -> list[Host]: ...
    def stable(self, group: str, members: int) -> bool: ...
    def member_count(self, group: str) -> int: ...
    def groups(self) -> list[str]: ...
    def cut(self, side: list[Host], others: list[Host]) -> None: ...
    def heal(self) -> None: ...
    def record_fault(self, fault: str, target: str, detail: str = "") -> None: ...


@dataclass(frozen=True, slots=True)
class HostFault:
    kind: str
    description: str
    run: Callable[[Deployment, random.Random, Say], str]


def everyone(d: Deployment) -> list[Host]:
    return [*d.zk_hosts(), *d.other_hosts()]


def leader(d: Deployment) -> int | None:
    leaders = [i for i in range(len(d.zk_hosts())) if d.zk_mode(i) == "leader"]
    return leaders[0] if len(leaders) == 1 else None


def settle(d: Deployment, timeout: float | None = None) -> None:
    """Every server serving, a coordinator, every group stable with all its members."""
    n = len(d.zk_hosts())

    def ok() -> bool:
        return (
            all(d.zk_mode(i) in ("leader", "follower") for i in range(n))
            and d.coordinator() is not None
            and all(d.stable(g, d.member_count(g)) for g in d.groups())
        )

    wait_until(ok, timeout or 3 * d.grace_s, "every server serving and every group stable", interval=0.2)


def _heal(d: Deployment, target: str) -> None:
    d.heal()
    d.record_fault("partition-healed", target)


def coordinator_cut(d: Deployment, rng: random.Random, say: Say) -> str:
    """The coordinator's host and one ZooKeeper follower's cut off from everyone else: the coordinator can reach only
    a server that lost its quorum, so its session expires on the majority and another broker is elected there."""
    broker, top = d.coordinator(), leader(d)
    if broker is None or top is None:
        return Skipped("no coordinator or no ZooKeeper leader")
    follower = rng.choice([i for i in range(len(d.zk_hosts())) if i != top])
    minority = [d.broker_host(broker), d.zk_hosts()[follower]]
    d.cut(minority, [h for h in everyone(d) if h not in minority])
    target = f"broker-{broker}+zookeeper-{follower + 1}"
    d.record_fault("partition", target, "coordinator and a ZooKeeper follower cut off from the majority (DROP)")
    say(f"broker {broker} (coordinator) and ZooKeeper {follower + 1} cut off from the majority")
    try:
        wait_until(lambda: d.coordinator() not in (None, broker), d.grace_s, "a coordinator on the majority side")
        wait_until(lambda: all(d.stable(g, d.member_count(g)) for g in d.groups()), d.grace_s, "the groups stable")
        new = d.coordinator()
    finally:
        _heal(d, target)
    wait_until(lambda: d.broker_registered(broker), d.grace_s, f"broker {broker} registered again")
    settle(d)
    return f"coordinator {broker} cut off with ZooKeeper {follower + 1}; broker {new} took over"


def consumer_cut(d: Deployment, rng: random.Random, say: Say) -> str:
    """A consumer's host cut off from every ZooKeeper server while it runs; healed once its group went on without
    it (its lease stopped it handing records out meanwhile).  Only a consumer of a group with others to go on."""
    choices = [(g, h) for g, h in d.consumer_hosts() if d.member_count(g) >= 2]
    if not choices:
        return Skipped("no group with two consumers")
    group, host = rng.choice(choices)
    n = d.member_count(group)
    d.cut([host], d.zk_hosts())
    d.record_fault("partition", host.name, f"consumer of {group} cut off from ZooKeeper (DROP)")
    say(f"consumer {host.name} ({group}) cut off from every ZooKeeper server")
    try:
        wait_until(lambda: d.stable(group, n - 1), d.grace_s, f"{group} to go on without {host.name}")
    finally:
        _heal(d, host.name)
    settle(d)
    return f"consumer {host.name} of {group}"


def follower_isolated(d: Deployment, rng: random.Random, say: Say) -> str:
    """One ZooKeeper follower cut off from every other host: it stops serving, its clients move to the others."""
    top = leader(d)
    if top is None:
        return Skipped("no ZooKeeper leader")
    follower = rng.choice([i for i in range(len(d.zk_hosts())) if i != top])
    host = d.zk_hosts()[follower]
    d.cut([host], [h for h in everyone(d) if h != host])
    target = f"zookeeper-{follower + 1}"
    d.record_fault("partition", target, "ZooKeeper follower isolated (DROP)")
    say(f"ZooKeeper {follower + 1} (follower) isolated")
    try:
        wait_until(lambda: d.zk_mode(follower) is None, d.grace_s, f"ZooKeeper {follower + 1} to stop serving")
        wait_until(lambda: all(d.stable(g, d.member_count(g)) for g in d.groups()), d.grace_s, "the groups stable")
    finally:
        _heal(d, target)
    settle(d)
    return f"follower {follower + 1}"


def zk_leader_kill(d: Deployment, rng: random.Random, say: Say) -> str:
    """SIGKILL the ensemble's leader; restart it once the others elected a new one."""
    top = leader(d)
    if top is None:
        return Skipped("no ZooKeeper leader")
    d.kill_zk(top)
    d.record_fault("zk-leader-kill", f"zookeeper-{top + 1}", "SIGKILL the ensemble's leader")
    say(f"ZooKeeper {top + 1} (leader) killed")
    try:
        wait_until(lambda: leader(d) not in (None, top), d.grace_s, "a new ZooKeeper leader")
        new = leader(d)
    finally:  # restarted even when no new leader came in time (Compose restarts no ZooKeeper container by itself)
        d.start_zk(top)
    settle(d)
    return f"leader {top + 1} killed, {'none' if new is None else new + 1} elected"


HOST_FAULTS: dict[str, HostFault] = {
    f.kind: f
    for f in (
        HostFault("coordinator-cut", "the coordinator and a ZooKeeper follower cut off from the majority (DROP)",
                  coordinator_cut),
        HostFault("consumer-cut", "a consumer cut off from every ZooKeeper server (DROP)", consumer_cut),
        HostFault("follower-isolated", "a ZooKeeper follower cut off from every other host (DROP)",
                  follower_isolated),
        HostFault("zk-leader-kill", "SIGKILL the ZooKeeper ensemble's leader, restart it", zk_leader_kill),
    )
}  # fmt: skip
