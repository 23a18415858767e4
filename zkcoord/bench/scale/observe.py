"""Watching a scale run from outside: the brokers' journals as they grow, polls with deadlines, group states."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from zkcoord.bench.scale.params import WORK_EVENTS, say
from zkcoord.errors import CodecError
from zkcoord.layout import paths
from zkcoord.layout.group_state import GroupPhase, GroupState
from zkcoord.testbed.procs import ProcessError
from zkcoord.zk import ZkClient


class JournalTail:
    """Follows one process's journal file: :meth:`poll` returns the events appended since the last call."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._rest = b""
        self.events: list[dict[str, Any]] = []

    def poll(self) -> list[dict[str, Any]]:
        try:
            with self.path.open("rb") as f:
                f.seek(self._offset)
                chunk = f.read()
        except FileNotFoundError:
            return []
        self._offset += len(chunk)
        lines = (self._rest + chunk).split(b"\n")
        self._rest = lines.pop()
        new = []
        for line in lines:
            with contextlib.suppress(ValueError):
                new.append(json.loads(line))
        self.events += new
        return new


def journal_of(journal_dir: Path, broker_id: int, pid: int) -> Path:
    return journal_dir / f"broker-{broker_id}.{pid}.jsonl"


def percentile(values: list[float], q: float) -> float | None:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1) if ordered else None


def formation_summary(events: list[dict[str, Any]]) -> dict[str, Any]:
    def count(kind: str) -> int:
        return sum(1 for e in events if e["ev"] == kind)

    latencies = [float(e["latency_ms"]) for e in events if e["ev"] == "rebalance.completed"]
    return {
        "rebalances_started": count("rebalance.started"),
        "rebalances_completed": count("rebalance.completed"),
        "rebalances_skipped": count("rebalance.skipped"),
        "attempts_aborted": count("rebalance.aborted"),
        "attempts_retried": count("rebalance.retrying"),
        "rebalances_failed": count("rebalance.failed"),
        "commands_sent": count("command.sent"),
        "rebalance_latency_ms_p50": percentile(latencies, 0.5),
        "rebalance_latency_ms_p95": percentile(latencies, 0.95),
        "rebalance_latency_ms_max": percentile(latencies, 1.0),
    }


def quiet_since(tail: JournalTail) -> float:
    """Seconds since the last work event in ``tail``'s journal (inf if none)."""
    tail.poll()
    work = [e["mono"] for e in tail.events if e["ev"] in WORK_EVENTS]
    return (time.monotonic_ns() - max(work)) / 1e9 if work else float("inf")


def wait_for(
    condition: Callable[[], bool],
    timeout: float,
    what: str,
    *,
    interval: float = 0.05,
    progress: Callable[[], str] | None = None,
    every: float = 10.0,
    check: Callable[[], None] | None = None,
) -> None:
    """Poll ``condition`` until true; raise :class:`ProcessError` after ``timeout``; report progress now and then."""
    start = time.monotonic()
    deadline = start + timeout
    next_report = start + every
    while not condition():
        now = time.monotonic()
        if check is not None:
            check()
        if now >= deadline:
            raise ProcessError(
                f"timed out after {timeout:g} s waiting for {what}" + (f" ({progress()})" if progress else "")
            )
        if progress is not None and now >= next_report:
            next_report += every
            say(f"  waiting for {what}: {progress()} ({now - start:.0f} s)")
        time.sleep(interval)


def group_states(zk: ZkClient, groups: list[str]) -> dict[str, GroupState | None]:
    out: dict[str, GroupState | None] = {}
    for group, got in zip(groups, zk.get_many([paths.group_state(g) for g in groups]), strict=True):
        state = None
        if got is not None:
            with contextlib.suppress(CodecError):
                state = GroupState.decode(got[0])
        out[group] = state
    return out


def stable_count(zk: ZkClient, groups: list[str], members: int) -> int:
    return sum(
        1
        for s in group_states(zk, groups).values()
        if s is not None and s.phase is GroupPhase.STABLE and len(s.members) == members
    )
