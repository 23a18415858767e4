"""The consumer: records/s against the raw partition-log read ceiling, and rebalance latency, in one run.

    python benchmarks/consumer_bench.py [--records N] [--trials T] [--consumers 10,50] [--out FILE]
                                        [--repeats R] [--dir DIR] [--zk-no-fsync]

One real ZooKeeper (:class:`~zkcoord.zkserver.ZkServer`, port 0, temporary data, ``forceSync`` as ZooKeeper's
default unless ``--zk-no-fsync``) and one broker hosting a :class:`~zkcoord.coordinator.Coordinator`, both started by
this script; the consumers run in this process, each on its own ZooKeeper session (timeout 4 s).

**ZooKeeper floor.**  The round trip of a ``create`` + ``delete`` of one znode (and of one ``exists``), measured on
the same server first, as the unit the rebalance latencies are made of.

**Throughput.**  ``--records`` records (8-byte keys, 100-byte values, appended 100 per ``append_batch``) spread over
8 partitions, then read back in full by each row, all in the page cache:

* ceiling: ``PartitionReader.read_batches`` (1 MiB per call, CRC-checked) and iterating every record, one thread;
* two decompositions of the fetcher's work: ``read(offset, max_poll)`` (what a fetcher calls), then that plus a
  ``ConsumerRecord`` per record (what a fetcher hands to ``poll()``);
* ``FetchManager`` + ``poll()`` without ZooKeeper (the consumer's data plane alone), with 1 and 4 fetcher threads;
* ``Consumer`` (a fresh group each run, ``Subscription.static({topic: threads})``, auto-commit on), with 1 and 4
  threads and ``max_poll_records`` 500 and 2000, polling until every record has been returned once.

Every row iterates every record in the reading thread (``for record in ...``), so the application-side work is the
same in all of them.  A consumer row's time runs from the first ``poll()`` that returned records to the one that
returned the last; its join time (``start()`` to the first records) is reported apart.  Rows run interleaved
(all once, then all again...) ``--repeats`` times and the fastest run counts.  "ratio" is records/s over the
ceiling's.

**Rebalance latency.**  A topic of 200 partitions, 500 records in each.  For each N of ``--consumers``: N
consumers join one group; once it is stable (the coordinator's state STABLE with the N members, every consumer's
``assignment()`` equal to its share of the persisted target), ``--trials`` times: one more consumer joins, then
leaves.  A join is timed from its member znode's creation (the ``consumer.registered`` event, emitted when the
``create`` returns) until the last of the N+1 consumers has applied the final generation's start-fetcher (its
fetchers run on the new share; ``command.applied`` is emitted right after ``on_partitions_assigned``); a leave from
the member znode's deletion (``consumer.deregistered``) until the last of the N has.  Every transition is checked
the same way (state STABLE, members, assignments).  The breakdown comes from the coordinator's and consumers'
journal events, timestamped on one monotonic clock: trigger -> ``rebalance.requested`` (the watch), requested ->
``rebalance.started`` (queue, group read, plan), started -> ``rebalance.barrier`` (the stop phase: stop-fetchers
written, every consumer stopped, committed, acknowledged; with the first and the last consumer's stop applied),
barrier -> the last start applied (the start phase: ownership and start-fetchers written, every consumer claimed its
partitions and started fetching; with the first consumer's start applied).  The coordinator's own ``command.sent``
events are not used: they are stamped when its thread gets the GIL back after the write, which with 50 consumers
waking up at once can be after they applied the command.  The consumers do not ``poll()``: each fetcher fills its
prefetch buffer (500 records) with one read and then idles, so that N consumers in one process do not compete for
the GIL with fetch loops; the latencies are those of the control plane, but N consumers and the coordinator still
share one interpreter (and, here, two CPUs), which a deployment of separate processes would not.

The tables go to stdout, everything to a JSON file (default ``benchmarks/results/consumer.json``).
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import math
import os
import platform
import shutil
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from consumer import Consumer, ConsumerConfig, ConsumerRecord, Subscription, TopicPartition
from consumer.fetcher import FetchManager
from zkcoord import paths
from zkcoord.broker import Broker, BrokerConfig
from zkcoord.coordinator import Coordinator, CoordinatorConfig
from zkcoord.errors import ZkCoordError, ZkError
from zkcoord.journal import Journal
from zkcoord.partlog import PartitionReader, PartitionWriter, WriterConfig
from zkcoord.partlog.layout import list_segments, log_path, partition_dir
from zkcoord.topics import TopicAdmin
from zkcoord.zk import ZkClient, ZkConfig
from zkcoord.zkserver import ZkServer, ZkServerConfig
from zkcoord.znodes import GroupPhase, GroupState

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
ZK_FLOOR_WARMUP = 20
DEFAULT_OUT = Path(__file__).parent / "results" / "consumer.json"

log = logging.getLogger("consumer_bench")


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


def fetch_manager_run(data_dir: Path, topic: str, partitions: int, total: int, *, threads: int, max_poll: int) -> Run:
    """The consumer's data plane alone: FetchManager + poll(), partitions in contiguous blocks per thread."""
    manager = FetchManager(data_dir, max_poll_records=max_poll)
    manager.start()
    try:
        manager.assign({TopicPartition(topic, p): (0, f"bench-{p * threads // partitions}") for p in range(partitions)})
        deadline = time.monotonic() + consume_deadline(total)
        n = 0
        first: float | None = None
        while n < total:
            records = manager.poll(0.5)
            if records and first is None:
                first = time.perf_counter()
            for _record in records:
                n += 1
            if time.monotonic() > deadline:
                raise BenchError(f"FetchManager: {n} of {total} records before the deadline")
        end = time.perf_counter()
        stats = manager.stats()
    finally:
        manager.close()
    assert first is not None
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
        deadline = time.monotonic() + consume_deadline(total)
        n = 0
        first: float | None = None
        while n < total:
            records = consumer.poll(0.5)
            if records and first is None:
                first = time.perf_counter()
            for _record in records:
                n += 1
            if time.monotonic() > deadline:
                raise BenchError(f"consumer {threads}x{max_poll}: {n} of {total} records before the deadline")
        end = time.perf_counter()
        positions = consumer.fetcher.positions()
        stats = consumer.fetcher.stats()
        metrics = consumer.metrics()
    finally:
        consumer.close()
    assert first is not None
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


