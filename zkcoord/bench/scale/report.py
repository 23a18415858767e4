"""A scale run's output: the table on stdout and the rows kept in ``bench-results/scale.json``."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import statistics
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from zkcoord.bench.common import envelope, write_document
from zkcoord.bench.scale.params import GOAL_S, Result

FAILOVER_ROWS = (
    ("failover: SIGKILL -> old session expired (znode deleted)", "kill_to_expiry_s"),
    ("failover: expiry -> new coordinator elected", "expiry_to_elected_s"),
    ("failover: elected -> every group listed and watched", "elected_to_groups_listed_s"),
    ("failover: elected -> first group re-examined", "elected_to_first_examined_s"),
    ("failover: elected -> every group re-examined", "elected_to_all_examined_s"),
    ("failover: TOTAL expiry -> every group re-examined", "expiry_to_all_examined_s"),
    ("failover: TOTAL expiry -> every group STABLE again", "expiry_to_stable_again_s"),
    ("failover: expiry -> new coordinator idle", "expiry_to_idle_s"),
    ("  examinations in the new term", "examinations"),
    ("  groups rebalanced by the new coordinator", "groups_rebalanced"),
    ("  rebalances it completed", "rebalances_completed"),
    ("  commands consumers got from it", "commands_consumers_got"),
    ("  groups not STABLE with all members at the end", "groups_not_stable_at_end"),
    ("  load average (1 min) at the kill", "loadavg_1min_at_kill"),
)


def table(result: Result) -> str:
    p, f, runs = result.params, result.formation, result.failovers
    s = result.swarm.get("counters", {})
    width = 58
    heads = "".join(f"{'#' + str(i + 1):>8}" for i in range(len(runs))) + f"{'median':>9}"
    lines = [
        f"scale: {p['groups']} groups, {p['consumers']} consumers ({p['consumers'] // p['groups']} per group, "
        f"{p['processes']} swarm processes), 1 topic of {p['partitions']} partitions; broker session "
        f"{p['session_timeout_s']:g} s, consumer session {p['consumer_session_timeout_s']:g} s, "
        f"ZooKeeper fsync {'on' if p['zk_fsync'] else 'off'}",
        "",
        f"{'formation':<{width}} {'seconds':>9}",
        "-" * (width + 10),
        f"{'swarms started -> every session registered':<{width}} {f['sessions_registered_s']:>9.2f}",
        f"{'swarms started -> every group STABLE':<{width}} {f['groups_stable_s']:>9.2f}",
        f"{'  rebalances completed / aborted attempts / retried / failed':<{width}} {f['rebalances_completed']:>4} / "
        f"{f['attempts_aborted']} / {f['attempts_retried']} / {f['rebalances_failed']}",
        f"{'  rebalance latency p50 / p95 / max (ms)':<{width}} "
        f"{f['rebalance_latency_ms_p50']} / {f['rebalance_latency_ms_p95']} / {f['rebalance_latency_ms_max']}",
        f"{'  load average (1 min) at the start':<{width}} {f['loadavg_1min_at_start']:>9.2f}",
        "",
        f"{'failover (seconds unless counted)':<{width}}{heads}",
        "-" * (width + len(heads)),
    ]
    for label, key in FAILOVER_ROWS:
        values = [r.get(key) for r in runs]
        numbers = [float(v) for v in values if isinstance(v, int | float)]
        cells = "".join(f"{_cell(v):>8}" for v in values)
        middle = statistics.median(numbers) if numbers else None
        if middle is not None and all(isinstance(v, int) for v in values) and middle == int(middle):
            middle = int(middle)
        median = f"{_cell(middle):>9}" if middle is not None else ""
        lines.append(f"{label:<{width}}{cells}{median}")
    totals = [r["expiry_to_stable_again_s"] for r in runs]
    verdict = "met" if statistics.median(totals) < GOAL_S else "NOT met"
    lines.append(f"{'goal: expiry -> every group STABLE again under ' + f'{GOAL_S:g} s (median)':<{width}}{verdict:>8}")
    for i, r in enumerate(runs):
        reasons = ", ".join(f"{n} x {reason!r}" for reason, n in r["rebalance_reasons"].items()) or "none"
        planned = ", ".join(f"{n} with {k} partitions" for k, n in r["rebalance_partitions_planned"].items())
        lines.append(f"  #{i + 1} rebalance reasons: {reasons}" + (f"; planned: {planned}" if planned else ""))
    lines += [
        "",
        *probe_lines(result.probe),
        f"{'consumer sessions expired / reconnects (whole run)':<{width}} "
        f"{s.get('sessions_expired', 0):>4} / {s.get('reconnects', 0)}",
    ]
    return "\n".join(lines)


def _cell(value: object) -> str:
    if isinstance(value, bool) or value is None:
        return "-" if value is None else str(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


def probe_lines(probe: dict[str, Any]) -> list[str]:
    if not probe:
        return []
    n = probe["necessary_one_at_a_time"], probe["necessary_pipelined"]
    return [
        f"{'probe (this process, same loaded cluster, after the failovers)':<58} {'seconds':>9}",
        "-" * 68,
        f"{'probe: one ZooKeeper round trip (exists, median ms)':<58} {probe['round_trip_ms']:>9.3f}",
        f"{'probe: per read in a pipelined burst, kazoo (us)':<58} {probe['kazoo_us_per_pipelined_read']:>9.1f}"
        f"   ({probe['pipelined_reads']} reads)",
        f"{'probe: per read in a pipelined burst, asyncio client (us)':<58} "
        f"{probe['asyncio_us_per_pipelined_read']:>9.1f}",
        f"{'probe: read + plan every group, one group at a time':<58} {probe['examine_one_at_a_time_s']:>9.2f}"
        f"   ({probe['examine_one_at_a_time_ms_per_group']:.2f} ms/group)",
        f"{'probe: read + plan every group, pipelined across groups':<58} {probe['examine_pipelined_s']:>9.2f}",
        f"{'  groups the probes found needing a rebalance':<58} {n[0]:>4} / {n[1]}",
        "",
    ]


def save(result: Result, out: Path) -> dict[str, Any]:
    """Add ``result``'s row to the document in ``out`` (kept if it is one), write it back and return it.

    Rows are keyed by configuration, so a small and a full run sit side by side.  :raises BenchError: unwritable.
    """
    document: dict[str, Any] = envelope("scale", {"meta": {}, "runs": {}})
    with contextlib.suppress(OSError, ValueError):
        loaded = json.loads(out.read_text())
        if isinstance(loaded, dict) and isinstance(loaded.get("runs"), dict):
            document = envelope("scale", loaded)
    document["meta"] = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "note": "one machine: ZooKeeper, two brokers, the swarm processes and this command share its CPUs; "
        "intervals on CLOCK_MONOTONIC across processes (journal mono stamps)",
    }
    document["runs"][result.key] = {"when": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **asdict(result)}
    write_document(out, document)
    return document
