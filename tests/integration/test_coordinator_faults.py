"""Coordinator fencing and takeover under real faults: a zombie fenced by the epoch, SIGSTOP, SIGKILL."""

from __future__ import annotations

import json
import signal
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.clusters import Cluster
from tests.integration.test_coordinator import all_owned, owners_registry
from tests.scripted import ScriptedConsumer
from zkcoord.coordinator import Role
from zkcoord.data.topics import TopicAdmin
from zkcoord.layout import paths
from zkcoord.layout.commands import CommandOption
from zkcoord.layout.group_state import GroupPhase
from zkcoord.runtime.journal import read_journal
from zkcoord.testbed.procs import ChildProcess, wait_until

pytestmark = pytest.mark.integration

SESSION = "2"


def test_a_zombie_coordinators_write_fails_on_the_epoch_check(cluster: Cluster) -> None:
    cluster.broker(1)
    wait_until(lambda: cluster.acting() == [1], 10, "broker 1 coordinating")
    cluster.broker(2)
    TopicAdmin(cluster.admin_zk).create("t", 4)
    first = cluster.consumer("g", {"t": 1})
    cluster.wait_stable("g", 1)
    old_epoch = cluster.state("g").epoch
    # Take the coordinator znode away while broker 1's session lives on: broker 2 wins a new epoch, and broker 1
    # still believes it coordinates (a zombie, as after a long pause).  Nothing tells it but the fence.
    cluster.admin_zk.delete(paths.COORDINATOR)
    wait_until(lambda: cluster.coordinator(2).role is Role.COORDINATOR, 10, "broker 2 elected")
    assert cluster.coordinator(1).role is Role.COORDINATOR  # the zombie
    second = cluster.consumer("g", {"t": 1})  # a change both coordinators react to
    wait_until(lambda: bool(cluster.events("coordinator.resigned", broker=1)), 10, "broker 1 to resign")
    resigned = cluster.events("coordinator.resigned", broker=1)[0].fields["reason"]
    assert resigned.startswith("fenced") and paths.COORDINATOR_EPOCH in resigned
    state = cluster.wait_stable("g", 2)
    assert state.epoch == old_epoch + 1
    # The zombie's failed write committed nothing: every command after the new election carries the new epoch.
    for consumer in (first, second):
        epochs = [c.epoch for c in consumer.commands()]
        assert epochs == sorted(epochs)
        assert consumer.commands()[-1].epoch == old_epoch + 1
    wait_until(lambda: all_owned({"t": 4})([first, second]), 10, "all partitions owned")


def _broker(hosts: str, broker_id: int, journal: Path, faults: str = "") -> ChildProcess:
    args = ["broker", "--id", str(broker_id), "--zk", hosts, "--session-timeout", SESSION, "--journal", str(journal)]
    env = {"ZKCOORD_FAULTS": faults} if faults else {}
    return ChildProcess([*args, "--rebalance-timeout", "5"], journal.parent / f"broker-{broker_id}.log", env=env)


def _coordinator_id(cluster: Cluster) -> int | None:
    try:
        return int(json.loads(cluster.admin_zk.get(paths.COORDINATOR)[0])["brokerid"])
    except Exception:  # noqa: BLE001 (absent between terms)
        return None


def test_a_coordinator_paused_past_its_session_wakes_up_fenced(cluster: Cluster, tmp_path: Path) -> None:
    journal = tmp_path / "journal"
    with ExitStack() as procs:
        zombie = procs.enter_context(_broker(cluster.hosts, 1, journal, "coordinator.before_start=pause"))
        wait_until(lambda: _coordinator_id(cluster) == 1, 30, "broker 1 coordinating")
        TopicAdmin(cluster.admin_zk).create("t", 4)
        consumers = [cluster.consumer("g", {"t": 1}) for _ in range(2)]
        # Broker 1 stops itself right after every stop-fetcher is acknowledged, before any start-fetcher.
        wait_until(lambda: any(e.event == "fault.injected" for e in read_journal(journal)), 30, "the pause")
        procs.enter_context(_broker(cluster.hosts, 2, journal))
        wait_until(lambda: _coordinator_id(cluster) == 2, 30, "broker 2 elected after broker 1's session expired")
        state = cluster.wait_stable("g", 2, timeout=30)
        zombie.signal(signal.SIGCONT)
        wait_until(
            lambda: any(e.event == "coordinator.resigned" and e.role == "broker-1" for e in read_journal(journal)),
            30,
            "the resumed broker 1 to resign",
        )
        assert zombie.alive(), "the zombie must carry on as a follower, not crash"
        assert state.epoch == 2
        for consumer in consumers:
            starts = consumer.commands(CommandOption.START_FETCHER)
            assert starts and {c.epoch for c in starts} == {2}, "a start-fetcher of the paused coordinator got out"
        wait_until(lambda: all_owned({"t": 4})(consumers), 10, "all partitions owned")
        assert owners_registry(cluster.admin_zk, "g") == cluster.state("g").target
        sent_by_zombie = [
            e
            for e in read_journal(journal)
            if e.role == "broker-1" and e.event == "command.sent" and e.fields["option"] == "start-fetcher"
        ]
        assert not sent_by_zombie


def test_a_takeover_in_the_middle_of_a_rebalance_finishes_it(cluster: Cluster, tmp_path: Path) -> None:
    journal = tmp_path / "journal"
    with ExitStack() as procs:
        doomed = procs.enter_context(_broker(cluster.hosts, 1, journal, "coordinator.before_start=kill"))
        wait_until(lambda: _coordinator_id(cluster) == 1, 30, "broker 1 coordinating")
        procs.enter_context(_broker(cluster.hosts, 2, journal))
        TopicAdmin(cluster.admin_zk).create("t", 6)
        consumers: list[ScriptedConsumer] = [cluster.consumer("g", {"t": 1}) for _ in range(3)]
        doomed.proc.wait(timeout=30)  # SIGKILLed itself between the stop and the start phase
        interrupted = cluster.state("g")
        assert interrupted.phase is GroupPhase.STOPPING and interrupted.epoch == 1
        state = cluster.wait_stable("g", 3, timeout=30)
        assert state.epoch == 2 and state.generation > interrupted.generation
        wait_until(lambda: all_owned({"t": 6})(consumers), 10, "all partitions owned")
        reasons = [
            e.fields["reason"] for e in read_journal(journal) if e.role == "broker-2" and e.event == "rebalance.started"
        ]
        assert "previous rebalance left the group stopping" in reasons