# --- rebalance latency ------------------------------------------------------------------------------------------


@dataclass
class Transition:
    consumers: int  # N, the group's size before a join and after a leave
    kind: str  # "join" or "leave"
    trial: int
    generation: int
    attempts: int  # rebalances started for the group during the transition
    latency_ms: float  # trigger (member znode created / deleted) -> last consumer applied the start
    from_call_ms: float  # Consumer.start() / close() called -> last consumer applied the start
    watch_ms: float  # trigger -> rebalance.requested
    plan_ms: float  # requested -> rebalance.started (queue, group read, plan)
    stop_ms: float  # started -> rebalance.barrier (the coordinator has seen every stop acknowledged)
    stop_first_ms: float  # started -> the first consumer applied its stop-fetcher
    stop_last_ms: float  # started -> the last consumer applied its stop-fetcher
    start_ms: float  # barrier -> the last consumer applied its start-fetcher
    start_first_ms: float  # barrier -> the first consumer applied its start-fetcher
    spread_ms: float  # first start applied -> last start applied
    coordinator_ms: float  # requested -> rebalance.completed (the coordinator's own latency)


def read_state(admin: ZkClient, group: str) -> GroupState | None:
    try:
        data, _ = admin.get(paths.group_state(group))
    except ZkError:
        return None
    return GroupState.decode(data, paths.group_state(group))


