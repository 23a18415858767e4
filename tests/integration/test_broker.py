"""Broker registration against a real ZooKeeper: format, duplicates, re-registration, real processes and signals."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.zkutil import expire_session
from zkcoord import errors
from zkcoord.broker import Broker, BrokerConfig, BrokerState
from zkcoord.layout import paths
from zkcoord.runtime.journal import Journal, read_journal
from zkcoord.testbed.procs import ChildProcess, wait_until
from zkcoord.zk import ZkClient, ZkConfig

pytestmark = pytest.mark.integration

SESSION = 2.0


@pytest.fixture
def zk(zk_hosts: str) -> Iterator[ZkClient]:
    with ZkClient(ZkConfig.from_string(zk_hosts)) as client:
        yield client


def make_broker(zk_hosts: str, broker_id: int, journal: Journal | None = None, **kw: Any) -> Broker:
    config = BrokerConfig(
        broker_id=broker_id, zk=ZkConfig.from_string(zk_hosts, session_timeout_s=SESSION), host="h1", port=9100, **kw
    )
    return Broker(config, journal)


def test_registration_is_an_ephemeral_in_kafkas_format(zk: ZkClient, zk_hosts: str, tmp_path: Path) -> None:
    with make_broker(zk_hosts, 7, Journal(tmp_path, "broker-7")) as broker:
        data, stat = zk.get(paths.broker(7))
        assert stat.ephemeralOwner == broker.zk.session_id
        obj = json.loads(data)
        assert {k: obj[k] for k in ("version", "host", "port", "jmx_port")} == {
            "version": 1,
            "host": "h1",
            "port": 9100,
            "jmx_port": -1,
        }
        assert obj["timestamp"].isdigit()
    assert zk.exists(paths.broker(7)) is None  # stop() deregisters at once
    events = [e.event for e in read_journal(tmp_path)]
    assert events == ["broker.registered", "broker.deregistered"]


def test_a_live_duplicate_id_is_refused(zk_hosts: str) -> None:
    with make_broker(zk_hosts, 1):
        second = make_broker(zk_hosts, 1, takeover_wait_s=0.5)
        with pytest.raises(errors.BrokerIdInUseError, match="broker id 1 is already registered"):
            second.start()
        assert second.state is BrokerState.STOPPED


def test_reregisters_after_a_real_session_expiry(zk: ZkClient, zk_hosts: str, tmp_path: Path) -> None:
    with make_broker(zk_hosts, 2, Journal(tmp_path, "broker-2")) as broker:
        first_session = broker.zk.session_id
        expire_session(broker.zk.kazoo)
        wait_until(lambda: broker.registrations == 2, 15, "re-registration")
        stat = zk.exists(paths.broker(2))
        assert stat is not None and stat.ephemeralOwner == broker.zk.session_id != first_session
        assert broker.state is BrokerState.REGISTERED
    states = [e.fields["state"] for e in read_journal(tmp_path) if e.event == "zk.state"]
    assert "lost" in states


def test_reregisters_when_its_node_is_deleted(zk: ZkClient, zk_hosts: str) -> None:
    with make_broker(zk_hosts, 3) as broker:
        zk.delete(paths.broker(3))
        wait_until(lambda: broker.registrations == 2, 10, "re-registration after delete")
        assert zk.exists(paths.broker(3)) is not None


def test_broker_process_stops_cleanly_on_sigterm(zk: ZkClient, zk_hosts: str, tmp_path: Path) -> None:
    args = ["broker", "--id", "5", "--zk", zk_hosts, "--session-timeout", str(SESSION), "--journal", str(tmp_path)]
    with ChildProcess(args, tmp_path / "broker.log") as proc:
        wait_until(lambda: zk.exists(paths.broker(5)) is not None, 30, "broker 5 registered")
        proc.signal(signal.SIGTERM)
        assert proc.wait(15) == 0
    assert zk.exists(paths.broker(5)) is None
    assert [e.event for e in read_journal(tmp_path)][-1] == "process.stopped"


def test_cli_refuses_a_live_duplicate_and_takes_over_after_a_crash(zk: ZkClient, zk_hosts: str, tmp_path: Path) -> None:
    args = ["broker", "--id", "6", "--zk", zk_hosts, "--session-timeout", str(SESSION), "--journal", str(tmp_path)]
    with ChildProcess(args, tmp_path / "first.log") as first:
        wait_until(lambda: zk.exists(paths.broker(6)) is not None, 30, "broker 6 registered")
        dup = subprocess.run(
            [sys.executable, "-m", "zkcoord", *args], capture_output=True, text=True, timeout=60, check=False
        )
        assert dup.returncode == 1
        assert "broker id 6 is already registered" in dup.stderr and "Traceback" not in dup.stderr
        first.signal(signal.SIGKILL)  # a crash: the registration lingers until the session expires
        first.wait(10)
        stat = zk.exists(paths.broker(6))
        assert stat is not None
        old_owner = stat.ephemeralOwner
        with ChildProcess(args, tmp_path / "second.log") as second:

            def taken_over() -> bool:
                now = zk.exists(paths.broker(6))
                return now is not None and now.ephemeralOwner != old_owner

            wait_until(taken_over, 30, "the restarted broker to take over its id")
            second.signal(signal.SIGTERM)
            assert second.wait(15) == 0
