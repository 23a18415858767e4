"""Throughput: records/s of the partition log read directly, of the fetch manager, and of the ``Consumer``."""

from __future__ import annotations

import functools
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zkcoord.bench.consumer.common import (
    MAX_POLLS,
    READ_CHUNK,
    SESSION_S,
    THREADS,
    THROUGHPUT_PARTITIONS,
    BenchError,
    Env,
    fill,
    log_bytes,
)
from zkcoord.consumer import Consumer, ConsumerConfig, ConsumerRecord, Subscription, TopicPartition
from zkcoord.consumer.fetcher import FetchManager
from zkcoord.data.partlog import PartitionReader

# --- throughput -------------------------------------------------------------------------------------------------


@dataclass
class Row:
    operation: str
    threads: int
    max_poll: int | None
    records: int
    seconds: float
    records_per_s: float
    mb_per_s: float
    ratio: float | None
    join_s: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Run:
    """What one throughput work returns: seconds, records seen, and for consumer rows the join time and details."""

    seconds: float
    records: int
    join_s: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def raw_read_batches(data_dir: Path, topic: str, partitions: int) -> Run:
    """The ceiling: CRC-checked batches, 1 MiB per call, every record iterated; one thread."""
    start = time.perf_counter()
    n = 0
    for p in range(partitions):
        with PartitionReader(data_dir, topic, p) as reader:
            offset, end = 0, reader.end_offset()
            while offset < end:
                batches = reader.read_batches(offset, max_bytes=READ_CHUNK)
                for batch in batches:
                    for _record in batch:
                        n += 1
                offset = batches[-1].next_offset
    return Run(time.perf_counter() - start, n)


def raw_read(data_dir: Path, topic: str, partitions: int, max_records: int, wrap: bool) -> Run:
    """What a fetcher does, in one thread: ``read(offset, max_poll)``; with ``wrap``, a ConsumerRecord per record."""
    start = time.perf_counter()
    n = 0
    for p in range(partitions):
        with PartitionReader(data_dir, topic, p) as reader:
            offset, end = 0, reader.end_offset()
            while offset < end:
                got = reader.read(offset, max_records, READ_CHUNK)
                if wrap:
                    for _record in [ConsumerRecord(topic, p, *r) for r in got]:
                        n += 1
                else:
                    for _raw in got:
                        n += 1
                offset = got[-1].offset + 1
    return Run(time.perf_counter() - start, n)


def consume_deadline(total: int) -> float:
    return 60.0 + total / 20_000  # far beyond any plausible rate; a stuck run fails instead of hanging


def poll_all(poll: Callable[[float], list[Any]], total: int, what: str) -> tuple[float, float, int]:
    """Call ``poll`` until ``total`` records came back, iterating each; return when the first came (perf_counter),
    when the last did, and how many.  :raises BenchError: not all of them within :func:`consume_deadline`."""
    deadline = time.monotonic() + consume_deadline(total)
    n = 0
    first: float | None = None
    while n < total:
        records = poll(0.5)
        if records and first is None:
            first = time.perf_counter()
        for _record in records:
            n += 1
        if time.monotonic() > deadline:
            raise BenchError(f"{what}: {n} of {total} records before the deadline")
    assert first is not None
    return first, time.perf_counter(), n


def fetch_manager_run(data_dir: Path, topic: str, partitions: int, total: int, *, threads: int, max_poll: int) -> Run:
    """The consumer's data plane alone: FetchManager + poll(), partitions in contiguous blocks per thread."""
    manager = FetchManager(data_dir, max_poll_records=max_poll)
    manager.start()
    try:
        manager.assign({TopicPartition(topic, p): (0, f"bench-{p * threads // partitions}") for p in range(partitions)})
        first, end, n = poll_all(manager.poll, total, "FetchManager")
        stats = manager.stats()
    finally:
        manager.close()
    return Run(end - first, n, extra={"fetches": stats.fetches})


