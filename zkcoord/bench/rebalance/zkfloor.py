"""The ZooKeeper floor of a run, and the server's own request counters.

**Floor.**  Two sessions of this process on the run's server, one znode under a fresh persistent parent:

* *write*: the round trip of one write (a ``create`` of a persistent znode, then its ``delete``; each is a sample);
* *watch*: a write seen through a watch: the second session sets a watch on the znode (``exists`` with a watcher),
  the first writes (creates, then deletes it), and the time runs from the write call to the watch callback in the
  second session.  Every coordination step of a rebalance (a member znode appears, a command is written, a command
  is deleted) reaches the other side this way, so it is the unit a rebalance's latency is counted in.

**A warm server.**  The floor is measured after :data:`WARMUP_PAIRS` unmeasured create/delete pairs.  A JVM just
started interprets and compiles its hot paths for its first few hundred requests: on a 2-core machine, a fresh
server's write took 1.6-2.1 ms for the first 100 pairs and settled at about 1.0 ms after 300; a floor measured cold
flattered every ratio to it by 1.5-2x.  The server the protocols meet has served their formation, so it is warm.

**CPU per watched write.**  When the server's pid is known, the floor also reports the CPU time one watched write
costs the server (the write, the ``exists`` that set the watch, and the notification), and costs this process's two
kazoo sessions, measured over the warm pairs (``/proc``'s clock ticks are 10 ms: hundreds of pairs keep the
rounding under a few per cent).  On a machine with few cores these bound a protocol's latency: ``n`` requests cannot
finish in less than their CPU time divided by the cores, whatever their round trips (``docs/benchmarks.md``).

**Counters.**  ``mntr``'s ``zk_cnt_readlatency`` and ``zk_cnt_updatelatency`` count every request the server
processed, by whether it is a read or a write (a ``multi`` is one write request; pings count as reads; session
creation and close count as writes).  ``zk_packets_received`` counts packets, including the ``mntr`` command itself.
"""

from __future__ import annotations

import statistics
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any

from zkcoord.bench.rebalance.cluster import own_cpu_ms, process_cpu_ms_without
from zkcoord.errors import ZkCoordError, ZkServerError
from zkcoord.zk import ZkAddress, ZkClient, ZkConfig
from zkcoord.zkserver import mntr

#: Unmeasured create/delete pairs first: a fresh server's JVM needs about 300 to compile its hot paths (see above).
WARMUP_PAIRS = 400
#: Of which the last ones are in the CPU measurement (from pair 300 on: warm by then), beside the measured pairs.
CPU_WARM_PAIRS = 100
#: Reads (``get``) after the pairs, for the CPU time of a read.
CPU_READS = 400


class FloorError(ZkCoordError):
    """The floor could not be measured (a watch never fired)."""


@dataclass(frozen=True, slots=True)
class Floor:
    """Medians and percentiles, in milliseconds, of the two floor measurements; and the CPU time one watched write,
    and one read, cost the server and the client (ms; None when the server's pid is not known, or for a short
    warm-up)."""

    samples: int
    write_ms: dict[str, float]
    watch_ms: dict[str, float]
    server_cpu_ms: float | None = None
    client_cpu_ms: float | None = None
    server_cpu_read_ms: float | None = None
    client_cpu_read_ms: float | None = None

    @property
    def write(self) -> float:
        return self.write_ms["p50"]

    @property
    def watch(self) -> float:
        return self.watch_ms["p50"]

    def as_dict(self) -> dict[str, Any]:
        return {
            "samples": self.samples,
            "write_ms": self.write_ms,
            "watch_ms": self.watch_ms,
            "server_cpu_ms_per_watched_write": self.server_cpu_ms,
            "client_cpu_ms_per_watched_write": self.client_cpu_ms,
            "server_cpu_ms_per_read": self.server_cpu_read_ms,
            "client_cpu_ms_per_read": self.client_cpu_read_ms,
        }


def stats(values: list[float]) -> dict[str, float]:
    """``n``, ``p50``, ``p95``, ``max`` and ``mean`` of a non-empty list (nearest-rank percentiles)."""
    ordered = sorted(values)

    def rank(q: float) -> float:
        return ordered[max(0, min(len(ordered) - 1, round(q * len(ordered) + 0.4999) - 1))]

    return {
        "n": len(ordered),
        "p50": round(statistics.median(ordered), 3),
        "p95": round(rank(0.95), 3),
        "max": round(ordered[-1], 3),
        "mean": round(statistics.fmean(ordered), 3),
    }


