"""The ZooKeeper floor of a run, and the server's own request counters.

**Floor.**  Two sessions of this process on the run's server, one znode under a fresh persistent parent:

* *write*: the round trip of one write (a ``create`` of a persistent znode, then its ``delete``; each is a sample);
* *watch*: a write seen through a watch: the second session sets a watch on the znode (``exists`` with a watcher),
  the first writes (creates, then deletes it), and the time runs from the write call to the watch callback in the
  second session.  Every coordination step of a rebalance (a member znode appears, a command is written, a command
  is deleted) reaches the other side this way, so it is the unit a rebalance's latency is counted in.

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

from zkcoord.errors import ZkCoordError, ZkServerError
from zkcoord.zk import ZkAddress, ZkClient, ZkConfig
from zkcoord.zkserver import mntr


class FloorError(ZkCoordError):
    """The floor could not be measured (a watch never fired)."""


@dataclass(frozen=True, slots=True)
class Floor:
    """Medians and percentiles, in milliseconds, of the two floor measurements."""

    samples: int
    write_ms: dict[str, float]
    watch_ms: dict[str, float]

    @property
    def write(self) -> float:
        return self.write_ms["p50"]

    @property
    def watch(self) -> float:
        return self.watch_ms["p50"]

    def as_dict(self) -> dict[str, Any]:
        return {"samples": self.samples, "write_ms": self.write_ms, "watch_ms": self.watch_ms}


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


def measure_floor(hosts: str, samples: int = 50, warmup: int = 10, timeout_s: float = 5.0) -> Floor:
    """``samples`` create/delete pairs (each write a sample of both measurements) after ``warmup`` unmeasured ones.

    :raises FloorError: a watch did not fire within ``timeout_s``.
    :raises ZkError: ZooKeeper failed.
    """
    writer = ZkClient(ZkConfig.from_string(hosts), name="bench-floor-w").start()
    watcher = ZkClient(ZkConfig.from_string(hosts), name="bench-floor-r").start()
    base = f"/zkcoord-bench-floor-{uuid.uuid4().hex[:8]}"
    node = f"{base}/n"
    writes: list[float] = []
    watches: list[float] = []
    try:
        writer.ensure_path(base)
        for i in range(warmup + samples):
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
    finally:
        try:
            writer.delete(base, recursive=True)
        finally:
            watcher.stop()
            writer.stop()
    return Floor(samples=len(writes), write_ms=stats(writes), watch_ms=stats(watches))


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
