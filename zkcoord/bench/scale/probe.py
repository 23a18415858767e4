"""Unit costs on the loaded cluster, measured from outside the coordinator (nothing of the coordinator is changed).

* :func:`round_trip_ms`: one synchronous ZooKeeper read through kazoo (``exists``), the unit a coordinator that
  reads one thing at a time pays per step.
* :func:`examine_one_at_a_time`: what the new coordinator's first pass does per group (``read_group`` -- four
  sequential round trips of pipelined reads -- then :func:`~zkcoord.coordinator.plan.plan`), for every group in turn.
* :func:`examine_pipelined`: the same reads and plans for every group, but in four pipelined bursts *across* groups
  (one per dependency level: listings; registrations and states; owner topics; owners), as the coordinator's
  :func:`~zkcoord.coordinator.snapshot.read_groups` does (a new coordinator reads ``examine_batch`` groups at a
  time).  The plans must agree with the one-at-a-time ones.
* :func:`per_request_us`: the cost of one request inside a large pipelined burst of reads, through kazoo
  (``ZkClient.get_many``) and through the swarm's asyncio client (:mod:`~zkcoord.bench.scale.wire`) on one connection:
  what a request costs once the round trip is amortised, i.e. the client's own overhead.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kazoo.protocol.serialization import GetData

from zkcoord.bench.scale.wire import NO_PASSWORD, Connection
from zkcoord.coordinator.plan import plan
from zkcoord.coordinator.snapshot import read_group, read_groups
from zkcoord.errors import ZkError
from zkcoord.layout import paths
from zkcoord.zk import ZkClient


@dataclass(frozen=True, slots=True)
class Examination:
    seconds: float
    necessary: int
    reasons: tuple[str, ...]


def round_trip_ms(zk: ZkClient, count: int = 300) -> float:
    """Median milliseconds of a synchronous ``exists`` on the loaded server."""
    times = []
    for _ in range(count):
        start = time.perf_counter()
        zk.exists(paths.GROUPS)
        times.append((time.perf_counter() - start) * 1000)
    return round(statistics.median(times), 3)


def examine_one_at_a_time(zk: ZkClient, groups: Sequence[str], topics: Mapping[str, int]) -> Examination:
    start = time.perf_counter()
    reasons = []
    for group in groups:
        planned = plan(read_group(zk, group).snapshot, topics, "range")
        if planned.necessary:
            reasons.append(planned.reason)
    return Examination(time.perf_counter() - start, len(reasons), tuple(reasons))


def examine_pipelined(zk: ZkClient, groups: Sequence[str], topics: Mapping[str, int]) -> Examination:
    """Every group read by the coordinator's own :func:`~zkcoord.coordinator.snapshot.read_groups` (four pipelined
    bursts across all groups), then planned."""
    start = time.perf_counter()
    reasons = []
    for read in read_groups(zk, groups).values():
        if isinstance(read, ZkError):
            raise read
        planned = plan(read.snapshot, topics, "range")
        if planned.necessary:
            reasons.append(planned.reason)
    return Examination(time.perf_counter() - start, len(reasons), tuple(reasons))


def per_request_us(zk: ZkClient, hosts: tuple[str, int], chroot: str, znodes: Sequence[str]) -> tuple[float, float]:
    """Microseconds per read in one pipelined burst of ``znodes``: (kazoo, asyncio client).  Best of three each."""
    kazoo_runs, asyncio_runs = [], []
    for _ in range(3):
        start = time.perf_counter()
        zk.get_many(znodes)
        kazoo_runs.append(time.perf_counter() - start)
        asyncio_runs.append(asyncio.run(_asyncio_burst(hosts, chroot, znodes)))
    return (round(min(kazoo_runs) * 1e6 / len(znodes), 2), round(min(asyncio_runs) * 1e6 / len(znodes), 2))


async def _asyncio_burst(hosts: tuple[str, int], chroot: str, znodes: Sequence[str]) -> float:
    loop = asyncio.get_running_loop()
    _, conn = await loop.create_connection(lambda: Connection(chroot, lambda _k, _p: None, lambda: None), *hosts)
    try:
        await conn.handshake(30_000, 0, NO_PASSWORD, 10.0)
        start = time.perf_counter()
        await asyncio.gather(*(conn.request(GetData(chroot + z, False)) for z in znodes), return_exceptions=True)
        return time.perf_counter() - start
    finally:
        await conn.close(5.0)
