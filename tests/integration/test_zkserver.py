"""The embedded ZooKeeper: real servers and a real quorum, one-line errors, and the ``zkcoord zk`` commands."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from kazoo.client import KazooClient, KazooState

from tests.zkutil import TEST_CONFIG, ZkFactory, expire_session
from zkcoord.cli.zk_cmd import EXIT_NOT_RUNNING, STATE_FILE, ServerRecord, read_record, zk
from zkcoord.errors import ConfigurationError, ZkServerError
from zkcoord.zkserver import (
    ZkServer,
    ZkServerConfig,
    four_letter_word,
    free_port,
    is_zookeeper_process,
    mntr,
    terminate_process,
    wait_for_exit,
)
from zkcoord.zkserver.util import failure_reason

pytestmark = pytest.mark.integration


@contextlib.contextmanager
def connected(hosts: str) -> Iterator[KazooClient]:
    """A started kazoo client on ``hosts``, stopped and closed on exit."""
    client = KazooClient(hosts=hosts, timeout=10.0)
    client.start(timeout=15.0)
    try:
        yield client
    finally:
        client.stop()
        client.close()


def one_line(message: str) -> str:
    assert message.strip(), "empty message"
    assert "\n" not in message.strip(), f"not one line: {message!r}"
    return message


# --- one server -----------------------------------------------------------------------------------------------


def test_a_relative_data_dir_works(zk_factory: ZkFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``zkcoord demo`` puts its runs under ``runs/<timestamp>``: relative to the caller, not to the JVM (which runs
    in the data dir)."""
    monkeypatch.chdir(tmp_path)
    server = zk_factory.server(dataclasses.replace(TEST_CONFIG, data_dir=Path("runs/x/zk")))
    assert server.is_running()
    assert server.config_path == tmp_path / "runs" / "x" / "zk" / "zoo.cfg"
    assert four_letter_word("127.0.0.1", server.port, "ruok") == "imok"


def test_a_server_serves_until_stopped(zk_factory: ZkFactory) -> None:
    server = zk_factory.server()
    assert server.is_running()
    pid = server.pid
    assert pid is not None
    assert is_zookeeper_process(pid, server.config_path)
    assert server.connect_string == f"127.0.0.1:{server.port}"
    assert server.mode() == "standalone"
    assert server.log_path.is_file()
    assert four_letter_word("127.0.0.1", server.port, "ruok") == "imok"

    with connected(server.connect_string) as client:
        client.create("/hello", b"world")
        assert client.get("/hello")[0] == b"world"

    server.stop()
    assert not server.is_running()
    assert server.pid is None
    assert wait_for_exit(pid, 0)
    with pytest.raises(ZkServerError, match="did not answer"):
        four_letter_word("127.0.0.1", server.port, "ruok", timeout=1.0)


def test_restart_keeps_the_port_and_the_data(zk_factory: ZkFactory) -> None:
    server = zk_factory.server()
    port, data_dir = server.port, server.data_dir
    with connected(server.connect_string) as client:
        client.create("/kept", b"1")

    server.restart()

    assert (server.port, server.data_dir) == (port, data_dir)
    with connected(server.connect_string) as client:
        assert client.get("/kept")[0] == b"1"


def test_a_killed_server_restarts_with_its_data(zk_factory: ZkFactory) -> None:
    server = zk_factory.server()
    with connected(server.connect_string) as client:
        client.create("/survives", b"crash")

    server.kill()
    assert not server.is_running()
    server.start()

    with connected(server.connect_string) as client:
        assert client.get("/survives")[0] == b"crash"


def test_a_paused_server_answers_nothing_until_resumed(zk_factory: ZkFactory) -> None:
    server = zk_factory.server()
    server.pause()
    assert server.is_paused and server.is_running()
    with pytest.raises(ZkServerError, match="no answer in time"):
        four_letter_word("127.0.0.1", server.port, "srvr", timeout=0.5)
    server.resume()
    assert server.mode() == "standalone"
    server.pause()
    server.stop()  # stop must not hang on a paused JVM
    assert not server.is_running()


