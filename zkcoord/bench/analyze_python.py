"""The single-process pass of ``zkcoord bench analyze``: the S1-S5 verdict counts (``docs/analysis.md``) of one run's
journal, computed by one Python process with the reference reader :func:`zkcoord.runtime.journal.read_journal`,
dictionaries and sorted lists -- the baseline the Spark analysis is timed against, and must agree with
(:mod:`zkcoord.bench.analyze`).  Pure: reads the journal, returns the counts; any thread.
"""

from __future__ import annotations

import bisect
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zkcoord.runtime.journal import read_journal


def _merge(spans: list[tuple[int, int]]) -> tuple[list[list[int]], list[tuple[int, int]]]:
    """Islands of ranges and the portions that overlap an earlier range (sorted sweep)."""
    islands: list[list[int]] = []
    overlaps: list[tuple[int, int]] = []
    top = None
    for first, last in sorted(spans):
        if top is not None and first <= top:
            overlaps.append((first, min(last, top)))
        if top is None or first > top + 1:
            islands.append([first, last])
        else:
            islands[-1][1] = max(islands[-1][1], last)
        top = last if top is None else max(top, last)
    return islands, overlaps


def _minus(a: list[list[int]], b: list[list[int]]) -> int:
    """Offsets of islands ``a`` that islands ``b`` do not cover."""
    covered = 0
    for first, last in a:
        for bf, bl in b:
            lo, hi = max(first, bf), min(last, bl)
            if lo <= hi:
                covered += hi - lo + 1
    return sum(last - first + 1 for first, last in a) - covered


def _asof(markers: list[tuple[int, int]], ts: int) -> int | None:
    """The largest marker value with a time strictly before ``ts`` (markers sorted by time, with running maxima)."""
    i = bisect.bisect_left(markers, (ts, -(1 << 62)))
    return markers[i - 1][1] if i else None


