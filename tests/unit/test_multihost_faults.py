"""The multi-host faults leave the deployment as they found it even when their aftermath misses its deadline: the
partition healed (and journalled as healed), the killed ZooKeeper server started again.  The Compose soak run reports
such a fault and goes on with the next, which must not find two servers or a partition left behind.  A fault with
nothing to inject into says so (``Skipped``).

Against a stand-in :class:`~zkcoord.testbed.multihost.faults.Deployment` whose waits never come true: the real
partitions are ``tests/integration/test_multihost.py``'s."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest

from zkcoord.testbed.multihost.faults import HOST_FAULTS
from zkcoord.testbed.multihost.net import Host
from zkcoord.testbed.procs import ProcessError
from zkcoord.testbed.scenario.faults import Skipped


@dataclass
class Stuck:
    """Three servers (0 the leader), a coordinator that never changes, groups that never settle."""

    grace_s: float = 0.3
    killed: set[int] = field(default_factory=set)
    started: list[int] = field(default_factory=list)
    cut_now: set[str] = field(default_factory=set)
    faults: list[tuple[str, str]] = field(default_factory=list)
    coordinator_id: int | None = 1

    def zk_hosts(self) -> list[Host]:
        return [Host(f"zk{i}", f"10.0.0.{i}", f"/ns/zk{i}") for i in (1, 2, 3)]

    def zk_mode(self, index: int) -> str | None:
        if index in self.killed:
            return None
        return "leader" if index == 0 else "follower"  # no new leader is ever elected

    def kill_zk(self, index: int) -> None:
        self.killed.add(index)

    def start_zk(self, index: int) -> None:
        self.killed.discard(index)
        self.started.append(index)

    def coordinator(self) -> int | None:
        return self.coordinator_id

    def broker_host(self, broker_id: int) -> Host:
        return Host(f"broker{broker_id}", f"10.0.1.{broker_id}", f"/ns/b{broker_id}")

    def broker_registered(self, broker_id: int) -> bool:
        return True

    def consumer_hosts(self) -> list[tuple[str, Host]]:
        return [("g", Host(f"c{i}", f"10.0.2.{i}", f"/ns/c{i}")) for i in (1, 2)]

    def other_hosts(self) -> list[Host]:
        return [self.broker_host(1), *(h for _, h in self.consumer_hosts())]

    def stable(self, group: str, members: int) -> bool:
        return False

    def member_count(self, group: str) -> int:
        return 2

    def groups(self) -> list[str]:
        return ["g"]

    def cut(self, side: list[Host], others: list[Host]) -> None:
        self.cut_now.update(h.name for h in side)

    def heal(self) -> None:
        self.cut_now.clear()

    def record_fault(self, fault: str, target: str, detail: str = "") -> None:
        self.faults.append((fault, target))


@pytest.mark.parametrize("kind", ["coordinator-cut", "consumer-cut", "follower-isolated"])
def test_a_partition_whose_aftermath_times_out_is_healed_and_journalled_healed(kind: str) -> None:
    d = Stuck()
    with pytest.raises(ProcessError):
        HOST_FAULTS[kind].run(d, random.Random(1), lambda line: None)
    assert d.cut_now == set(), f"{kind} left a partition behind"
    [(_, cut), (healed, target)] = d.faults
    assert healed == "partition-healed" and target == cut, d.faults


def test_a_killed_leader_is_started_again_when_no_new_leader_comes_in_time() -> None:
    d = Stuck()
    with pytest.raises(ProcessError):
        HOST_FAULTS["zk-leader-kill"].run(d, random.Random(1), lambda line: None)
    assert d.started == [0] and not d.killed, "the killed server was left down"


def test_a_fault_with_nothing_to_inject_into_says_it_skipped() -> None:
    d = Stuck(coordinator_id=None)
    assert isinstance(HOST_FAULTS["coordinator-cut"].run(d, random.Random(1), lambda line: None), Skipped)
    assert d.faults == [] and d.cut_now == set()