def test_mntr_reads_the_servers_counters(zk_server: ZkServer, zk_client: KazooClient) -> None:
    before = mntr("127.0.0.1", zk_server.port)
    zk_client.create("/counted", b"")
    after = mntr("127.0.0.1", zk_server.port)
    assert after["zk_server_state"] == "standalone"
    assert int(after["zk_znode_count"]) >= 1
    assert int(after["zk_packets_received"]) > int(before["zk_packets_received"])


def test_expire_session_is_a_real_server_side_expiry(zk_client: KazooClient) -> None:
    zk_client.create("/mine", b"", ephemeral=True)
    old_session = zk_client.client_id[0]

    expire_session(zk_client)

    # It returns once kazoo has opened a new session by itself: the client is usable, the old ephemeral is gone.
    assert zk_client.state == KazooState.CONNECTED
    assert zk_client.client_id[0] != old_session
    assert zk_client.exists("/mine") is None, "the ephemeral node outlived its session"


# --- a quorum -------------------------------------------------------------------------------------------------


def test_an_ensemble_survives_losing_its_leader_and_takes_it_back(zk_factory: ZkFactory) -> None:
    ensemble = zk_factory.ensemble(3)
    assert ensemble.connect_string.count(",") == 2
    leader = ensemble.leader_index()
    assert leader is not None
    assert sorted(mode or "" for mode in ensemble.modes()) == ["follower", "follower", "leader"]
    with connected(ensemble.connect_string) as client:
        client.create("/before", b"1")

    ensemble.kill(leader)
    new_leader = ensemble.wait_for_quorum(timeout=30.0)
    assert new_leader != leader

    survivors = ",".join(s.connect_string for i, s in enumerate(ensemble.servers) if i != leader)
    with connected(survivors) as client:
        client.create("/after", b"2")  # a write needs a quorum: two of three serve one
        assert client.get("/before")[0] == b"1"

    ensemble.start(leader)
    assert ensemble.wait_for_quorum(timeout=30.0) != leader
    assert ensemble.modes()[leader] == "follower"
    with connected(ensemble.server(leader).connect_string) as client:
        client.sync("/after")
        assert client.get("/after")[0] == b"2", "the rejoined server did not catch up"


def test_an_ensemble_without_a_majority_says_so(zk_factory: ZkFactory) -> None:
    ensemble = zk_factory.ensemble(3)
    ensemble.stop(0)
    ensemble.kill(1)
    with pytest.raises(ZkServerError, match="only 1 of 3 servers run, 2 are needed") as info:
        ensemble.wait_for_quorum(timeout=5.0)
    one_line(str(info.value))


# --- clear errors ---------------------------------------------------------------------------------------------


def test_a_taken_port_is_one_clear_line() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        port = blocker.getsockname()[1]
        server = ZkServer(dataclasses.replace(TEST_CONFIG, port=port))
        try:
            with pytest.raises(ZkServerError) as info:
                server.start()
        finally:
            server.close()
    message = one_line(str(info.value))
    assert f"client port {port} on 127.0.0.1 is already in use" in message
    assert not server.is_running()


