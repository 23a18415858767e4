"""A run's journals as events, and the pure measurements over them.

:class:`JournalTail` reads the journal directory incrementally (every process appends to its own file, whole lines
only; a line still being written is kept for the next read) into :class:`Event` s.  :func:`outage` replays
``fetch.started`` / ``fetch.stopped`` over who fetched what and measures the interruptions; :func:`count_events` and
:func:`first_ts` look events up.  Pure, but for :class:`JournalTail`'s reads.

Timestamps are the journals' wall-clock milliseconds (``ts``): every process runs on this machine, so they share one
clock.  Events are ordered by ``(ts, pid, seq)``: exact within a process, to the millisecond across processes.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True, slots=True)
class Event:
    """One journal line: the core fields the benchmark uses, and the event's own fields."""

    ts: int
    pid: int
    seq: int
    ev: str
    fields: dict[str, Any]

    @property
    def group(self) -> str | None:
        group = self.fields.get("group")
        return group if isinstance(group, str) else None

    def sort_key(self) -> tuple[int, int, int]:
        return (self.ts, self.pid, self.seq)


def parse_line(raw: bytes) -> Event | None:
    """An :class:`Event` from one complete journal line, or ``None`` for a line that is not a valid event."""
    try:
        obj = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    if not isinstance(obj, dict):
        return None
    try:
        ts, pid, seq, ev = int(obj.pop("ts")), int(obj.pop("pid")), int(obj.pop("seq")), str(obj.pop("ev"))
    except (KeyError, TypeError, ValueError):
        return None
    return Event(ts, pid, seq, ev, obj)


class JournalTail:
    """Reads the new complete lines of every ``*.jsonl`` file in a directory, file by file, on each :meth:`read`."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._offsets: dict[Path, int] = {}
        self._partial: dict[Path, bytes] = {}
        self.malformed = 0

    def read(self) -> list[Event]:
        """Every event appended since the last call, sorted by ``(ts, pid, seq)``."""
        out: list[Event] = []
        for path in sorted(self.directory.glob("*.jsonl")):
            try:
                size = path.stat().st_size
            except FileNotFoundError:
                continue
            offset = self._offsets.get(path, 0)
            if size <= offset:
                continue
            fd = os.open(path, os.O_RDONLY)
            try:
                data = os.pread(fd, size - offset, offset)
            finally:
                os.close(fd)
            self._offsets[path] = offset + len(data)
            lines = (self._partial.pop(path, b"") + data).split(b"\n")
            if lines[-1]:
                self._partial[path] = lines[-1]
            for raw in lines[:-1]:
                event = parse_line(raw)
                if event is None:
                    self.malformed += 1
                else:
                    out.append(event)
        out.sort(key=Event.sort_key)
        return out


# --- measurements of one change (pure) ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Outage:
    """How fetching was interrupted between two instants (milliseconds).

    :ivar stw_ms: the longest interval during which no partition of the group was fetched (0 if there was none).
    :ivar gap_ms: the longest interval during which one partition was not fetched.
    :ivar unfetched_ms: the sum over partitions of the time each was not fetched (partition-milliseconds).
    """

    stw_ms: int
    gap_ms: int
    unfetched_ms: int


def outage(
    initial: Sequence[set[tuple[str, str]]], events: Iterable[Event], topic: str, start_ms: int, end_ms: int
) -> Outage:
    """Replay ``fetch.started`` / ``fetch.stopped`` of ``topic`` over ``initial`` (who fetched what at ``start_ms``)
    and measure the interruptions within ``[start_ms, end_ms]``.  Events outside the window are clipped to it."""
    owners = [set(s) for s in initial]
    fetched = sum(1 for s in owners if s)
    since: list[int | None] = [None if s else start_ms for s in owners]
    longest = [0] * len(owners)
    unfetched = 0
    zero_since: int | None = start_ms if fetched == 0 else None
    stw = 0

    def close_gap(p: int, at: int) -> None:
        nonlocal unfetched
        began = since[p]
        if began is not None:
            length = max(0, at - began)
            longest[p] = max(longest[p], length)
            unfetched += length
            since[p] = None

    for event in sorted(events, key=Event.sort_key):
        if event.ev not in ("fetch.started", "fetch.stopped") or event.fields.get("topic") != topic:
            continue
        p = int(event.fields["partition"])
        if not 0 <= p < len(owners):
            continue
        # A fetch stopped at its lease's deadline carries it (at_ms): fetching ended then, not when it was noticed.
        ended = event.fields.get("at_ms") if event.ev == "fetch.stopped" else None
        at = min(max(ended if isinstance(ended, int) else event.ts, start_ms), end_ms)
        holder = (str(event.fields["consumer"]), str(event.fields["thread"]))
        was = bool(owners[p])
        if event.ev == "fetch.started":
            owners[p].add(holder)
        else:
            owners[p].discard(holder)
        now = bool(owners[p])
        if was and not now:
            since[p] = at
            fetched -= 1
            if fetched == 0:
                zero_since = at
        elif now and not was:
            close_gap(p, at)
            if fetched == 0 and zero_since is not None:
                stw = max(stw, at - zero_since)
                zero_since = None
            fetched += 1
    for p in range(len(owners)):
        close_gap(p, end_ms)
    if zero_since is not None:
        stw = max(stw, end_ms - zero_since)
    return Outage(stw_ms=stw, gap_ms=max(longest, default=0), unfetched_ms=unfetched)


def count_events(events: Iterable[Event], *names: str) -> int:
    wanted = set(names)
    return sum(1 for e in events if e.ev in wanted)


def first_ts(events: Iterable[Event], name: str, **match: object) -> int | None:
    for e in events:
        if e.ev == name and all(e.fields.get(k) == v for k, v in match.items()):
            return e.ts
    return None
