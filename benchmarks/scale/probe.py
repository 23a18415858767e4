"""Unit costs on the loaded cluster, measured from outside the coordinator (nothing of the coordinator is changed).

* :func:`round_trip_ms`: one synchronous ZooKeeper read through kazoo (``exists``), the unit a coordinator that
  reads one thing at a time pays per step.
* :func:`examine_one_at_a_time`: what the new coordinator's first pass does per group (``read_group`` -- four
  sequential round trips of pipelined reads -- then :func:`~zkcoord.coordinator.plan.plan`), for every group in turn.
* :func:`examine_pipelined`: the same reads and plans for every group, but in four pipelined bursts *across* groups
  (one per dependency level: listings; registrations and states; owner topics; owners), which is what a startup
  pass could do.  The plans must agree with the one-at-a-time ones.
* :func:`per_request_us`: the cost of one request inside a large pipelined burst of reads, through kazoo
  (``ZkClient.get_many``) and through the swarm's asyncio client on one connection: what a request costs once the
  round trip is amortised, i.e. the client's own overhead.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kazoo.protocol.serialization import GetData

from zkcoord import paths
from zkcoord.coordinator.plan import GroupSnapshot, Member, plan
from zkcoord.coordinator.snapshot import read_group
from zkcoord.errors import CodecError
from zkcoord.zk import ZkClient
from zkcoord.znodes import GroupState, MemberRegistration, decode_owner

from .swarm import NO_PASSWORD, Connection


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
    start = time.perf_counter()
    listings = zk.children_many([p for g in groups for p in (paths.group_ids(g), paths.owners_root(g))])
    ids = {g: sorted(listings[2 * i] or []) for i, g in enumerate(groups)}
    owner_topics = {g: sorted(listings[2 * i + 1] or []) for i, g in enumerate(groups)}
    reads = zk.get_many([p for g in groups for p in (*(paths.member(g, c) for c in ids[g]), paths.group_state(g))])
    topic_keys = [(g, t) for g in groups for t in owner_topics[g]]
    partition_lists = zk.children_many([paths.owners(g, t) for g, t in topic_keys])
    owner_keys = [
        (g, t, int(p))
        for (g, t), parts in zip(topic_keys, partition_lists, strict=True)
        for p in parts or []
        if p.isdigit()
    ]
    owner_reads = zk.get_many([paths.owner(g, t, p) for g, t, p in owner_keys])
    owners: dict[str, dict[str, dict[int, str]]] = {g: {} for g in groups}
    for (g, t, p), got in zip(owner_keys, owner_reads, strict=True):
        if got is not None:
            try:
                owners[g].setdefault(t, {})[p] = decode_owner(got[0])
            except CodecError:
                continue
    reasons = []
    at = 0
    for g in groups:
        members: dict[str, Member] = {}
        for cid in ids[g]:
            got = reads[at]
            at += 1
            if got is not None:
                try:
                    members[cid] = Member(cid, MemberRegistration.decode(got[0]), got[1].czxid)
                except CodecError:
                    continue
        got_state = reads[at]
        at += 1
        state = None
        if got_state is not None:
            try:
                state = GroupState.decode(got_state[0])
            except CodecError:
                state = None
        snapshot = GroupSnapshot(group=g, members=members, state=state, owners=owners[g])
        planned = plan(snapshot, topics, "range")
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
