"""The multi-host scenario on network namespaces made by the run itself: every process its own host.

:class:`HostCluster` is the demo's :class:`~zkcoord.testbed.scenario.cluster.RunCluster` with each process started on
a new host of a :class:`~zkcoord.testbed.multihost.net.NetLab` (``nsenter --net``), and ZooKeeper a 3-server ensemble
on three more hosts; the journal and the partition logs stay on the shared filesystem, as on a shared volume.  It
implements :class:`~zkcoord.testbed.multihost.faults.Deployment`.  :func:`run_hosts` runs a whole scenario: the
workload, the faults one after the other while producing, the drain, the stop.  Runs on the caller's thread; needs
root (:func:`~zkcoord.testbed.multihost.net.missing`).
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from zkcoord.errors import ConfigurationError
from zkcoord.testbed.multihost.faults import HOST_FAULTS, Say, settle
from zkcoord.testbed.multihost.net import Host, NetLab, drop_between, heal
from zkcoord.testbed.multihost.zookeeper import HostEnsemble
from zkcoord.testbed.procs import ChildProcess, ProcessError, wait_until
from zkcoord.testbed.scenario.cluster import RunCluster, Workload
from zkcoord.testbed.scenario.faults import Skipped

#: a small workload: one producer per topic, two consumers in each of two groups
HOSTS_WORKLOAD = Workload(
    static_partitions=4, static_consumers=2, wildcard_topics=("events-a",), wildcard_partitions=2,
    wildcard_consumers=2, rate=100,
)  # fmt: skip


@dataclass
class HostCluster(RunCluster):
    lab: NetLab = field(default_factory=NetLab)
    zk: HostEnsemble | None = None
    host_of: dict[int, Host] = field(default_factory=dict)  # pid -> the host it runs on
    _cut: set[Host] = field(default_factory=set)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.stack.callback(self.lab.close)  # first in, last out: after every process on its hosts has stopped
        self.grace_s = self.workload.session_timeout_s * 2 + 10

    def start_zookeeper(self) -> str:
        self.zk = HostEnsemble([self.lab.add(f"zk{i}") for i in (1, 2, 3)], self.run_dir / "zk")
        self.stack.callback(self.zk.close)
        self.zk.start()
        self.external_zk = self.zk.connect_string
        return super().start_zookeeper()

    def _spawn(self, args: list[str], name: str) -> ChildProcess:
        host = self.lab.add(name)
        env = {"ZKCOORD_FAULT_DIR": str(self.fault_dir)}
        proc = ChildProcess(args, self.logs / f"{name}.log", env=env, prefix=host.enter)
        proc.start()
        self.stack.callback(proc.terminate)
        self.host_of[proc.pid] = host
        return proc

    # --- Deployment ---------------------------------------------------------------------------------------------

    def hosts_ensemble(self) -> HostEnsemble:
        """:raises ProcessError: ZooKeeper is not started yet."""
        if self.zk is None:
            raise ProcessError("the hosts' ZooKeeper ensemble is not started yet")
        return self.zk

    def zk_hosts(self) -> list[Host]:
        return list(self.hosts_ensemble().hosts)

    def zk_mode(self, index: int) -> str | None:
        return self.hosts_ensemble().mode(index)

    def kill_zk(self, index: int) -> None:
        self.hosts_ensemble().kill(index)

    def start_zk(self, index: int) -> None:
        self.hosts_ensemble().start(index)

    def broker_host(self, broker_id: int) -> Host:
        return self.host_of[self.brokers[broker_id].pid]

    def broker_registered(self, broker_id: int) -> bool:
        return self._registered(broker_id)

    def consumer_hosts(self) -> list[tuple[str, Host]]:
        return [(m.group, self.host_of[m.proc.pid]) for m in self.live_members()]

    def other_hosts(self) -> list[Host]:
        procs = [*self.brokers.values(), *(m.proc for m in self.members), *self.producers.values()]
        return [self.host_of[p.pid] for p in procs if p.alive()]

    def member_count(self, group: str) -> int:
        return len(self.live_members(group))

    def cut(self, side: list[Host], others: list[Host]) -> None:
        drop_between(side, others)
        self._cut.update(side)

    def heal(self) -> None:
        heal(self._cut)
        self._cut.clear()


@dataclass
class HostsResult:
    run_dir: Path
    faults: Counter[str] = field(default_factory=Counter)
    done: list[str] = field(default_factory=list)
    seconds: float = 0.0


def run_hosts(
    run_dir: Path, faults: Sequence[str] = tuple(HOST_FAULTS), *, seed: int = 1, workload: Workload = HOSTS_WORKLOAD,
    say: Say = print,
) -> HostsResult:  # fmt: skip
    """Run the multi-host scenario in ``run_dir`` (its journal in ``run_dir/journal``): every fault of ``faults`` in
    order, each once the previous has settled, then the drain (every group consumes everything produced) and the
    stop.  :raises ProcessError: something did not happen in time; :raises NetError: no hosts can be made here."""
    unknown = [f for f in faults if f not in HOST_FAULTS]
    if unknown:
        raise ConfigurationError(f"unknown multi-host faults {unknown}; known: {', '.join(HOST_FAULTS)}")
    started = time.monotonic()
    rng = random.Random(seed)
    result = HostsResult(run_dir)
    cluster = HostCluster(run_dir, workload)
    try:
        say(f"[hosts] ZooKeeper at {cluster.start_zookeeper()}")
        for broker_id in (1, 2, 3):
            cluster.start_broker(broker_id)
        wait_until(lambda: cluster.coordinator() is not None, 30, "a coordinator")
        cluster.create_topics()
        for group, count in ((workload.static_group, workload.static_consumers),
                             (workload.wildcard_group, workload.wildcard_consumers)):  # fmt: skip
            for _ in range(count):
                cluster.start_consumer(group)
        cluster.wait_all_stable(60)
        cluster.start_producers()
        say(f"[hosts {time.monotonic() - started:5.1f}s] {len(cluster.lab.hosts)} hosts up")
        for kind in faults:
            found = HOST_FAULTS[kind].run(cluster, rng, say)
            detail = f"skipped: {found}" if isinstance(found, Skipped) else found
            result.done.append(f"{kind}: {detail}")
            say(f"[hosts {time.monotonic() - started:5.1f}s] {kind} done: {detail}")
        cluster.stop_producers()
        wait_until(lambda: _drained(cluster), 45, "every group to drain", interval=0.25)
        settle(cluster)
    finally:
        cluster.close()
    result.seconds = time.monotonic() - started
    say(f"[hosts {result.seconds:5.1f}s] stopped")
    return result


def _drained(cluster: HostCluster) -> bool:
    return all(cluster.lag(g) == 0 for g in cluster.groups())