def rebalance_progress(group: str, expected: set[str]) -> Callable[[list[Seen]], int | None]:
    """A check for :meth:`Recorder.wait`: the generation of the newest rebalance of ``group`` once it completed
    with exactly ``expected`` as members.  Raises on a failed rebalance."""

    def check(seen: list[Seen]) -> int | None:
        started: dict[int, Seen] = {}
        completed: set[int] = set()
        for s in seen:
            if s.fields.get("group") != group:
                continue
            if s.event == "rebalance.failed":
                raise BenchError(f"group {group}: rebalance failed: {s.fields.get('reason')}")
            if s.event == "rebalance.started":
                started[s.fields["generation"]] = s
            elif s.event == "rebalance.completed":
                completed.add(s.fields["generation"])
        if not started:
            return None
        generation = max(started)
        if set(started[generation].fields["members"]) != expected or generation not in completed:
            return None
        return generation

    return check


def settle(env: Env, group: str, consumers: list[Consumer], since: int, timeout: float) -> tuple[int, GroupState]:
    """Wait until ``group`` is stable with exactly ``consumers``, each fetching its share of the persisted target."""
    expected = {c.consumer_id for c in consumers}
    deadline = time.monotonic() + timeout
    check = rebalance_progress(group, expected)
    while True:
        remaining = deadline - time.monotonic()
        generation = env.recorder.wait(check, since, max(remaining, 0.0), f"group {group} stable with {len(expected)}")
        state = read_state(env.admin, group)
        if (
            state is not None
            and state.phase is GroupPhase.STABLE
            and state.generation == generation
            and set(state.members) == expected
        ):
            break
        if time.monotonic() >= deadline:
            raise BenchError(f"group {group}: the persisted state never matched generation {generation}: {state}")
        time.sleep(0.01)  # a newer rebalance started after that one completed: wait for it
    owned = 0
    for c in consumers:
        want = {
            TopicPartition(topic, p): thread
            for topic, parts in state.target.items()
            for p, thread in parts.items()
            if thread.startswith(f"{c.consumer_id}-")
        }
        got = c.assignment()
        if got != want:
            raise BenchError(
                f"group {group} generation {generation}: {c.consumer_id} fetches {len(got)} partitions, "
                f"its share of the target is {len(want)} ({sorted(set(got) ^ set(want))[:5]} differ)"
            )
        owned += len(got)
    if owned != REBALANCE_PARTITIONS:
        raise BenchError(f"group {group}: {owned} of {REBALANCE_PARTITIONS} partitions fetched")
    return generation, state


def first_at(seen: Iterable[Seen], event: str, **match: object) -> float | None:
    for s in seen:
        if s.event == event and all(s.fields.get(k) == v for k, v in match.items()):
            return s.at
    return None


def applied_span(
    seen: list[Seen], group: str, generation: int, option: str, consumers: list[Consumer]
) -> tuple[float, float]:
    """When the first and the last of ``consumers`` applied their ``option`` command of ``generation``."""
    applied = {
        s.fields["consumer"]: s.at
        for s in seen
        if s.event == "command.applied"
        and s.fields.get("group") == group
        and s.fields.get("option") == option
        and s.fields.get("generation") == generation
    }
    missing = [c.consumer_id for c in consumers if c.consumer_id not in applied]
    if missing:
        raise BenchError(f"group {group} generation {generation}: no {option} applied by {missing[:3]}")
    times = [applied[c.consumer_id] for c in consumers]
    return min(times), max(times)