def _running_max(pairs: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out, top = [], None
    for ts, value in sorted(pairs):
        top = value if top is None else max(top, value)
        out.append((ts, top))
    return out


Key = tuple[Any, ...]


@dataclass
class Journal:
    """One run's events, sorted into what the verdict needs."""

    by: dict[str, list[tuple[int, dict[str, Any]]]]
    fetch: dict[Key, list[tuple[int, int, int, str, Any]]]
    consumed: dict[Key, list[tuple[int, int, int, str]]]  # (group, topic, partition) -> (ts, first, last, consumer)
    produced: dict[Key, list[tuple[int, int]]]
    seen: dict[tuple[str, str], int]
    applied: list[tuple[int, int, int, dict[str, Any]]]


def _read(journal: Path) -> Journal:
    j = Journal(defaultdict(list), defaultdict(list), defaultdict(list), defaultdict(list), {}, [])
    for e in read_journal(journal):
        f, ev, ts = e.fields, e.event, e.ts_ms
        if "group" in f and "consumer" in f:
            key = (f["group"], f["consumer"])
            j.seen[key] = max(j.seen.get(key, ts), ts)
        if ev == "produce.batch":
            j.produced[(f["topic"], f["partition"])].append((f["first"], f["last"]))
        elif ev == "records.consumed":
            j.consumed[(f["group"], f["topic"], f["partition"])].append((ts, f["first"], f["last"], f["consumer"]))
        elif ev in ("fetch.started", "fetch.stopped"):
            j.fetch[(f["group"], f["consumer"], f["topic"], f["partition"])].append(
                (ts, e.pid, e.seq, ev, f.get("at_ms"))
            )
        else:
            j.by[ev].append((ts, f))
            if ev == "command.applied":
                j.applied.append((ts, e.pid, e.seq, f))
    return j


def _s1(j: Journal, elected: list[tuple[int, int]]) -> int:
    regressions, top = 0, None
    for _ts, f in sorted(j.by["coordinator.elected"], key=lambda x: (x[0], x[1]["epoch"])):
        regressions += top is not None and f["epoch"] <= top
        top = f["epoch"] if top is None else max(top, f["epoch"])
    return regressions + sum(
        1 for ts, f in j.by["command.sent"] if (m := _asof(elected, ts)) is not None and f["epoch"] < m
    )


def _s2(j: Journal) -> int:
    intervals: dict[Key, list[tuple[int, int, str]]] = defaultdict(list)
    for (group, consumer, topic, partition), evs in j.fetch.items():
        evs.sort(key=lambda x: (x[0], x[1], x[2]))
        for k, (ts, _pid, _seq, ev, _at) in enumerate(evs):
            if ev != "fetch.started":
                continue
            nxt = evs[k + 1] if k + 1 < len(evs) else None
            if nxt is None:
                end = max(j.seen.get((group, consumer), ts), ts)
            else:
                end = int(nxt[4]) if nxt[3] == "fetch.stopped" and nxt[4] is not None else nxt[0]
            intervals[(group, topic, partition)].append((ts, end, consumer))
    overlaps = 0
    own: dict[Key, list[tuple[int, int]]] = defaultdict(list)
    for (group, topic, partition), spans in intervals.items():
        spans.sort()
        for i, (s1, e1, c1) in enumerate(spans):
            own[(group, c1, topic, partition)].append((s1, e1))
            for s2, e2, c2 in spans[i + 1 :]:
                if s2 >= e1:
                    break
                overlaps += c1 != c2 and s1 < e2
    outside = 0
    for mine in own.values():
        mine.sort()
    for (group, topic, partition), deliveries in j.consumed.items():
        for ts, _first, _last, consumer in deliveries:
            mine = own.get((group, consumer, topic, partition), [])
            k = bisect.bisect_right(mine, (ts, 1 << 62)) - 1  # one consumer's intervals of a partition are disjoint
            outside += k < 0 or ts > mine[k][1]
    return overlaps + outside


def _s3(j: Journal, merged: dict[Key, tuple[list[list[int]], list[tuple[int, int]]]]) -> int:
    subs: dict[str, set[str]] = defaultdict(set)
    topics = {t for t, _ in j.produced}
    for _ts, f in j.by["consumer.registered"]:
        for key in f["subscription"]:
            for t in topics:
                match = re.fullmatch(key, t) is not None
                pattern = f["pattern"]
                if {"static": t == key, "white_list": match, "black_list": not match}.get(pattern, False):
                    subs[f["group"]].add(t)
    missing = 0
    for group, wanted in subs.items():
        for (topic, partition), spans in j.produced.items():
            if topic in wanted:
                missing += _minus(_merge(spans)[0], merged.get((group, topic, partition), ([], []))[0])
    return missing


def _s4(j: Journal, merged: dict[Key, tuple[list[list[int]], list[tuple[int, int]]]]) -> int:
    closed = {(f["group"], f["consumer"]) for _ts, f in j.by["consumer.deregistered"]}
    losses: dict[tuple[str, str], list[int]] = defaultdict(list)
    for key in j.seen:
        if key not in closed:
            losses[key].append(1 << 62)
    for ts, f in j.by["consumer.fenced"]:
        losses[(f["group"], f["consumer"])].append(ts)
    commits: dict[Key, list[tuple[int, int]]] = defaultdict(list)
    for ts, f in j.by["offsets.committed"]:
        commits[(f["group"], f["consumer"], f["topic"], f["partition"])].append((ts, f["offset"]))
    tails: dict[Key, list[tuple[int, int]]] = defaultdict(list)
    for (group, topic, partition), deliveries in j.consumed.items():
        for ts, first, last, consumer in deliveries:
            for loss in losses.get((group, consumer), []):
                done = sorted(commits.get((group, consumer, topic, partition), []))
                k = bisect.bisect_right(done, (loss, 1 << 62)) - 1  # the last commit at or before the loss
                lo = max(first, done[k][1]) if k >= 0 else first
                if ts <= loss and lo <= last:
                    tails[(group, topic, partition)].append((lo, last))
    clean = 0
    for key, (_islands, portions) in merged.items():
        dup_islands = _merge(portions)[0]
        clean += _minus(dup_islands, _merge(tails.get(key, []))[0])
    return clean


def _s5(j: Journal) -> int:
    """Applied commands older (epoch or generation) than one the same consumer had applied before."""
    top: dict[tuple[str, str], tuple[int, int]] = {}
    stale = 0
    for _ts, _pid, _seq, f in sorted(j.applied, key=lambda x: x[:3]):
        key = (f["group"], f["consumer"])
        if key in top:
            stale += f["epoch"] < top[key][0] or f["generation"] < top[key][1]
            top[key] = (max(top[key][0], f["epoch"]), max(top[key][1], f["generation"]))
        else:
            top[key] = (f["epoch"], f["generation"])
    return stale


def python_verdict(journal: Path) -> dict[str, int]:
    """S1-S5 counts (docs/analysis.md) in one process: the reference reader, dictionaries and sorted lists."""
    j = _read(journal)
    elected = _running_max([(ts, f["epoch"]) for ts, f in j.by["coordinator.elected"]])
    merged = {k: _merge([(first, last) for _ts, first, last, _c in v]) for k, v in j.consumed.items()}
    return {"S1": _s1(j, elected), "S2": _s2(j), "S3": _s3(j, merged), "S4": _s4(j, merged), "S5": _s5(j)}
