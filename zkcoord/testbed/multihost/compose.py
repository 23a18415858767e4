"""The multi-host faults on the running Compose deployment (``make compose-up``): each container is a host.

:class:`ComposeDeployment` implements :class:`~zkcoord.testbed.multihost.faults.Deployment` over the containers of
one Compose project, found through ``docker`` (labels ``com.docker.compose.*``): a container's network namespace is
``/proc/<pid>/ns/net``, so partitions are the same iptables ``DROP`` rules as on the run's own namespaces; the
ensemble's leader is killed with ``docker kill`` and restarted with ``docker start``.  It reads ZooKeeper from this
machine (the containers' addresses are reachable on the project's bridge) and the partition logs and journal on the
shared volume's directory.  :func:`run_compose` draws faults for a duration, then stops the producer, waits for the
groups to drain and stops every container (SIGTERM), leaving the journal to ``zkcoord analyze``.  Needs root;
runs on the caller's thread; every wait has a deadline.
"""

from __future__ import annotations

import json
import random
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from zkcoord.admin.groups import GroupStatus, describe_group
from zkcoord.errors import CodecError, ZkCoordError, ZkError
from zkcoord.layout import paths
from zkcoord.layout.group_state import GroupPhase
from zkcoord.layout.registrations import CoordinatorInfo
from zkcoord.runtime.journal import Journal
from zkcoord.testbed.multihost.faults import HOST_FAULTS, Say, settle
from zkcoord.testbed.multihost.net import Host, drop_between, heal
from zkcoord.testbed.procs import ProcessError, wait_until
from zkcoord.testbed.scenario.faults import Skipped
from zkcoord.zk import ZkClient, ZkConfig
from zkcoord.zkserver.util import server_mode

#: the consumer services of compose.yaml and their groups
GROUPS = {"consumer-billing": "billing", "consumer-audit": "audit"}


def _docker(*args: str, timeout: float = 60) -> str:
    try:
        out = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ProcessError(f"docker {' '.join(args)}: {e}") from e
    if out.returncode != 0:
        raise ProcessError(f"docker {' '.join(args)} failed: {out.stderr.strip()}")
    return out.stdout


@dataclass(frozen=True, slots=True)
class Container:
    name: str
    service: str
    running: bool
    host: Host


