"""Producing and reading back through the real command line, against a real ZooKeeper and real logs."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli import run_cli
from zkcoord.data.partlog import PartitionReader
from zkcoord.data.topics import TopicAdmin
from zkcoord.layout import paths
from zkcoord.protocol.hashing import partition_for_key
from zkcoord.runtime.journal import read_journal
from zkcoord.testbed.procs import ChildProcess, wait_until
from zkcoord.zk import ZkClient, ZkConfig

pytestmark = pytest.mark.integration


@pytest.fixture
def zk(zk_hosts: str) -> Iterator[ZkClient]:
    with ZkClient(ZkConfig.from_string(zk_hosts)) as client:
        client.ensure_paths(paths.COMMON_PATHS)
        client.create(paths.broker(0), b"{}", ephemeral=True)
        yield client


def test_produce_then_fetch_everything_back(zk: ZkClient, zk_hosts: str, tmp_path: Path) -> None:
    TopicAdmin(zk).create("t", 3)
    data, journal = tmp_path / "data", tmp_path / "journal"
    common = ["--zk", zk_hosts, "--data-dir", str(data)]
    out = run_cli("produce", "t", "--count", "5000", "--keys", "10", "--size", "64", *common, "--journal", str(journal))
    assert out.returncode == 0, out.stderr
    assert "produced 5000 records to t (3 partitions)" in out.stdout
    summary = json.loads(run_cli("fetch", "t", "--summary", "--json", *common).stdout)
    assert summary["records"] == 5000
    # Keyed records land where Kafka 0.8's partitioner puts them.
    for p in range(3):
        with PartitionReader(data, "t", p) as reader:
            for record in reader.read(0, max_records=10_000):
                assert record.key is not None
                assert partition_for_key(record.key.decode(), 3) == p
                assert len(record.value) == 64
    # The journal's batches are exactly the offset ranges in the logs.
    ranges: dict[int, list[tuple[int, int]]] = {}
    for event in read_journal(journal):
        if event.event == "produce.batch":
            ranges.setdefault(event.fields["partition"], []).append((event.fields["first"], event.fields["last"]))
    for p, spans in ranges.items():
        offsets = [o for first, last in sorted(spans) for o in range(first, last + 1)]
        assert offsets == list(range(len(offsets))), f"partition {p} ranges have gaps or overlaps"
    assert sum(last - first + 1 for spans in ranges.values() for first, last in spans) == 5000


def test_fetch_prints_records(zk: ZkClient, zk_hosts: str, tmp_path: Path) -> None:
    TopicAdmin(zk).create("one", 1)
    common = ["--zk", zk_hosts, "--data-dir", str(tmp_path)]
    assert run_cli("produce", "one", "--count", "3", "--size", "20", *common).returncode == 0
    lines = run_cli("fetch", "one", "--offset", "1", *common).stdout.splitlines()
    assert [line.split("\t")[1] for line in lines] == ["1", "2"]
    bad = run_cli("fetch", "one", "--partition", "5", *common)
    assert bad.returncode == 1 and "partitions 0..0" in bad.stderr


def test_producer_follows_partition_growth_and_stops_on_sigterm(zk: ZkClient, zk_hosts: str, tmp_path: Path) -> None:
    admin = TopicAdmin(zk)
    admin.create("grow", 2)
    data, journal = tmp_path / "data", tmp_path / "journal"
    args = ["produce", "grow", "--forever", "--rate", "2000", "--zk", zk_hosts, "--data-dir", str(data)]
    with ChildProcess([*args, "--journal", str(journal)], tmp_path / "producer.log") as producer:

        def has_records(p: int) -> bool:
            with PartitionReader(data, "grow", p) as reader:
                return reader.end_offset() > 0

        wait_until(lambda: has_records(1), 30, "records in partition 1")
        admin.alter("grow", 4)
        wait_until(lambda: has_records(3), 30, "records in the new partition 3")
        producer.signal(signal.SIGTERM)
        assert producer.wait(15) == 0
    events = [e.event for e in read_journal(journal)]
    assert events[-2:] == ["produce.finished", "process.stopped"]


def test_produce_to_a_missing_topic_is_one_clear_line(zk: ZkClient, zk_hosts: str, tmp_path: Path) -> None:
    out = run_cli("produce", "ghost", "--zk", zk_hosts, "--data-dir", str(tmp_path))
    assert out.returncode == 1
    assert "topic 'ghost' does not exist" in out.stderr and "Traceback" not in out.stderr
