"""Hostile input to the metrics endpoint's options (issue 18, item 1): a port in use, out of range, an address that is
not this host's.  Each is one clear line and a non-zero exit, refused before the process registers anything in
ZooKeeper (the tree under the test's chroot is the same before and after); a bound port is refused, never shared.

Real ZooKeeper (the suite's server), real ``python -m zkcoord`` processes (tests/cli.py), a real listening socket.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli import run_cli
from tests.hostile.test_cli_input import Cluster, _one_clear_line
from zkcoord.layout import paths
from zkcoord.zk import ZkClient, ZkConfig

pytestmark = pytest.mark.integration


@pytest.fixture
def cluster(zk_hosts: str, tmp_path: Path) -> Iterator[Cluster]:
    with ZkClient(ZkConfig.from_string(zk_hosts)) as client:
        client.ensure_paths(paths.COMMON_PATHS)
        (tmp_path / "data").mkdir()
        yield Cluster(zk_hosts, client, tmp_path)


@pytest.fixture
def taken() -> Iterator[int]:
    """A port another program listens on (this test)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


COMMANDS = {
    "broker": ["broker", "--id", "7"],
    "consume": ["consume", "--group", "g", "-t", "t"],
}


def _run(cluster: Cluster, command: str, *metrics: str) -> str:
    """Run ``command`` with ``metrics`` options; return its one error line, after checking nothing was stored."""
    before = cluster.snapshot()
    args = [*COMMANDS[command], *metrics, "--zk", cluster.hosts, "--journal", str(cluster.root / "journal")]
    if command == "consume":
        args += ["--data-dir", str(cluster.data)]
    result = run_cli(*args, timeout=60)
    line = _one_clear_line(result.stderr, result.stdout, result.returncode)
    assert cluster.snapshot() == before, "a refused start must register nothing"
    return line


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_port_in_use_is_one_clear_line(cluster: Cluster, taken: int, command: str) -> None:
    line = _run(cluster, command, "--metrics-port", str(taken))
    assert line == f"Error: cannot serve metrics on 127.0.0.1:{taken}: Address already in use"


@pytest.mark.parametrize(
    ("command", "port"), [("broker", "-1"), ("consume", "-1"), ("broker", "65536"), ("consume", "x")]
)
def test_a_port_out_of_range_is_a_usage_error(cluster: Cluster, command: str, port: str) -> None:
    assert "--metrics-port" in _run(cluster, command, "--metrics-port", port)


@pytest.mark.parametrize("address", ["192.0.2.1", "256.1.1.1"])  # not one of ours (TEST-NET-1); no address at all
def test_an_address_not_of_this_host_is_one_clear_line(cluster: Cluster, address: str) -> None:
    line = _run(cluster, "broker", "--metrics-port", "1", "--metrics-addr", address)
    assert line.startswith(f"Error: cannot serve metrics on {address}:1: ")
