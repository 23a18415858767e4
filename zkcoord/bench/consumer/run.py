"""``python -m benchmarks.consumerbench``: see the package's docstring."""

from __future__ import annotations

import argparse
import json
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

from zkcoord.coordinator import CoordinatorConfig

from . import __doc__ as package_doc
from .common import (
    APPEND_BATCH,
    DEFAULT_OUT,
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
from .rebalance import Transition, print_rebalance, rebalance, rebalance_summary
from .throughput import print_throughput, throughput


def print_floor(floor: dict[str, dict[str, float]]) -> None:
    print("\nZooKeeper round trips (same server, one session, sequential)")
    print(f"{'operation':<18} {'n':>5} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8}")
    for name, key in (("create + delete", "create_delete_ms"), ("exists", "exists_ms")):
        s = floor[key]
        print(f"{name:<18} {s['n']:>5} {s['p50']:>8.2f} {s['p95']:>8.2f} {s['max']:>8.2f}")


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
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.consumerbench", description=package_doc.split("\n\n")[0] if package_doc else None
    )
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
