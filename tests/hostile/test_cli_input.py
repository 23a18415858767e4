"""Hostile command-line input, as a new user types it: every case ends in one clear line (``Error: ...``, or
click's usage error with exit 2), a non-zero exit, no traceback, and nothing stored changed (the ZooKeeper tree under
the test's chroot and the partition logs are the same before and after).

Real ZooKeeper (the suite's server, a chroot per test), real ``python -m zkcoord`` processes (tests/cli.py).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.cli import run_cli
from zkcoord.data.partlog.writer import PartitionWriter
from zkcoord.data.topics import TopicAdmin
from zkcoord.layout import paths
from zkcoord.testbed.procs import ChildProcess, wait_until
from zkcoord.zk import ZkClient, ZkConfig

pytestmark = pytest.mark.integration


@dataclass
class Cluster:
    """A chroot with a registered broker, topic ``t`` (2 partitions, 10 records each) and the test's own dirs."""

    hosts: str
    zk: ZkClient
    root: Path

    @property
    def data(self) -> Path:
        return self.root / "data"

    def snapshot(self) -> dict[str, str]:
        """Every znode under the chroot (path -> data digest) and every file of the data dir (path -> digest)."""
        out: dict[str, str] = {}

        def walk(path: str) -> None:
            data, _ = self.zk.get(path)
            out[f"zk:{path}"] = hashlib.sha256(data).hexdigest()
            for child in sorted(self.zk.get_children(path)):
                walk(f"{path.rstrip('/')}/{child}")

        walk("/")
        for f in sorted(self.data.rglob("*")):
            if f.is_file():
                out[f"file:{f.relative_to(self.data)}"] = hashlib.sha256(f.read_bytes()).hexdigest()
        return out


@pytest.fixture
def cluster(zk_hosts: str, tmp_path: Path) -> Iterator[Cluster]:
    with ZkClient(ZkConfig.from_string(zk_hosts)) as client:
        client.ensure_paths(paths.COMMON_PATHS)
        client.create(paths.broker(0), b"{}", ephemeral=True)
        TopicAdmin(client).create("t", 2)
        for partition in (0, 1):
            writer = PartitionWriter(tmp_path / "data", "t", partition).open()
            for i in range(10):
                writer.append(f"v{i}".encode())
            writer.close()
        yield Cluster(zk_hosts, client, tmp_path)


def _one_clear_line(out_stderr: str, stdout: str, returncode: int) -> str:
    """The user-facing error of a refused command; fails the test unless it is one line (or click's usage block)."""
    assert returncode != 0, stdout + out_stderr
    assert "Traceback" not in out_stderr, out_stderr
    lines = [line for line in out_stderr.splitlines() if line.strip()]
    if returncode == 2 and lines and lines[0].startswith("Usage:"):  # click: Usage, Try ... --help, Error
        assert len(lines) == 3 and lines[-1].startswith("Error: "), out_stderr
        return lines[-1]
    assert len(lines) == 1 and lines[0].startswith("Error: "), out_stderr
    return lines[0]