def measure(
    env: Env,
    group: str,
    consumers: list[Consumer],
    since: int,
    *,
    kind: str,
    trial: int,
    trigger: tuple[str, str],
    called_at: float,
    timeout: float,
) -> Transition:
    generation, _ = settle(env, group, consumers, since, timeout)
    seen = env.recorder.since(since)
    event, consumer_id = trigger
    triggered = first_at(seen, event, consumer=consumer_id)
    if triggered is None:  # e.g. close() could not delete the member znode: its session's end did
        log.warning("no %s event for %s; timing from the call", event, consumer_id)
        triggered = called_at
    started = first_at(seen, "rebalance.started", group=group, generation=generation)
    barrier = first_at(seen, "rebalance.barrier", group=group, generation=generation)
    completed = first_at(seen, "rebalance.completed", group=group, generation=generation)
    if started is None or barrier is None or completed is None:
        raise BenchError(f"group {group} generation {generation}: coordinator events missing")
    requested = max(
        (s.at for s in seen if s.event == "rebalance.requested" and s.fields.get("group") == group and s.at <= started),
        default=started,
    )
    stop_first, stop_last = applied_span(seen, group, generation, "stop-fetcher", consumers)
    first, last = applied_span(seen, group, generation, "start-fetcher", consumers)
    attempts = sum(1 for s in seen if s.event == "rebalance.started" and s.fields.get("group") == group)
    problems = [s for s in seen if s.event in ("command.rejected", "offsets.fenced", "consumer.fenced")]
    for s in problems:
        log.warning("during %s trial %d: %s %s", kind, trial, s.event, s.fields)

    def ms(a: float, b: float) -> float:
        return round((b - a) * 1000, 2)

    return Transition(
        consumers=len(consumers) - (1 if kind == "join" else 0),
        kind=kind,
        trial=trial,
        generation=generation,
        attempts=attempts,
        latency_ms=ms(triggered, last),
        from_call_ms=ms(called_at, last),
        watch_ms=ms(triggered, requested),
        plan_ms=ms(requested, started),
        stop_ms=ms(started, barrier),
        stop_first_ms=ms(started, stop_first),
        stop_last_ms=ms(started, stop_last),
        start_ms=ms(barrier, last),
        start_first_ms=ms(barrier, first),
        spread_ms=ms(first, last),
        coordinator_ms=ms(requested, completed),
    )


def rebalance_consumer(env: Env, group: str, topic: str) -> Consumer:
    config = ConsumerConfig(
        group=group,
        subscription=Subscription.static({topic: 1}),
        zk=env.hosts,
        data_dir=env.data_dir,
        session_timeout_s=SESSION_S,
        max_poll_records=REBALANCE_MAX_POLL,
        auto_commit=True,
    )
    return Consumer(config, journal=env.recorder)


def close_all(consumers: list[Consumer]) -> None:
    for c in reversed(consumers):
        try:
            c.close(timeout=5.0)
        except (ZkCoordError, OSError, RuntimeError):  # keep closing the others
            log.exception("closing %s", c.consumer_id)


def rebalance(env: Env, topic: str, n: int, trials: int) -> tuple[list[Transition], float]:
    """N consumers form a group; then ``trials`` times one joins and leaves.  Returns the transitions and the time
    the N took to form the group (first start() to the last start applied)."""
    group = f"rebalance-{n}-{uuid.uuid4().hex[:8]}"
    timeout = 30.0 + n
    members: list[Consumer] = []
    transitions: list[Transition] = []
    try:
        since = env.recorder.mark()
        began = time.monotonic()
        for _ in range(n):
            c = rebalance_consumer(env, group, topic)
            members.append(c)
            c.start()
        generation, _ = settle(env, group, members, since, timeout=60.0 + n)
        applied = [
            s.at
            for s in env.recorder.since(since)
            if s.event == "command.applied"
            and s.fields.get("group") == group
            and s.fields.get("generation") == generation
            and s.fields.get("option") == "start-fetcher"
        ]
        formed_s = max(applied) - began
        print(f"  {n} consumers formed the group in {formed_s:.2f} s (generation {generation})", flush=True)
        for trial in range(trials):
            newcomer = rebalance_consumer(env, group, topic)
            try:
                since = env.recorder.mark()
                called = time.monotonic()
                newcomer.start()
                join = measure(
                    env,
                    group,
                    [*members, newcomer],
                    since,
                    kind="join",
                    trial=trial,
                    trigger=("consumer.registered", newcomer.consumer_id),
                    called_at=called,
                    timeout=timeout,
                )
                transitions.append(join)
                since = env.recorder.mark()
                called = time.monotonic()
                newcomer.close(timeout=5.0)
                leave = measure(
                    env,
                    group,
                    members,
                    since,
                    kind="leave",
                    trial=trial,
                    trigger=("consumer.deregistered", newcomer.consumer_id),
                    called_at=called,
                    timeout=timeout,
                )
                transitions.append(leave)
            finally:
                newcomer.close(timeout=5.0)
            print(
                f"  N={n} trial {trial}: join {join.latency_ms:8.1f} ms ({join.attempts} rebalance), "
                f"leave {leave.latency_ms:8.1f} ms ({leave.attempts} rebalance)",
                flush=True,
            )
    finally:
        close_all(members)
    return transitions, formed_s