@dataclass
class ComposeDeployment:
    """The containers of Compose project ``project``; the shared volume's directory is found by its name."""

    project: str = "zkcoord"
    volume: str = "zkcoord-data"
    grace_s: float = 30.0
    _cut: set[Host] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.root = Path(_docker("volume", "inspect", "-f", "{{.Mountpoint}}", f"{self.project}_{self.volume}").strip())
        self.data_dir, self.journal_dir = self.root / "data", self.root / "journal"
        # The services make the journal's directory as their own user; made here, it would be root's.
        wait_until(self.journal_dir.is_dir, 120, f"the services to make {self.journal_dir}", interval=0.5)
        self.journal = Journal(self.journal_dir, "scenario")
        connect = ",".join(f"{h.ip}:2181" for h in self.zk_hosts())
        self.admin = ZkClient(ZkConfig.from_string(connect, session_timeout_s=10))
        self.admin.start()

    def close(self) -> None:
        self.admin.stop()
        self.journal.close()

    def containers(self) -> list[Container]:
        names = _docker("ps", "-aq", "--filter", f"label=com.docker.compose.project={self.project}").split()
        found = []
        for doc in json.loads(_docker("inspect", *names)) if names else []:
            networks = doc["NetworkSettings"]["Networks"]
            ip = next((n["IPAddress"] for n in networks.values() if n.get("IPAddress")), "")
            name = doc["Name"].lstrip("/")
            service = doc["Config"]["Labels"]["com.docker.compose.service"]
            running = bool(doc["State"]["Running"])
            found.append(Container(name, service, running, Host(name, ip, f"/proc/{doc['State']['Pid']}/ns/net")))
        return sorted(found, key=lambda c: c.name)

    def _running(self, test: Callable[[Container], bool]) -> list[Container]:
        return [c for c in self.containers() if c.running and test(c)]

    def _zk(self) -> list[Container]:
        return [c for c in self.containers() if c.service.startswith("zk")]

    # --- Deployment ---------------------------------------------------------------------------------------------

    def zk_hosts(self) -> list[Host]:
        return [c.host for c in self._zk()]

    def zk_mode(self, index: int) -> str | None:
        c = self._zk()[index]
        return server_mode(c.host.ip, 2181, 1.0) if c.running and c.host.ip else None

    def kill_zk(self, index: int) -> None:
        _docker("kill", self._zk()[index].name)

    def start_zk(self, index: int) -> None:
        _docker("start", self._zk()[index].name)

    def coordinator(self) -> int | None:
        try:
            return CoordinatorInfo.decode(self.admin.get(paths.COORDINATOR)[0]).broker_id
        except (ZkError, CodecError):
            return None

    def broker_host(self, broker_id: int) -> Host:
        return next(c.host for c in self.containers() if c.service == f"broker{broker_id}")

    def broker_registered(self, broker_id: int) -> bool:
        try:
            return self.admin.exists(paths.broker(broker_id)) is not None
        except ZkError:
            return False

    def consumer_hosts(self) -> list[tuple[str, Host]]:
        return [(GROUPS[c.service], c.host) for c in self._running(lambda c: c.service in GROUPS)]

    def other_hosts(self) -> list[Host]:
        return [c.host for c in self._running(lambda c: not c.service.startswith("zk"))]

    def groups(self) -> list[str]:
        return sorted(set(GROUPS.values()))

    def member_count(self, group: str) -> int:
        return len(self._running(lambda c: GROUPS.get(c.service) == group))

    def stable(self, group: str, members: int) -> bool:
        try:
            d = describe_group(self.admin, group, self.data_dir)
        except ZkCoordError:  # not there yet, or mid-change
            return False
        if d.state is not GroupStatus.STABLE or d.membership_changed:
            return False
        if d.persisted is not None and d.persisted.phase is GroupPhase.RECONCILING:
            return False
        return len(d.members) == members

    def lag(self, group: str) -> int | None:
        try:
            parts = describe_group(self.admin, group, self.data_dir).partitions
        except ZkCoordError:
            return None
        lags = [p.lag for p in parts]
        return None if any(lag is None for lag in lags) else sum(lag for lag in lags if lag is not None)

    def cut(self, side: list[Host], others: list[Host]) -> None:
        drop_between(side, others)
        self._cut.update(side)

    def heal(self) -> None:
        heal(self._cut)
        self._cut.clear()

    def record_fault(self, fault: str, target: str, detail: str = "") -> None:
        self.journal.emit("fault.injected", fault=fault, target=target, detail=detail)


def run_compose(d: ComposeDeployment, duration_s: float, *, seed: int = 1, pause_s: float = 10.0,
                say: Say = print) -> list[str]:  # fmt: skip
    """Inject faults drawn from ``seed`` for ``duration_s`` seconds, ``pause_s`` of plain producing between them;
    then stop the producer, wait until both groups consumed everything, and stop every container.  The faults done,
    as ``kind: what happened`` (``kind: did not settle: ...`` for one whose aftermath missed its deadline,
    ``kind: skipped: ...`` for one that found nothing to inject into).

    :raises ProcessError: the groups did not drain, or docker failed."""
    rng = random.Random(seed)
    started = time.monotonic()
    done: list[str] = []
    settle(d)
    while time.monotonic() - started < duration_s:
        kind = rng.choice(sorted(HOST_FAULTS))
        try:
            result = HOST_FAULTS[kind].run(d, rng, say)
            detail = f"skipped: {result}" if isinstance(result, Skipped) else result
        except ProcessError as e:  # reported, and the run goes on: a soak run shows every such fault
            detail = f"did not settle: {e}"
        finally:
            d.heal()  # never leave a partition behind, whatever happened
        done.append(f"{kind}: {detail}")
        say(f"[compose {time.monotonic() - started:6.1f}s] {kind}: {detail}")
        time.sleep(pause_s)  # plain producing between faults: the schedule's own pace
    producer = [c.name for c in d.containers() if c.service == "producer"]
    _docker("stop", *producer)
    say(f"[compose {time.monotonic() - started:6.1f}s] producer stopped; draining")
    wait_until(lambda: all(d.lag(g) == 0 for g in d.groups()), 120, "every group to drain", interval=0.5)
    _docker("stop", "-t", "20", *[c.name for c in d.containers() if c.running])
    say(f"[compose {time.monotonic() - started:6.1f}s] every container stopped")
    return done