def test_a_server_dying_on_a_taken_port_is_reported_from_its_log(tmp_path: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        taken = blocker.getsockname()[1]
        # A later clientPort line wins in zoo.cfg: the pre-start check passes on the configured port, then Java fails
        # to bind the taken one, which is how a race with another process looks.
        config = dataclasses.replace(TEST_CONFIG, data_dir=tmp_path / "zk", extra_config=(("clientPort", str(taken)),))
        server = ZkServer(config)
        try:
            with pytest.raises(ZkServerError) as info:
                server.start()
        finally:
            server.close()
    assert "already in use" in one_line(str(info.value))


def test_a_data_dir_that_cannot_be_created_is_one_clear_line(tmp_path: Path) -> None:
    regular_file = tmp_path / "not-a-dir"
    regular_file.write_text("")
    server = ZkServer(dataclasses.replace(TEST_CONFIG, data_dir=regular_file / "zk"))
    with pytest.raises(ZkServerError) as info:
        server.start()
    server.close()
    assert "cannot create ZooKeeper data dir" in one_line(str(info.value))
    assert str(regular_file / "zk") in str(info.value)


@pytest.mark.parametrize("java_home", [True, False], ids=["bad-JAVA_HOME", "no-JAVA_HOME"])
def test_missing_java_names_the_fix(java_home: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if java_home:
        monkeypatch.setenv("JAVA_HOME", str(tmp_path / "nowhere"))
    else:
        monkeypatch.delenv("JAVA_HOME", raising=False)
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    server = ZkServer(TEST_CONFIG)
    with pytest.raises(ZkServerError) as info:
        server.start()
    server.close()
    message = one_line(str(info.value))
    assert message.startswith("Java not found")
    assert "install a JDK (apt-get install default-jdk-headless) or set JAVA_HOME" in message


def test_missing_zookeeper_names_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ZOOKEEPER_HOME", str(tmp_path))
    server = ZkServer(TEST_CONFIG)
    with pytest.raises(ZkServerError) as info:
        server.start()
    server.close()
    message = one_line(str(info.value))
    assert message.startswith("Apache ZooKeeper not found")
    assert "apt-get install zookeeper" in message


def test_java_dying_at_start_quotes_its_log(tmp_path: Path) -> None:
    server = ZkServer(TEST_CONFIG, classpath=[tmp_path / "no-such.jar"])
    with pytest.raises(ZkServerError) as info:
        server.start()
    server.close()
    message = one_line(str(info.value))
    assert message.startswith("ZooKeeper exited with code 1: ")
    assert "ClassNotFoundException: org.apache.zookeeper.server.quorum.QuorumPeerMain" in message


def test_the_failure_reason_is_the_root_cause_not_the_last_words() -> None:
    log = (
        "[main] INFO org.apache.zookeeper.server.NIOServerCnxnFactory - binding to port /127.0.0.1:2181\n"
        "[main] ERROR org.apache.zookeeper.server.ZooKeeperServerMain - Unexpected exception, exiting abnormally\n"
        "java.net.BindException: Address already in use\n"
        "\tat java.base/sun.nio.ch.Net.bind0(Native Method)\n"
        "[main] ERROR org.apache.zookeeper.util.ServiceUtils - Exiting JVM with code 1\n"
    )
    assert failure_reason(log) == "java.net.BindException: Address already in use"
    assert failure_reason("") == "(its log is empty)"


@pytest.mark.parametrize(
    "bad",
    [
        {"port": 70000},
        {"tick_time_ms": 0},
        {"min_session_timeout_ms": 5000, "max_session_timeout_ms": 4000},
        {"start_timeout_s": 0},
        {"extra_config": (("bad key", "x"),)},
    ],
)
def test_a_config_validates_itself(bad: dict[str, object]) -> None:
    with pytest.raises(ConfigurationError):
        ZkServerConfig(**bad)  # type: ignore[arg-type]


def test_a_config_defaults_its_session_bounds_to_zookeepers() -> None:
    config = ZkServerConfig(tick_time_ms=300)
    assert config.min_timeout_ms == 600
    assert config.max_session_timeout_ms == 60_000


# --- the command line -----------------------------------------------------------------------------------------


@pytest.fixture
def zk_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """``$ZKCOORD_HOME`` in a temporary dir; any server recorded there is stopped at teardown."""
    home = tmp_path / "home"
    monkeypatch.setenv("ZKCOORD_HOME", str(home))
    yield home
    record = read_record(home / "zk")
    if record is not None and record.is_alive():
        terminate_process(record.pid, 10.0)


def zk_command(*args: str) -> list[str]:
    """The ``zkcoord zk`` command line in a child process (as ``zkcoord zk ...`` will be)."""
    return [sys.executable, "-c", "from zkcoord.cli.zk_cmd import zk; zk()", *args]


def test_cli_start_status_refuse_stop(zk_home: Path) -> None:
    runner = CliRunner()
    port = free_port()
    # A child process, because start detaches the server and returns: the server must outlive it.
    started = subprocess.run(
        zk_command("start", "--port", str(port)), capture_output=True, text=True, timeout=60, check=False
    )
    assert started.returncode == 0, started.stderr
    assert f"127.0.0.1:{port}" in started.stdout
    record = read_record(zk_home / "zk")
    assert record is not None and record.is_alive()
    assert record.data_dir == zk_home / "zk" / "data"
    assert record.log_path.is_file()

    status = runner.invoke(zk, ["status"])
    assert status.exit_code == 0, status.output
    assert "running" in status.output and f"{port}" in status.output and "standalone" in status.output
    as_json = json.loads(runner.invoke(zk, ["status", "--json"]).output)
    assert as_json["running"] is True and as_json["port"] == port and as_json["pid"] == record.pid
    assert isinstance(as_json["znode_count"], int)

    again = runner.invoke(zk, ["start", "--port", str(free_port())])
    assert again.exit_code == 1
    assert one_line(again.output).startswith("Error: ZooKeeper is already running on")

    stopped = runner.invoke(zk, ["stop"])
    assert stopped.exit_code == 0, stopped.output
    assert wait_for_exit(record.pid, 0) or not is_zookeeper_process(record.pid)
    assert not (zk_home / "zk" / STATE_FILE).exists()

    after = runner.invoke(zk, ["status"])
    assert after.exit_code == EXIT_NOT_RUNNING
    assert "not running" in after.output
    assert runner.invoke(zk, ["stop"]).output.strip() == "ZooKeeper is not running."


def test_cli_foreground_server_stops_with_the_command(zk_home: Path) -> None:
    port = free_port()
    with subprocess.Popen(
        zk_command("start", "--foreground", "--port", str(port)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        try:
            assert proc.stdout is not None
            # Block on the child's output until it says it serves; it ends (EOF) if the child fails: no hang.
            for line in proc.stdout:
                if "Ctrl-C" in line:
                    break
            record = read_record(zk_home / "zk")
            assert record is not None and record.is_alive() and record.foreground
            proc.send_signal(signal.SIGTERM)
            out, err = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 0, err
    assert "ZooKeeper stopped." in out
    assert not is_zookeeper_process(record.pid)
    assert read_record(zk_home / "zk") is None


def test_cli_errors_are_one_line(zk_home: Path) -> None:
    runner = CliRunner()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        port = blocker.getsockname()[1]
        result = runner.invoke(zk, ["start", "--port", str(port)])
    assert result.exit_code == 1
    assert one_line(result.output).startswith(f"Error: cannot start ZooKeeper: client port {port}")
    assert read_record(zk_home / "zk") is None


def test_cli_cleans_a_stale_record(zk_home: Path) -> None:
    runner = CliRunner()
    state_dir = zk_home / "zk"
    state_dir.mkdir(parents=True)
    stale = ServerRecord(
        pid=os.getpid(),  # alive, but not a ZooKeeper: must be neither trusted nor signalled
        port=free_port(),
        data_dir=state_dir / "data",
        log_path=state_dir / "data" / "zookeeper.log",
        config_path=state_dir / "data" / "zoo.cfg",
        started_at="2020-01-01T00:00:00+00:00",
    )
    (state_dir / STATE_FILE).write_text(json.dumps(stale.to_json()))
    assert runner.invoke(zk, ["status"]).exit_code == EXIT_NOT_RUNNING
    stopped = runner.invoke(zk, ["stop"])
    assert stopped.exit_code == 0 and "not running" in stopped.output
    assert read_record(state_dir) is None
