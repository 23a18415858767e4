"""The scale benchmark's swarm (``zkcoord/bench/scale/swarm.py``) against a real ZooKeeper and a real coordinator.

The swarm runs as its own process, as in the benchmark: many consumer sessions on one asyncio loop, each with its own
TCP connection and ZooKeeper session.  It must behave as ``tests/scripted.py``'s consumer: register, receive a
stop-fetcher then a start-fetcher per rebalance, acknowledge each by deleting it, so that groups become STABLE; and
on SIGTERM close its sessions (members vanish at once, long before their session timeout), while a SIGKILLed swarm's
sessions expire on the server only after the timeout, having been kept alive by pings until then.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from zkcoord.broker import Broker, BrokerConfig
from zkcoord.coordinator import Coordinator, CoordinatorConfig, Role
from zkcoord.data.topics import TopicAdmin
from zkcoord.errors import NoNodeError
from zkcoord.layout import paths
from zkcoord.layout.group_state import GroupPhase, GroupState
from zkcoord.runtime.journal import Journal, read_journal
from zkcoord.testbed.procs import wait_until
from zkcoord.zk import ZkClient, ZkConfig

pytestmark = pytest.mark.integration

TOPIC = "orders"
PARTITIONS = 4
CONSUMER_ID = re.compile(r"(?P<group>[A-Za-z0-9._-]+)_[A-Za-z0-9.-]+-[0-9]{13}-[0-9a-f]{8}")


class Swarm:
    """``python -m zkcoord.bench.scale.swarm`` as a child process."""

    def __init__(self, tmp: Path, hosts: str, groups: str, per_group: int, session_timeout: float) -> None:
        self.ready_file = tmp / "swarm.ready.json"
        self.stats_file = tmp / "swarm.stats.json"
        self.log_path = tmp / "swarm.log"
        args = [sys.executable, "-m", "zkcoord.bench.scale.swarm", "--zk", hosts, "--groups", groups]
        args += ["--per-group", str(per_group), "--topic", TOPIC, "--session-timeout", f"{session_timeout:g}"]
        args += ["--ready-file", str(self.ready_file), "--stats-file", str(self.stats_file)]
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)

    def wait_ready(self, timeout: float) -> dict[str, Any]:
        def ready() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"swarm exited with {self.proc.returncode}: {self.log()}")
            return self.ready_file.exists()

        wait_until(ready, timeout, "the swarm's ready file")
        doc: dict[str, Any] = json.loads(self.ready_file.read_text())
        return doc

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)


@pytest.fixture
def cluster(zk_hosts: str, tmp_path: Path) -> Iterator[tuple[ZkClient, Coordinator, Path]]:
    """One broker hosting the coordinator (in this process), a topic, and an admin client."""
    journal_dir = tmp_path / "journal"
    with ExitStack() as stack:
        admin = stack.enter_context(ZkClient(ZkConfig.from_string(zk_hosts)))
        coordinator = Coordinator(1, CoordinatorConfig(rebalance_timeout_s=10.0))
        broker = Broker(
            BrokerConfig(1, ZkConfig.from_string(zk_hosts, session_timeout_s=2.0), host="h", takeover_wait_s=0.5),
            Journal(journal_dir, "broker-1"),
            [coordinator],
        )
        broker.start()
        stack.callback(broker.stop)
        wait_until(lambda: coordinator.role is Role.COORDINATOR, 10, "the coordinator to be elected")
        TopicAdmin(admin).create(TOPIC, PARTITIONS)
        yield admin, coordinator, journal_dir


def state_of(admin: ZkClient, group: str) -> GroupState | None:
    try:
        data, _ = admin.get(paths.group_state(group))
    except NoNodeError:
        return None
    return GroupState.decode(data)


def members_of(admin: ZkClient, group: str) -> list[str]:
    try:
        return admin.get_children(paths.group_ids(group))
    except NoNodeError:
        return []


def test_a_swarm_converges_with_the_coordinator_and_closes_its_sessions(
    cluster: tuple[ZkClient, Coordinator, Path], zk_hosts: str, tmp_path: Path
) -> None:
    admin, _, journal_dir = cluster
    groups = ["swarm-a", "swarm-b"]
    swarm = Swarm(tmp_path, zk_hosts, ",".join(groups), per_group=10, session_timeout=30.0)
    try:
        ready = swarm.wait_ready(20)
        assert ready["sessions"] == 20
        ids = {g: set(ready["groups"][g]) for g in groups}
        for group in groups:
            assert len(ids[group]) == 10
            for cid in ids[group]:
                m = CONSUMER_ID.fullmatch(cid)
                assert m is not None and m["group"] == group, cid
            assert set(members_of(admin, group)) == ids[group]

        def converged() -> bool:
            for group in groups:
                state = state_of(admin, group)
                if state is None or state.phase is not GroupPhase.STABLE or set(state.members) != ids[group]:
                    return False
            return True

        wait_until(converged, 20, "both groups STABLE with all ten members", interval=0.1)
        final = {g: state_of(admin, g) for g in groups}

        # The coordinator saw every member acknowledge a stop and a start of the final generation.
        acked: dict[tuple[str, int], set[str]] = {}
        for e in read_journal(journal_dir):
            if e.event == "command.acked":
                acked.setdefault((e.fields["option"], e.fields["generation"]), set()).add(e.fields["consumer"])
        for group, state in final.items():
            assert state is not None
            for option in ("stop-fetcher", "start-fetcher"):
                assert ids[group] <= acked.get((option, state.generation), set()), (group, option)

        # SIGTERM: the swarm closes its sessions, so the members vanish at once (the session timeout is 30 s).
        stopped_at = time.monotonic()
        swarm.proc.send_signal(signal.SIGTERM)
        assert swarm.proc.wait(15) == 0, swarm.log()
        wait_until(lambda: not any(members_of(admin, g) for g in groups), 5, "the members to vanish", interval=0.05)
        assert time.monotonic() - stopped_at < 10, "members vanished by expiry, not because sessions were closed"
    finally:
        swarm.stop()

    stats = json.loads(swarm.stats_file.read_text())
    assert stats["registered"] == 20
    counters = stats["counters"]
    assert counters["registrations"] == 20
    assert counters.get("malformed", 0) == 0 and counters.get("stale", 0) == 0
    assert counters.get("sessions_expired", 0) == 0 and counters.get("reconnects", 0) == 0
    for group in groups:
        state = final[group]
        assert state is not None
        owned = 0
        for cid in ids[group]:
            member = stats["members"][cid]
            seen = [(s[1], s[2], s[3]) for s in member["seen"]]
            assert all(s[4] == "" for s in member["seen"]), member["seen"]
            # Every start follows a stop of its generation; the first command stops, the last one starts the final
            # generation (more rounds may come before it when members joined over several rebalances).
            assert seen[0][0] == "stop-fetcher" and seen[-1] == ("start-fetcher", state.epoch, state.generation)
            stops = {(epoch, gen) for option, epoch, gen in seen if option == "stop-fetcher"}
            assert all((epoch, gen) in stops for option, epoch, gen in seen if option == "start-fetcher"), seen
            owned += member["partitions"]
        assert owned == PARTITIONS == sum(len(p) for p in state.target.values())


def test_a_killed_swarm_kept_its_sessions_alive_and_they_expire(zk_hosts: str, tmp_path: Path) -> None:
    timeout = 1.5
    with ZkClient(ZkConfig.from_string(zk_hosts)) as admin:
        swarm = Swarm(tmp_path, zk_hosts, "swarm-k", per_group=3, session_timeout=timeout)
        try:
            swarm.wait_ready(20)
            time.sleep(3 * timeout)  # several session timeouts: only pings keep the sessions alive
            assert len(members_of(admin, "swarm-k")) == 3, swarm.log()
            swarm.proc.kill()
            swarm.proc.wait(10)
            killed_at = time.monotonic()
            wait_until(lambda: not members_of(admin, "swarm-k"), 3 * timeout + 5, "the sessions to expire")
            assert time.monotonic() - killed_at >= timeout / 3  # expired by the server, not closed
        finally:
            swarm.stop()
