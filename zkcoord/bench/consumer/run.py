"""``zkcoord bench consumer``: the run (see the package's docstring)."""

from __future__ import annotations

import logging
import os
import platform
import shutil
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import asdict
from pathlib import Path
from typing import Any

from zkcoord.bench.common import BenchError, envelope, write_document
from zkcoord.bench.consumer.common import (
    APPEND_BATCH,
    REBALANCE_PARTITIONS,
    REBALANCE_PREFILL,
    SESSION_S,
    THROUGHPUT_PARTITIONS,
    VALUE_BYTES,
    ZK_FLOOR_SAMPLES,
    fill,
    open_env,
    zk_floor,
)
from zkcoord.bench.consumer.rebalance import Transition, print_rebalance, rebalance, rebalance_summary
from zkcoord.bench.consumer.throughput import print_throughput, throughput
from zkcoord.coordinator import CoordinatorConfig


def print_floor(floor: dict[str, dict[str, float]]) -> None:
    print("\nZooKeeper round trips (same server, one session, sequential)")
    print(f"{'operation':<18} {'n':>5} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8}")
    for name, key in (("create + delete", "create_delete_ms"), ("exists", "exists_ms")):
        s = floor[key]
        print(f"{name:<18} {s['n']:>5} {s['p50']:>8.2f} {s['p95']:>8.2f} {s['max']:>8.2f}")


def bench_consumer(
    *,
    records: int,
    trials: int,
    consumers: tuple[int, ...],
    repeats: int,
    out: Path,
    scratch: Path | None = None,
    zk_fsync: bool = True,
) -> dict[str, Any]:
    """Run the benchmark in this thread (ZooKeeper and a broker started here), print its tables, write ``out``.

    Blocks for the whole run; every process it starts is stopped before it returns or raises.
    :raises BenchError: a setting out of range, or the document cannot be written.
    """
    if records < THROUGHPUT_PARTITIONS * APPEND_BATCH:
        raise BenchError(f"--records must be at least {THROUGHPUT_PARTITIONS * APPEND_BATCH}, got {records}")
    if trials < 1 or repeats < 1:
        raise BenchError("--trials and --repeats must be at least 1")
    if not consumers or any(n < 1 for n in consumers):
        raise BenchError(f"--consumers must be positive group sizes, got {consumers}")
    logging.getLogger("kazoo").setLevel(logging.ERROR)  # connection chatter while 50 sessions close

    began = time.monotonic()
    root = Path(tempfile.mkdtemp(prefix="consumer-bench-", dir=scratch))
    transitions: list[Transition] = []
    formed: dict[int, float] = {}
    coordinator_log = logging.getLogger("zkcoord.coordinator")
    coordinator_level = coordinator_log.level
    try:
        with ExitStack() as stack:
            env = open_env(stack, root, fsync=zk_fsync)
            # Closed first at the end: the coordinator's "resigns: broker stopping" is expected then.
            stack.callback(coordinator_log.setLevel, logging.ERROR)
            print("ZooKeeper round trips...", flush=True)
            floor = zk_floor(env.admin, ZK_FLOOR_SAMPLES)
            print("Throughput...", flush=True)
            rows = throughput(env, records, repeats)
            print("Rebalance latency...", flush=True)
            topic = "rebalance"
            env.topics.create(topic, REBALANCE_PARTITIONS)
            fill(root, topic, REBALANCE_PARTITIONS, REBALANCE_PREFILL)
            for n in consumers:
                got, formed[n] = rebalance(env, topic, n, trials)
                transitions += got
    finally:
        coordinator_log.setLevel(coordinator_level)
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
        "repeats": repeats,
        "trials": trials,
        "consumers": list(consumers),
        "rebalance_partitions": REBALANCE_PARTITIONS,
        "session_timeout_s": SESSION_S,
        "zookeeper_fsync": zk_fsync,
        "assignor": CoordinatorConfig().assignor,
        "seconds": round(elapsed, 1),
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "note": (
            "throughput: page cache, fastest of `repeats`, time from the first record returned to the last, "
            "ratio = records/s over the ceiling's; rebalance: one process, consumers not polling, latency from the "
            "member znode's creation/deletion to the last consumer applying the final generation's start-fetcher"
        ),
    }
    document = envelope(
        "consumer",
        {
            "meta": meta,
            "zookeeper_floor": floor,
            "throughput": [asdict(r) for r in rows],
            "rebalance": {
                "summary": summary_rows,
                "formed_s": {str(n): round(s, 3) for n, s in formed.items()},
                "transitions": [asdict(t) for t in transitions],
            },
        },
    )
    write_document(out, document)
    print(f"\nwrote {out} ({elapsed:.0f} s in all)")
    return document