def measure_floor(
    hosts: str,
    samples: int = 50,
    warmup: int = WARMUP_PAIRS,
    timeout_s: float = 5.0,
    server_pid: int | None = None,
) -> Floor:
    """``samples`` create/delete pairs (each write a sample of both measurements) after ``warmup`` unmeasured ones;
    the CPU time per watched write over the measured pairs and the last :data:`CPU_WARM_PAIRS` of the warm-up, then
    per read over :data:`CPU_READS` reads (None if that is fewer than 100 pairs in all; the server's also without
    ``server_pid``).  Blocks for the whole measurement: about 2 ms per pair.

    :raises FloorError: a watch did not fire within ``timeout_s``.
    :raises ZkError: ZooKeeper failed.
    """
    writer = ZkClient(ZkConfig.from_string(hosts), name="bench-floor-w").start()
    watcher = ZkClient(ZkConfig.from_string(hosts), name="bench-floor-r").start()
    base = f"/zkcoord-bench-floor-{uuid.uuid4().hex[:8]}"
    node = f"{base}/n"
    writes: list[float] = []
    watches: list[float] = []
    cpu_from = max(0, warmup - CPU_WARM_PAIRS)
    cpu_at: tuple[float | None, float] | None = None
    try:
        writer.ensure_path(base)
        for i in range(warmup + samples):
            if i == cpu_from:
                cpu_at = (None if server_pid is None else process_cpu_ms_without(server_pid), own_cpu_ms())
            for op in ("create", "delete"):
                fired = threading.Event()
                seen: list[float] = []

                def on_watch(_event: object, seen: list[float] = seen, fired: threading.Event = fired) -> None:
                    seen.append(time.perf_counter())
                    fired.set()

                watcher.exists(node, watch=on_watch)
                began = time.perf_counter()
                if op == "create":
                    writer.create(node, b"x")
                else:
                    writer.delete(node)
                returned = time.perf_counter()
                if not fired.wait(timeout_s):
                    raise FloorError(f"a watch on {node} did not fire within {timeout_s:g} s of the {op}")
                if i >= warmup:
                    writes.append((returned - began) * 1000)
                    watches.append((seen[0] - began) * 1000)
        server_cpu, client_cpu = _cpu_per_op(cpu_at, server_pid, 2 * (warmup + samples - cpu_from))
        server_read, client_read = None, None
        if server_cpu is not None or client_cpu is not None:
            at = (None if server_pid is None else process_cpu_ms_without(server_pid), own_cpu_ms())
            for _ in range(CPU_READS):
                watcher.get(base)
            server_read, client_read = _cpu_per_op(at, server_pid, CPU_READS)
    finally:
        try:
            writer.delete(base, recursive=True)
        finally:
            watcher.stop()
            writer.stop()
    return Floor(len(writes), stats(writes), stats(watches), server_cpu, client_cpu, server_read, client_read)


def _cpu_per_op(
    at: tuple[float | None, float] | None, server_pid: int | None, ops: int
) -> tuple[float | None, float | None]:
    """CPU ms per operation since the reading ``at`` (server, client); None for either unknown, or for fewer than
    200 operations (the clock ticks are 10 ms)."""
    if at is None or ops < 200:
        return None, None
    server_before, client_before = at
    server_now = None if server_pid is None else process_cpu_ms_without(server_pid)
    server = None if server_now is None or server_before is None else (server_now - server_before) / ops
    client = (own_cpu_ms() - client_before) / ops
    return (None if server is None else round(server, 3)), round(client, 3)


# --- counters -------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Counters:
    """One ``mntr`` reading: requests processed (reads, writes), packets, and when it was taken (monotonic s)."""

    at: float
    reads: int
    writes: int
    packets_received: int
    packets_sent: int

    @property
    def requests(self) -> int:
        return self.reads + self.writes


def mntr_address(hosts: str) -> tuple[str, int]:
    """The first server of a connect string (``mntr`` is asked of one server; the benchmark's has one)."""
    host, port = ZkAddress.parse(hosts).hosts[0]
    return host, port


def read_counters(host: str, port: int) -> Counters:
    """:raises ZkServerError: the server did not answer ``mntr`` (or is not allowed to: ``4lw.commands.whitelist``)."""
    metrics = mntr(host, port)
    at = time.monotonic()
    try:
        return Counters(
            at=at,
            reads=int(float(metrics["zk_cnt_readlatency"])),
            writes=int(float(metrics["zk_cnt_updatelatency"])),
            packets_received=int(float(metrics["zk_packets_received"])),
            packets_sent=int(float(metrics["zk_packets_sent"])),
        )
    except (KeyError, ValueError) as e:
        raise ZkServerError(f"ZooKeeper at {host}:{port} answered mntr without the request counters ({e})") from e


@dataclass(frozen=True, slots=True)
class Delta:
    """Counters between two readings."""

    seconds: float
    reads: int
    writes: int
    packets_received: int

    @property
    def requests(self) -> int:
        return self.reads + self.writes

    @property
    def requests_per_s(self) -> float:
        return self.requests / self.seconds if self.seconds > 0 else 0.0


def delta(before: Counters, after: Counters) -> Delta:
    return Delta(
        seconds=after.at - before.at,
        reads=after.reads - before.reads,
        writes=after.writes - before.writes,
        packets_received=after.packets_received - before.packets_received,
    )