# --- output -----------------------------------------------------------------------------------------------------


def print_floor(floor: dict[str, dict[str, float]]) -> None:
    print("\nZooKeeper round trips (same server, one session, sequential)")
    print(f"{'operation':<18} {'n':>5} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8}")
    for name, key in (("create + delete", "create_delete_ms"), ("exists", "exists_ms")):
        s = floor[key]
        print(f"{name:<18} {s['n']:>5} {s['p50']:>8.2f} {s['p95']:>8.2f} {s['max']:>8.2f}")


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


BREAKDOWN = (
    "watch_ms",
    "plan_ms",
    "stop_ms",
    "stop_first_ms",
    "stop_last_ms",
    "start_ms",
    "start_first_ms",
    "spread_ms",
    "coordinator_ms",
)


def rebalance_summary(transitions: list[Transition]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for n in sorted({t.consumers for t in transitions}):
        for kind in ("join", "leave"):
            group = [t for t in transitions if t.consumers == n and t.kind == kind]
            if not group:
                continue
            lat = [t.latency_ms for t in group]
            row: dict[str, Any] = {
                "consumers": n,
                "members_after": n + 1 if kind == "join" else n,
                "kind": kind,
                "trials": len(group),
                "latency_ms": summary(lat),
                "from_call_ms": summary([t.from_call_ms for t in group]),
                "rebalances": sum(t.attempts for t in group),
            }
            for key in BREAKDOWN:
                row[f"{key}_p50"] = round(percentile([getattr(t, key) for t in group], 0.5), 2)
            out.append(row)
    return out


def print_rebalance(summary_rows: list[dict[str, Any]], formed: dict[int, float]) -> None:
    print(
        f"\nRebalance latency over {REBALANCE_PARTITIONS} partitions (ms; trigger -> every consumer fetching its share)"
    )
    header = (
        f"{'N':>3} {'event':<12} {'trials':>6} {'p50':>7} {'p95':>7} {'max':>7} {'rebal':>5} | "
        f"{'watch':>5} {'plan':>5} | {'stop':>6} {'1st':>5} {'last':>6} | {'start':>6} {'1st':>6} | {'coord':>6}"
    )
    print(header)
    print("-" * len(header))
    for r in summary_rows:
        lat = r["latency_ms"]
        event = f"join ->{r['members_after']}" if r["kind"] == "join" else f"leave ->{r['members_after']}"
        print(
            f"{r['consumers']:>3} {event:<12} {r['trials']:>6} {lat['p50']:>7.1f} {lat['p95']:>7.1f} "
            f"{lat['max']:>7.1f} {r['rebalances']:>5} | {r['watch_ms_p50']:>5.1f} {r['plan_ms_p50']:>5.1f} | "
            f"{r['stop_ms_p50']:>6.1f} {r['stop_first_ms_p50']:>5.1f} {r['stop_last_ms_p50']:>6.1f} | "
            f"{r['start_ms_p50']:>6.1f} {r['start_first_ms_p50']:>6.1f} | {r['coordinator_ms_p50']:>6.1f}"
        )
    print(
        "p50/p95/max: trigger (member znode created / deleted) -> the last consumer applied the start-fetcher.\n"
        "Breakdown, medians: watch = trigger -> rebalance requested; plan = requested -> started; stop = started ->\n"
        "barrier (1st / last: -> the first / last consumer applied its stop-fetcher); start = barrier -> the last\n"
        "consumer applied its start-fetcher (1st: -> the first did); coord = requested -> completed (the\n"
        "coordinator's own latency: it ends when it has seen every start acknowledged)."
    )
    for n, seconds in sorted(formed.items()):
        print(f"(forming the group of {n}, from the first start() to the last start applied: {seconds:.2f} s)")


# --- main -------------------------------------------------------------------------------------------------------


def parse_consumers(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a comma-separated list of integers, got {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"consumer counts must be positive, got {text!r}")
    return values


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--records", type=int, default=1_000_000, help="records of the throughput topic (1000000)")
    parser.add_argument("--trials", type=int, default=5, help="joins (and leaves) per group size (5)")
    parser.add_argument("--consumers", type=parse_consumers, default=[10, 50], help="group sizes (10,50)")
    parser.add_argument("--repeats", type=int, default=2, help="runs per throughput row, the fastest counts (2)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"JSON results (default {DEFAULT_OUT})")
    parser.add_argument("--dir", type=Path, default=None, help="where to put the logs (default: a temp dir)")
    parser.add_argument("--zk-no-fsync", action="store_true", help="run ZooKeeper with forceSync=no")
    args = parser.parse_args(argv)
    if args.records < THROUGHPUT_PARTITIONS * APPEND_BATCH:
        parser.error(f"--records must be at least {THROUGHPUT_PARTITIONS * APPEND_BATCH}")
    if args.trials < 1 or args.repeats < 1:
        parser.error("--trials and --repeats must be at least 1")
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("kazoo").setLevel(logging.ERROR)  # connection chatter while 50 sessions close

    began = time.monotonic()
    root = Path(tempfile.mkdtemp(prefix="consumer-bench-", dir=args.dir))
    transitions: list[Transition] = []
    formed: dict[int, float] = {}
    try:
        with ExitStack() as stack:
            env = open_env(stack, root, fsync=not args.zk_no_fsync)
            # Closed first at the end: the coordinator's "resigns: broker stopping" is expected then.
            stack.callback(logging.getLogger("zkcoord.coordinator").setLevel, logging.ERROR)
            print("ZooKeeper round trips...", flush=True)
            floor = zk_floor(env.admin, ZK_FLOOR_SAMPLES)
            print("Throughput...", flush=True)
            rows = throughput(env, args.records, args.repeats)
            print("Rebalance latency...", flush=True)
            topic = "rebalance"
            env.topics.create(topic, REBALANCE_PARTITIONS)
            fill(root, topic, REBALANCE_PARTITIONS, REBALANCE_PREFILL)
            for n in args.consumers:
                got, formed[n] = rebalance(env, topic, n, args.trials)
                transitions += got
    finally:
        shutil.rmtree(root, ignore_errors=True)

    summary_rows = rebalance_summary(transitions)
    print_floor(floor)
    print_throughput(rows)
    print_rebalance(summary_rows, formed)
    elapsed = time.monotonic() - began
    meta = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "records": rows[0].records,
        "value_bytes": VALUE_BYTES,
        "throughput_partitions": THROUGHPUT_PARTITIONS,
        "repeats": args.repeats,
        "trials": args.trials,
        "consumers": args.consumers,
        "rebalance_partitions": REBALANCE_PARTITIONS,
        "session_timeout_s": SESSION_S,
        "zookeeper_fsync": not args.zk_no_fsync,
        "assignor": CoordinatorConfig().assignor,
        "seconds": round(elapsed, 1),
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "note": (
            "throughput: page cache, fastest of `repeats`, time from the first record returned to the last, "
            "ratio = records/s over the ceiling's; rebalance: one process, consumers not polling, latency from the "
            "member znode's creation/deletion to the last consumer applying the final generation's start-fetcher"
        ),
    }
    result = {
        "meta": meta,
        "zookeeper_floor": floor,
        "throughput": [asdict(r) for r in rows],
        "rebalance": {
            "summary": summary_rows,
            "formed_s": {str(n): round(s, 3) for n, s in formed.items()},
            "transitions": [asdict(t) for t in transitions],
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nwrote {args.out} ({elapsed:.0f} s in all)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