#: (case id, arguments with {zk} {data} {file} {root} placeholders, text the error line must contain)
CASES: list[tuple[str, list[str], str]] = [
    # --zk: ZooKeeper's own path rules for the chroot (was a ValueError traceback from kazoo)
    ("chroot-dotdot", ["topic", "list", "--zk", "{server}/a/../b"], "relative segment '..'"),
    ("chroot-dot", ["topic", "list", "--zk", "{server}/a/./b"], "relative segment '.'"),
    ("chroot-empty-segment", ["group", "list", "--zk", "{server}/a//b"], "empty segment"),
    ("chroot-trailing-slash", ["topic", "list", "--zk", "{server}/a/"], "must not end with '/'"),
    ("chroot-reserved", ["topic", "list", "--zk", "{server}/zookeeper/x"], "reserved"),
    ("chroot-consume", ["consume", "--group", "g", "-t", "t", "--zk", "{server}/a/.."], "relative segment"),
    ("zk-empty-host", ["topic", "list", "--zk", "{server},"], "expected HOST:PORT"),
    # names
    ("topic-slash", ["topic", "create", "a/b", "-p", "1", "--zk", "{zk}"], "invalid topic name"),
    ("topic-empty", ["topic", "describe", "", "--zk", "{zk}"], "must not be empty"),
    ("group-empty", ["group", "describe", "", "--zk", "{zk}"], "must not be empty"),
    ("group-slash", ["group", "describe", "a/b", "--zk", "{zk}"], "invalid group name"),
    ("group-dotdot", ["group", "describe", "..", "--zk", "{zk}"], "not allowed"),
    ("group-missing", ["group", "describe", "nosuch", "--zk", "{zk}"], "does not exist"),
    ("consume-group-slash", ["consume", "--group", "a/b", "-t", "t", "--zk", "{zk}"], "invalid group name"),
    ("consume-topic-threads", ["consume", "--group", "g", "-t", "t:abc", "--zk", "{zk}"], "TOPIC:THREADS"),
    ("consume-bad-regex", ["consume", "--group", "g", "--whitelist", "(", "--zk", "{zk}"], "invalid regex"),
    ("consume-consumer-id", ["consume", "--group", "g", "-t", "t", "--consumer-id", "a/b", "--zk", "{zk}"], "g_"),
    (
        "consume-max-poll-interval",
        ["consume", "--group", "g", "-t", "t", "--max-poll-interval", "0", "--zk", "{zk}"],
        "max poll interval must be within 1..86400 s",
    ),
    # group configs: refused before anything is written
    ("config-unknown-key", ["group", "config", "set", "g", "colour=red", "--zk", "{zk}"], "unknown group config key"),
    ("config-bad-value", ["group", "config", "set", "g", "max.size=-1", "--zk", "{zk}"], "max.size must be an integer"),
    ("config-huge-value", ["group", "config", "set", "g", "max.size=99999999999999999999", "--zk", "{zk}"], "1..2147"),
    ("config-not-a-pair", ["group", "config", "set", "g", "max.size", "--zk", "{zk}"], "expected KEY=VALUE"),
    ("config-no-pair", ["group", "config", "set", "g", "--zk", "{zk}"], "Missing argument"),
    ("config-delete-unknown", ["group", "config", "delete", "g", "colour", "--zk", "{zk}"], "unknown group config"),
    ("produce-missing-topic", ["produce", "nosuch", "--zk", "{zk}", "--data-dir", "{data}"], "does not exist"),
    # huge and negative numbers
    ("partitions-huge", ["topic", "create", "big", "-p", "99999999999999999999", "--zk", "{zk}"], "between 1"),
    ("partitions-negative", ["topic", "create", "neg", "-p", "-1", "--zk", "{zk}"], "between 1"),
    ("alter-shrink", ["topic", "alter", "t", "-p", "1", "--zk", "{zk}"], "not removed"),
    ("alter-huge", ["topic", "alter", "t", "-p", "99999999999999999999", "--zk", "{zk}"], "between 1"),
    ("replicas-negative", ["topic", "create", "r", "-p", "1", "--replication-factor", "-5", "--zk", "{zk}"], "1"),
    ("fetch-partition-huge", ["fetch", "t", "-p", "99999", "--zk", "{zk}", "--data-dir", "{data}"], "not 99999"),
    ("fetch-partition-negative", ["fetch", "t", "-p", "-1", "--zk", "{zk}"], "--partition"),
    ("produce-count-negative", ["produce", "t", "--count", "-5", "--zk", "{zk}"], "--count"),
    (
        "produce-keys-huge",
        ["produce", "t", "-n", "1", "--keys", "99999999999999999999", "--zk", "{zk}", "--data-dir", "{data}"],
        "keys",
    ),
    ("broker-id-negative", ["broker", "--id", "-1", "--zk", "{zk}"], "--id"),
    ("session-timeout-huge", ["topic", "list", "--session-timeout", "99999", "--zk", "{zk}"], "--session-timeout"),
    # hostile local files
    ("data-dir-is-file", ["fetch", "t", "--zk", "{zk}", "--data-dir", "{file}"], "is a file"),
    ("journal-is-file", ["produce", "t", "--zk", "{zk}", "--data-dir", "{data}", "--journal", "{file}"], "is a file"),
    ("analyze-missing", ["analyze", "{root}/nonexistent"], "does not exist"),
    ("analyze-empty-dir", ["analyze", "-q", "{root}/empty"], "no journal"),
    ("analyze-bench-not-json", ["analyze", "--bench", "{file}"], "not JSON"),
]


@pytest.mark.parametrize(("args", "expect"), [pytest.param(a, e, id=i) for i, a, e in CASES])
def test_hostile_input_is_one_clear_line_and_changes_nothing(cluster: Cluster, args: list[str], expect: str) -> None:
    (cluster.root / "a-file").write_text("not a directory\n")
    (cluster.root / "empty").mkdir()
    server = cluster.hosts.split("/", 1)[0]
    values = {"zk": cluster.hosts, "server": server, "data": str(cluster.data),
              "file": str(cluster.root / "a-file"), "root": str(cluster.root)}  # fmt: skip
    before = cluster.snapshot()
    out = run_cli(*[a.format(**values) for a in args], timeout=60)
    line = _one_clear_line(out.stderr, out.stdout, out.returncode)
    assert expect in line, line
    assert cluster.snapshot() == before


def test_an_unreachable_zookeeper_is_one_line_after_the_connect_timeout(tmp_path: Path) -> None:
    started = time.monotonic()
    out = run_cli("topic", "list", "--zk", "127.0.0.1:1", timeout=60)
    elapsed = time.monotonic() - started
    line = _one_clear_line(out.stderr, out.stdout, out.returncode)
    assert line == "Error: cannot reach ZooKeeper at 127.0.0.1:1 within 10 s (start one with: zkcoord zk start)"
    assert 10 <= elapsed < 20, elapsed
    # with -v the connection attempts are shown, for whoever wants to see them (no need to wait for the end)
    log = tmp_path / "verbose.log"
    with ChildProcess(["-v", "topic", "list", "--zk", "127.0.0.1:1"], log):
        wait_until(lambda: "Connection refused" in log.read_text(errors="replace"), 10, "kazoo's warning with -v")


def test_a_second_broker_with_a_live_brokers_id_is_one_line(cluster: Cluster) -> None:
    common = ["--zk", cluster.hosts, "--session-timeout", "1", "--journal", str(cluster.root / "journal")]
    with ChildProcess(["broker", "--id", "7", *common], cluster.root / "broker-7.log"):
        wait_until(lambda: cluster.zk.exists(paths.broker(7)) is not None, 30, "broker 7 registered")
        registration = cluster.zk.get(paths.broker(7))
        out = run_cli("broker", "--id", "7", *common, timeout=60)
        line = _one_clear_line(out.stderr, out.stdout, out.returncode)
        assert "broker id 7 is already registered by a live broker" in line
        assert cluster.zk.get(paths.broker(7))[1].czxid == registration[1].czxid  # the live one's, untouched
