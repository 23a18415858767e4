"""What the consumer benchmark's parts share: constants, the in-process cluster, the journal as a monotonic clock,
and the ZooKeeper floor."""

from __future__ import annotations

import math
import os
import threading
import time
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from zkcoord.broker import Broker, BrokerConfig
from zkcoord.coordinator import Coordinator, CoordinatorConfig
from zkcoord.data.partlog import PartitionWriter, WriterConfig
from zkcoord.data.partlog.layout import list_segments, log_path, partition_dir
from zkcoord.data.topics import TopicAdmin
from zkcoord.runtime.journal import Journal
from zkcoord.zk import ZkClient, ZkConfig
from zkcoord.zkserver import ZkServer, ZkServerConfig

T = TypeVar("T")

SESSION_S = 4.0
VALUE_BYTES = 100
APPEND_BATCH = 100
READ_CHUNK = 1024 * 1024
THROUGHPUT_PARTITIONS = 8
THREADS = (1, 4)
MAX_POLLS = (500, 2000)
REBALANCE_PARTITIONS = 200
REBALANCE_MAX_POLL = 500
REBALANCE_PREFILL = REBALANCE_MAX_POLL  # per partition: one read fills a fetcher's prefetch buffer
ZK_FLOOR_SAMPLES = 200
ZK_FLOOR_WARMUP = 400  # a fresh JVM compiles its hot paths over its first few hundred requests


class BenchError(Exception):
    """The benchmark could not measure what it set out to (a deadline passed, a check failed)."""


# --- small helpers ----------------------------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..1) of a non-empty list."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def summary(values: list[float]) -> dict[str, float]:
    return {
        "n": len(values),
        "p50": round(percentile(values, 0.5), 2),
        "p95": round(percentile(values, 0.95), 2),
        "max": round(max(values), 2),
        "mean": round(sum(values) / len(values), 2),
    }


def log_bytes(root: Path, topic: str, partitions: int) -> int:
    total = 0
    for p in range(partitions):
        directory = partition_dir(root, topic, p)
        total += sum(log_path(directory, base).stat().st_size for base in list_segments(directory))
    return total


# --- the journal as a clock -------------------------------------------------------------------------------------

WATCHED = frozenset(
    {
        "consumer.registered",
        "consumer.deregistered",
        "consumer.fenced",
        "command.applied",
        "command.rejected",
        "offsets.fenced",
        "rebalance.requested",
        "rebalance.started",
        "rebalance.barrier",
        "rebalance.completed",
        "rebalance.aborted",
        "rebalance.retrying",
        "rebalance.failed",
    }
)


@dataclass(frozen=True, slots=True)
class Seen:
    at: float  # time.monotonic() when emitted
    event: str
    fields: dict[str, Any]


class Recorder(Journal):
    """A journal that writes nothing and keeps the control-plane events in memory, stamped on the monotonic clock.

    The broker (coordinator) and every consumer of the rebalance part share it, so one clock orders all of them.
    """

    def __init__(self) -> None:
        super().__init__(None, "bench")
        self.cond = threading.Condition()
        self.seen: list[Seen] = []

    def emit(self, event: str, **fields: Any) -> None:
        at = time.monotonic()
        super().emit(event, **fields)
        if event in WATCHED:
            with self.cond:
                self.seen.append(Seen(at, event, fields))
                self.cond.notify_all()

    def mark(self) -> int:
        with self.cond:
            return len(self.seen)

    def since(self, index: int) -> list[Seen]:
        with self.cond:
            return self.seen[index:]

    def wait(self, check: Callable[[list[Seen]], T | None], since: int, timeout: float, what: str) -> T:
        """Wait until ``check(events since index)`` returns something other than None; return it."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while (found := check(self.seen[since:])) is None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise BenchError(f"timed out after {timeout:g} s waiting for {what}")
                self.cond.wait(min(remaining, 0.1))
            return found


# --- the cluster ------------------------------------------------------------------------------------------------


@dataclass
class Env:
    hosts: str
    data_dir: Path
    admin: ZkClient
    topics: TopicAdmin
    recorder: Recorder
    coordinator: Coordinator


def open_env(stack: ExitStack, data_dir: Path, fsync: bool) -> Env:
    server = ZkServer(ZkServerConfig(port=0, fsync=fsync))
    stack.callback(server.close)
    server.start()
    hosts = server.connect_string
    recorder = Recorder()
    coordinator = Coordinator(0, CoordinatorConfig())
    broker = Broker(
        BrokerConfig(0, ZkConfig.from_string(hosts, session_timeout_s=SESSION_S), host="bench", takeover_wait_s=0.5),
        recorder,
        [coordinator],
    )
    broker.start()
    stack.callback(broker.stop)
    if not coordinator.elected.wait(15):
        raise BenchError("the in-process broker's coordinator was not elected within 15 s")
    admin = ZkClient(ZkConfig.from_string(hosts, session_timeout_s=SESSION_S), name="bench-admin").start()
    stack.callback(admin.stop)
    return Env(hosts, data_dir, admin, TopicAdmin(admin), recorder, coordinator)


def fill(data_dir: Path, topic: str, partitions: int, per_partition: int) -> None:
    value = os.urandom(VALUE_BYTES)
    items: list[tuple[bytes | None, bytes]] = [(b"key-%04d" % i, value) for i in range(APPEND_BATCH)]
    config = WriterConfig(exclusive=True, fsync_on_roll=False)
    for p in range(partitions):
        with PartitionWriter(data_dir, topic, p, config=config) as writer:
            left = per_partition
            while left > 0:
                n = min(APPEND_BATCH, left)
                writer.append_batch(items[:n])
                left -= n


# --- ZooKeeper floor --------------------------------------------------------------------------------------------


def zk_floor(admin: ZkClient, samples: int) -> dict[str, dict[str, float]]:
    base = f"/bench-rtt-{uuid.uuid4().hex[:8]}"
    admin.ensure_path(base)
    node = f"{base}/n"
    pairs: list[float] = []
    reads: list[float] = []
    try:
        for i in range(ZK_FLOOR_WARMUP + samples):
            start = time.perf_counter()
            admin.create(node, b"x")
            admin.delete(node)
            middle = time.perf_counter()
            admin.exists(base)
            end = time.perf_counter()
            if i >= ZK_FLOOR_WARMUP:
                pairs.append((middle - start) * 1000)
                reads.append((end - middle) * 1000)
    finally:
        admin.delete(base, recursive=True)
    return {"create_delete_ms": summary(pairs), "exists_ms": summary(reads)}
