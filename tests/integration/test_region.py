"""Consistent regions (issue 24) in-process against a real ZooKeeper and a real coordinator: members, driver,
merges, resets, revocations, partitions added at runtime."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.integration.test_coordinator import Cluster
from zkcoord.consumer import ConsumerConfig, Subscription, TopicPartition
from zkcoord.data.partlog import PartitionWriter
from zkcoord.data.topics import TopicAdmin
from zkcoord.layout.region import Contribution
from zkcoord.region.app import AggregateApp, key_of, value_of
from zkcoord.region.config import RegionConfig
from zkcoord.region.driver import RegionDriver
from zkcoord.region.member import ConsistentRegion
from zkcoord.region.orders import OrderFollower
from zkcoord.region.shared import MergeTimeoutError, RegionMismatchError, SharedData
from zkcoord.region.states import ClientState
from zkcoord.runtime.journal import Journal
from zkcoord.testbed.procs import wait_until

pytestmark = pytest.mark.integration


@pytest.fixture
def cluster(zk_hosts: str, tmp_path: Path) -> Iterator[Cluster]:
    with ExitStack() as stack:
        yield Cluster(zk_hosts, tmp_path / "journal", stack)


def produce(data: Path, topic: str, partition: int, first: int, count: int) -> None:
    with PartitionWriter(data, topic, partition) as writer:
        writer.append_batch([(f"k{i % 5}".encode(), f"p:{i}:".encode()) for i in range(first, first + count)])


def expected(data: Path, topic: str, partitions: int) -> dict[str, list[int]]:
    from zkcoord.data.partlog import open_reader

    out: dict[str, list[int]] = {}
    for p in range(partitions):
        reader = open_reader(data, topic, p)
        try:
            offset = reader.start_offset
            while True:
                records = reader.read(offset)
                if not records:
                    break
                for r in records:
                    entry = out.setdefault(key_of(r.key), [0, 0])
                    entry[0] += 1
                    entry[1] += value_of(r.value)
                offset = records[-1].offset + 1
        finally:
            reader.close()
    return out


class Member:
    def __init__(self, cluster: Cluster, data: Path, store: Path, name: str, *, region: str = "r1", topic: str = "t"):
        self.app = AggregateApp()
        consumer = ConsumerConfig(
            group="g",
            subscription=Subscription.static({topic: 1}),
            zk=cluster.hosts,
            data_dir=data,
            session_timeout_s=4.0,
            auto_commit=False,
            max_poll_records=20,
        )
        self.region = ConsistentRegion(
            consumer,
            RegionConfig(region, name, store, reset_timeout_s=6.0, throttle_s=0.2),
            self.app,
            journal=Journal(cluster.journal_dir, f"member-{name}"),
        )
        self.follower = OrderFollower(self.region, self.app.snapshot)

    def start(self) -> Member:
        self.region.start()
        self.follower.start()
        return self

    def close(self) -> None:
        self.follower.stop()
        self.region.close()


def summed(members: list[Member]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for m in members:
        for k, (c, s) in m.app.snapshot().items():
            entry = out.setdefault(k, [0, 0])
            entry[0] += c
            entry[1] += s
    return out


def test_two_members_driver_checkpoints_cover_every_record_once(cluster: Cluster, tmp_path: Path) -> None:
    cluster.broker(1)
    TopicAdmin(cluster.admin_zk).create("t", 4)
    data, store = tmp_path / "data", tmp_path / "store"
    for p in range(4):
        produce(data, "t", p, 0, 100)
    with ExitStack() as stack:
        members = [stack.enter_context(_closing(Member(cluster, data, store, n).start())) for n in ("m1", "m2")]
        driver = RegionDriver(
            cluster.admin_zk, "g", "r1", ["m1", "m2"], interval_s=0.5, order_timeout_s=10,
            journal=Journal(cluster.journal_dir, "driver"),
        )  # fmt: skip
        stop = threading.Event()
        thread = threading.Thread(target=driver.run, args=(stop,), daemon=True)
        thread.start()
        stack.callback(thread.join, 10)
        stack.callback(stop.set)
        want = expected(data, "t", 4)

        def covered() -> bool:
            return summed(members) == want and bool(driver.completed)

        wait_until(covered, 30, "every record counted once")
        for m in members:
            assert m.region.state is ClientState.RESET_COMPLETE


class _closing:
    def __init__(self, member: Member) -> None:
        self.member = member

    def __enter__(self) -> Member:
        return self.member

    def __exit__(self, *exc: object) -> None:
        self.member.close()