def consumer_run(env: Env, topic: str, partitions: int, total: int, *, threads: int, max_poll: int) -> Run:
    """A Consumer in a fresh group polls until every record has been returned once."""
    group = f"tput-{threads}-{max_poll}-{uuid.uuid4().hex[:8]}"
    config = ConsumerConfig(
        group=group,
        subscription=Subscription.static({topic: threads}),
        zk=env.hosts,
        data_dir=env.data_dir,
        session_timeout_s=SESSION_S,
        max_poll_records=max_poll,
        auto_commit=True,
    )
    consumer = Consumer(config)
    try:
        started = time.perf_counter()
        consumer.start()
        first, end, n = poll_all(consumer.poll, total, f"consumer {threads}x{max_poll}")
        positions = consumer.fetcher.positions()
        stats = consumer.fetcher.stats()
        metrics = consumer.metrics()
    finally:
        consumer.close()
    if n != total or stats.records_delivered != total or stats.records_dropped:
        raise BenchError(f"consumer {threads}x{max_poll}: {n} records returned, {stats} (expected {total} once)")
    short = {str(tp): pos for tp, pos in positions.items() if pos != total // partitions}
    if len(positions) != partitions or short:
        raise BenchError(f"consumer {threads}x{max_poll}: positions not at the ends of the logs: {short}")
    return Run(
        end - first,
        n,
        join_s=first - started,
        extra={"fetches": stats.fetches, "rebalances": metrics.rebalances, "group": group},
    )


def throughput(env: Env, records: int, repeats: int) -> list[Row]:
    topic = "throughput"
    per_partition = records // THROUGHPUT_PARTITIONS
    total = per_partition * THROUGHPUT_PARTITIONS
    env.topics.create(topic, THROUGHPUT_PARTITIONS)
    fill(env.data_dir, topic, THROUGHPUT_PARTITIONS, per_partition)
    size = log_bytes(env.data_dir, topic, THROUGHPUT_PARTITIONS)
    d, parts = env.data_dir, THROUGHPUT_PARTITIONS

    works: list[tuple[str, int, int | None, Callable[[], Run]]] = [
        ("raw: read_batches + iterate (ceiling)", 1, None, lambda: raw_read_batches(d, topic, parts)),
        ("raw: read(max_poll)", 1, 500, lambda: raw_read(d, topic, parts, 500, wrap=False)),
        ("raw: read(max_poll) + ConsumerRecord", 1, 500, lambda: raw_read(d, topic, parts, 500, wrap=True)),
    ]
    for t in THREADS:
        fetch = functools.partial(fetch_manager_run, d, topic, parts, total, threads=t, max_poll=500)
        works.append(("FetchManager + poll (no ZooKeeper)", t, 500, fetch))
    for m in MAX_POLLS:
        for t in THREADS:
            works.append(
                ("Consumer", t, m, functools.partial(consumer_run, env, topic, parts, total, threads=t, max_poll=m))
            )

    best: list[Run | None] = [None] * len(works)
    for _ in range(repeats):
        for i, (name, threads, max_poll, work) in enumerate(works):
            result = work()
            if result.records != total:
                raise BenchError(f"{name}: {result.records} records, expected {total}")
            print(f"  {name:<40} threads {threads} max_poll {max_poll or '-':>4}: {result.seconds:7.3f} s", flush=True)
            current = best[i]
            if current is None or result.seconds < current.seconds:
                best[i] = result

    rows: list[Row] = []
    ceiling_rate = 0.0
    for (name, threads, max_poll, _), run in zip(works, best, strict=True):
        if run is None:
            raise BenchError(f"{name}: no run")
        rate = total / run.seconds
        if not rows:
            ceiling_rate = rate
        rows.append(
            Row(
                operation=name,
                threads=threads,
                max_poll=max_poll,
                records=total,
                seconds=round(run.seconds, 4),
                records_per_s=round(rate),
                mb_per_s=round(size / run.seconds / 1e6, 1),
                ratio=None if not rows else round(rate / ceiling_rate, 3),
                join_s=None if run.join_s is None else round(run.join_s, 3),
                extra=run.extra,
            )
        )
    return rows


def print_throughput(rows: list[Row]) -> None:
    print("\nThroughput (100-byte values, 8 partitions, page cache; fastest of the repeats)")
    header = (
        f"{'operation':<40} {'thr':>3} {'max_poll':>8} {'records':>9} {'seconds':>8} {'records/s':>11} "
        f"{'MB/s':>7} {'ratio':>6} {'join s':>7}"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        ratio = f"{r.ratio:.2f}" if r.ratio is not None else "(ceil)"
        join = f"{r.join_s:.2f}" if r.join_s is not None else ""
        print(
            f"{r.operation:<40} {r.threads:>3} {r.max_poll or '-':>8} {r.records:>9} {r.seconds:>8.3f} "
            f"{r.records_per_s:>11,.0f} {r.mb_per_s:>7.1f} {ratio:>6} {join:>7}"
        )
