"""The single-process pass of ``zkcoord bench analyze``: the verdict counts (S1-S5, S3-risk, S8: docs/analysis.md)
of one run's journal, computed by one Python process with the reference reader
:func:`zkcoord.runtime.journal.read_journal`, dictionaries and sorted lists -- the baseline the Spark analysis is
timed against, and must agree with
(:mod:`zkcoord.bench.analyze`; ``tests/spark/test_reader_agreement.py``).  Pure: reads the journal, returns the
counts; any thread.

As the Spark analysis, it judges S3 and S4 of a group on its ``records.processed`` ranges if its journal holds any,
else on its ``records.consumed`` ranges; S2 on fetch intervals and ``records.consumed``; S3-risk (what a consumer
with auto-commit off committed before its application processed it) on the commits of groups that journal
``records.processed``.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zkcoord.bench import analyze_regions
from zkcoord.bench.involved import Involved
from zkcoord.bench.spans import asof as _asof
from zkcoord.bench.spans import intersect as _intersect
from zkcoord.bench.spans import merge as _merge
from zkcoord.bench.spans import running_max as _running_max
from zkcoord.bench.spans import subtract as _subtract
from zkcoord.layout import topic_regex
from zkcoord.runtime.journal import ReadStats, read_journal

Key = tuple[Any, ...]
Delivery = tuple[int, int, int, str]  # ts, first, last, consumer

#: A time after every event: the loss point of a consumer that never deregistered (as the Spark analysis).
END_OF_TIME = (1 << 62) - 1
_RANGES = {"produce.batch", "records.consumed", "records.processed"}
_LOSSES = ("consumer.fenced", "consumer.poll_timeout")


@dataclass
class Journal:
    """One run's events, sorted into what the verdict needs."""

    by: dict[str, list[tuple[int, dict[str, Any]]]]
    fetch: dict[Key, list[tuple[int, int, int, str, Any, Any]]]  # ts, pid, seq, ev, at_ms, generation
    consumed: dict[Key, list[Delivery]]  # (group, topic, partition) -> (ts, first, last, consumer)
    processed: dict[Key, list[Delivery]]  # the same, of records.processed
    produced: dict[Key, list[tuple[int, int]]]
    seen: dict[tuple[str, str], int]
    applied: list[tuple[int, int, int, dict[str, Any]]]
    #: command.sent: (ts, role, pid, fields), for the rows of S1
    sent: list[tuple[int, str, int, dict[str, Any]]]
    #: lines the verdict could not use (malformed, of a newer schema, range events without a valid range): as the
    #: Spark verdict's ``unusable``, a run with any cannot pass on counts of 0 alone
    unusable: int = 0
    #: produce.records and region.* (ts, pid, seq, ev, fields), for S8
    regions: list[analyze_regions.RegionEvent] = field(default_factory=list)


def _read(journal: Path) -> Journal:
    j = Journal(
        defaultdict(list), defaultdict(list), defaultdict(list), defaultdict(list), defaultdict(list), {}, [], []
    )
    stats = ReadStats()
    for e in read_journal(journal, stats):
        f, ev, ts = e.fields, e.event, e.ts_ms
        if analyze_regions.wanted(ev):
            j.regions.append((ts, e.pid, e.seq, ev, f))
        if ev in _RANGES and not _usable_range(f):
            j.unusable += 1  # the Spark reader's "incomplete"
            continue
        if ev in ("records.consumed", "records.processed"):
            # handed out (consumed) or finished (processed) at at_ms if given, as tables.consumed_ranges
            ts = int(f["at_ms"]) if f.get("at_ms") is not None else ts
        if "group" in f and "consumer" in f and ev != "records.processed":
            # the application's processed ranges do not extend a consumer's presence (S2 stays on fetching)
            key = (f["group"], f["consumer"])
            j.seen[key] = max(j.seen.get(key, ts), ts)
        if ev == "produce.batch":
            j.produced[(f["topic"], f["partition"])].append((f["first"], f["last"]))
        elif ev in ("records.consumed", "records.processed"):
            if f.get("group") is not None:
                into = j.consumed if ev == "records.consumed" else j.processed
                into[(f["group"], f["topic"], f["partition"])].append((ts, f["first"], f["last"], f["consumer"]))
        elif ev in ("fetch.started", "fetch.stopped"):
            j.fetch[(f["group"], f["consumer"], f["topic"], f["partition"])].append(
                (ts, e.pid, e.seq, ev, f.get("at_ms"), f.get("generation"))
            )
        else:
            j.by[ev].append((ts, f))
            if ev == "command.applied":
                j.applied.append((ts, e.pid, e.seq, f))
            elif ev == "command.sent":
                j.sent.append((ts, e.role, e.pid, f))
    j.unusable += stats.malformed + stats.newer_schema
    return j


def _usable_range(f: dict[str, Any]) -> bool:
    """A range event with its topic, partition and a valid ``first..last`` (the Spark reader counts others as
    ``incomplete``)."""
    first, last = f.get("first"), f.get("last")
    return (
        f.get("topic") is not None
        and f.get("partition") is not None
        and first is not None
        and last is not None
        and 0 <= first <= last
    )


def judged(j: Journal) -> tuple[dict[Key, list[Delivery]], set[str]]:
    """The ranges S3 and S4 judge, per ``(group, topic, partition)``: a group's processed ranges if it has any,
    else its consumed ranges; and the groups judged on processed ranges."""
    processing = {group for group, _topic, _partition in j.processed}
    ranges = {k: v for k, v in j.consumed.items() if k[0] not in processing}
    ranges.update(j.processed)
    return ranges, processing


def _s1(j: Journal, elected: list[tuple[int, int]]) -> int:
    regressions, top = 0, None
    for _ts, f in sorted(j.by["coordinator.elected"], key=lambda x: (x[0], x[1]["epoch"])):
        regressions += top is not None and f["epoch"] <= top
        top = f["epoch"] if top is None else max(top, f["epoch"])
    return regressions + len(_deposed(j, elected))


def _deposed(j: Journal, elected: list[tuple[int, int]]) -> list[dict[str, Any]]:
    """S1's deposed writes: ``command.sent`` with an epoch below the highest elected before it, as rows of the Spark
    verdict's examples (sorted as they are)."""
    rows = [
        {"ts": ts, "role": role, "pid": pid, "group": f["group"], "consumer": f["consumer"], "option": f["option"],
         "epoch": f["epoch"], "elected_epoch": m, "generation": f["generation"]}
        for ts, role, pid, f in j.sent
        if (m := _asof(elected, ts)) is not None and f["epoch"] < m
    ]  # fmt: skip
    return sorted(rows, key=lambda r: (r["ts"], r["group"], r["consumer"]))


Interval = tuple[int, int, str, Any]  # start, end, consumer, generation


def _intervals(j: Journal) -> dict[Key, list[Interval]]:
    """Ownership intervals per ``(group, topic, partition)``, sorted, as :func:`zkcoord.analysis.tables.ownership`."""
    intervals: dict[Key, list[Interval]] = defaultdict(list)
    for (group, consumer, topic, partition), evs in j.fetch.items():
        evs.sort(key=lambda x: (x[0], x[1], x[2]))
        for k, (ts, _pid, _seq, ev, _at, generation) in enumerate(evs):
            if ev != "fetch.started":
                continue
            nxt = evs[k + 1] if k + 1 < len(evs) else None
            if nxt is None:
                end = max(j.seen.get((group, consumer), ts), ts)
            else:
                end = int(nxt[4]) if nxt[3] == "fetch.stopped" and nxt[4] is not None else nxt[0]
            intervals[(group, topic, partition)].append((ts, end, consumer, generation))
    for spans in intervals.values():
        spans.sort(key=lambda x: x[:3])
    return intervals


def _s2(j: Journal) -> int:
    overlaps, outside = _s2_rows(j)
    return len(overlaps) + len(outside)


def _s2_rows(j: Journal) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """S2's overlapping pairs (with the start-fetcher that put each side in possession) and deliveries outside
    ownership, as rows of the Spark verdict's examples (sorted as they are)."""
    overlaps: list[dict[str, Any]] = []
    own: dict[Key, list[tuple[int, int]]] = defaultdict(list)
    for (group, topic, partition), spans in _intervals(j).items():
        for i, (s1, e1, c1, g1) in enumerate(spans):
            own[(group, c1, topic, partition)].append((s1, e1))
            for s2, e2, c2, g2 in spans[i + 1 :]:
                if s2 >= e1:
                    break
                if c1 != c2 and s1 < e2:
                    sides: list[Side] = [(c1, s1, e1, g1), (c2, s2, e2, g2)]
                    a, b = sorted(sides)
                    overlaps.append(_pair(j, (group, topic, partition), a, b))
    outside: list[dict[str, Any]] = []
    for mine in own.values():
        mine.sort()
    for (group, topic, partition), deliveries in j.consumed.items():
        for ts, first, last, consumer in deliveries:
            mine = own.get((group, consumer, topic, partition), [])
            k = bisect.bisect_right(mine, (ts, 1 << 62)) - 1  # one consumer's intervals of a partition are disjoint
            if k < 0 or ts > mine[k][1]:
                outside.append({"group": group, "topic": topic, "partition": partition, "consumer": consumer,
                                "ts": ts, "first": first, "last": last})  # fmt: skip
    overlaps.sort(
        key=lambda r: (r["group"], r["topic"], r["partition"], r["start_a"], r["consumer_a"], r["consumer_b"])
    )
    outside.sort(key=lambda r: (r["ts"], r["group"], r["consumer"], r["topic"], r["partition"], r["first"]))
    return overlaps, outside


Side = tuple[str, int, int, Any]  # consumer, start, end, generation


def _pair(j: Journal, where: Key, a: Side, b: Side) -> dict[str, Any]:
    group, topic, partition = where
    row: dict[str, Any] = {"group": group, "topic": topic, "partition": partition}
    for side, (consumer, start, end, _generation) in (("a", a), ("b", b)):
        row |= {f"consumer_{side}": consumer, f"start_{side}": start, f"end_{side}": end}
    row["overlap_ms"] = min(a[2], b[2]) - max(a[1], b[1])
    row |= {"generation_a": a[3], "generation_b": b[3]}
    for side, (consumer, start, _end, _generation) in (("a", a), ("b", b)):
        grants = [
            (ts, f) for ts, _pid, _seq, f in j.applied
            if f["group"] == group and f["consumer"] == consumer and f["option"] == "start-fetcher" and ts <= start
        ]  # fmt: skip
        last = max(grants, key=lambda x: x[0])[1] if grants else {}
        row |= {f"command_{side}": last.get("name"), f"epoch_{side}": last.get("epoch")}
    return row


def _missing(j: Journal, merged: dict[Key, tuple[list[list[int]], list[tuple[int, int]]]]) -> list[Key]:
    """S3: ``(group, topic, partition, first, last)`` of every produced range a subscribed group's judged ranges
    (``merged``) do not cover."""
    subs: dict[str, set[str]] = defaultdict(set)
    topics = {t for t, _ in j.produced}
    for _ts, f in j.by["consumer.registered"]:
        for key in f["subscription"]:
            pattern = f["pattern"]
            if pattern != "static" and topic_regex.refusal(key) is not None:
                continue  # outside the topic-pattern dialect: left out, as the Spark analysis does
            for t in topics:
                match = pattern != "static" and topic_regex.fullmatch(key, t)
                if {"static": t == key, "white_list": match, "black_list": not match}.get(pattern, False):
                    subs[f["group"]].add(t)
    missing: list[Key] = []
    for group, wanted in sorted(subs.items()):
        for (topic, partition), spans in sorted(j.produced.items()):
            if topic in wanted:
                covered = merged.get((group, topic, partition), ([], []))[0]
                missing += [(group, topic, partition, a, b) for a, b in _subtract(_merge(spans)[0], covered)]
    return missing


def _losses(j: Journal) -> dict[tuple[str, str], list[tuple[int, int]]]:
    """Per consumer, its loss points ``(loss_ts, until_ts)`` (:func:`zkcoord.analysis.checks.crash_tails`): the end
    of the run if it never deregistered; each ``consumer.fenced`` and ``consumer.poll_timeout``, until its next
    ``consumer.registered`` (or the run's end)."""
    closed = {(f["group"], f["consumer"]) for _ts, f in j.by["consumer.deregistered"]}
    joined: dict[tuple[str, str], list[int]] = defaultdict(list)
    for ts, f in j.by["consumer.registered"]:
        joined[(f["group"], f["consumer"])].append(ts)
    losses: dict[tuple[str, str], list[tuple[int, int]]] = defaultdict(list)
    for key in j.seen:
        if key not in closed:
            losses[key].append((END_OF_TIME, END_OF_TIME))
    for ev in _LOSSES:
        for ts, f in j.by[ev]:
            key = (f["group"], f["consumer"])
            losses[key].append((ts, min((t for t in joined[key] if t > ts), default=END_OF_TIME)))
    return losses


def _s4(j: Journal, judged_ranges: dict[Key, list[Delivery]], processing: set[str],
        merged: dict[Key, tuple[list[list[int]], list[tuple[int, int]]]]) -> list[dict[str, Any]]:  # fmt: skip
    """S4's clean duplicates: ``group, topic, partition, first, last, count, judged_on``, in that order."""
    losses = _losses(j)
    commits: dict[Key, list[tuple[int, int]]] = defaultdict(list)
    for ts, f in j.by["offsets.committed"]:
        commits[(f["group"], f["consumer"], f["topic"], f["partition"])].append((ts, f["offset"]))
    tails: dict[Key, list[tuple[int, int]]] = defaultdict(list)
    for (group, topic, partition), deliveries in judged_ranges.items():
        for ts, first, last, consumer in deliveries:
            for loss, until in losses.get((group, consumer), []):
                # processed ranges count until the consumer joined again: its application goes on working on
                # records handed out before the loss, and commits none of them
                end = until if group in processing else loss
                done = sorted(commits.get((group, consumer, topic, partition), []))
                k = bisect.bisect_right(done, (loss, 1 << 62)) - 1  # the last commit at or before the loss
                lo = max(first, done[k][1]) if k >= 0 else first
                if ts <= end and lo <= last:
                    tails[(group, topic, partition)].append((lo, last))
    clean = []
    # a group in a consistent region consumes records again after every reset by design: S8 judges it, not S4
    in_regions = analyze_regions.region_groups(j.regions)
    for (group, topic, partition), (_islands, portions) in sorted(merged.items()):
        if group in in_regions:
            continue
        for a, b in _subtract(_merge(portions)[0], _merge(tails.get((group, topic, partition), []))[0]):
            clean.append(
                {
                    "group": group,
                    "topic": topic,
                    "partition": partition,
                    "first": a,
                    "last": b,
                    "count": b - a + 1,
                    "judged_on": "processed" if group in processing else "consumed",
                }
            )
    return clean


def _at_risk(j: Journal, processing: set[str]) -> tuple[list[dict[str, Any]], int, int]:
    """S3 at risk, as :func:`zkcoord.analysis.checks.committed_unprocessed`: the offsets a consumer with auto-commit
    off committed before its application had processed them.  Returns the ranges per consumer (``group``,
    ``consumer``, ``topic``, ``partition``, ``first``, ``last``, ``count``, sorted), the distinct offsets per
    partition (the count) and the commits judged."""
    commits: dict[Key, list[tuple[int, int]]] = defaultdict(list)
    for ts, f in j.by["offsets.committed"]:
        if f.get("auto_commit") is False and f.get("group") in processing and f.get("offset") is not None:
            commits[(f["group"], f.get("consumer"), f.get("topic"), f.get("partition"))].append((ts, f["offset"]))
    found: list[dict[str, Any]] = []
    per_partition: dict[Key, list[tuple[int, int]]] = defaultdict(list)
    for (group, consumer, topic, partition), done in commits.items():
        handed = [(ts, a, b) for ts, a, b, c in j.consumed.get((group, topic, partition), []) if c == consumer]
        finished = [(ts, b) for ts, _a, b, c in j.processed.get((group, topic, partition), []) if c == consumer]
        # in time order; records handed out or processed in a commit's millisecond count as before it
        timeline = sorted(
            [(ts, 0, "handed", b) for ts, _a, b in handed]
            + [(ts, 0, "processed", b) for ts, b in finished]
            + [(ts, 1, "commit", v) for ts, v in done]
        )
        top: dict[str, int] = {}
        candidates: list[tuple[int, int]] = []
        for _ts, _order, kind, value in timeline:
            if kind != "commit":
                top[kind] = max(top.get(kind, value), value)
            elif "handed" in top:
                # above the highest offset processed by then, below the commit, up to the highest handed out by then
                first, last = top.get("processed", -1) + 1, min(value - 1, top["handed"])
                if first <= last:
                    candidates.append((first, last))
        ranges = _intersect(_merge(candidates)[0], _merge([(a, b) for _ts, a, b in handed])[0])
        per_partition[(group, topic, partition)] += ranges
        found += [
            {"group": group, "consumer": consumer, "topic": topic, "partition": partition, "first": a, "last": b,
             "count": b - a + 1}
            for a, b in ranges
        ]  # fmt: skip
    found.sort(key=lambda r: (r["group"], r["topic"], r["partition"], r["first"], r["consumer"]))
    offsets = sum(last - first + 1 for spans in per_partition.values() for first, last in _merge(spans)[0])
    return found, offsets, sum(len(done) for done in commits.values())


def _s5(j: Journal) -> int:
    return len(_stale(j))


def _stale(j: Journal) -> list[dict[str, Any]]:
    """S5: applied commands older (epoch or generation) than one the same consumer had applied before, as rows of
    the Spark verdict's examples (sorted as they are)."""
    top: dict[tuple[str, str], tuple[int, int]] = {}
    rows = []
    for ts, _pid, _seq, f in sorted(j.applied, key=lambda x: x[:3]):
        key = (f["group"], f["consumer"])
        if key in top:
            seen_epoch, seen_generation = top[key]
            why = [
                f"{name} {value} < already applied {seen}"
                for name, value, seen in (
                    ("epoch", f["epoch"], seen_epoch),
                    ("generation", f["generation"], seen_generation),
                )
                if value < seen
            ]
            if why:
                rows.append({"group": f["group"], "consumer": f["consumer"], "name": f["name"], "option": f["option"],
                             "epoch": f["epoch"], "generation": f["generation"], "seen_epoch": seen_epoch,
                             "seen_generation": seen_generation, "applied_ts": ts, "why": "; ".join(why)})  # fmt: skip
            top[key] = (max(seen_epoch, f["epoch"]), max(seen_generation, f["generation"]))
        else:
            top[key] = (f["epoch"], f["generation"])
    return sorted(rows, key=lambda r: (r["applied_ts"], r["group"], r["consumer"]))


def python_verdict(journal: Path) -> dict[str, int]:
    """S1-S5 and S3-risk counts (docs/analysis.md) in one process: the reference reader, dictionaries and sorted
    lists."""
    return python_analysis(journal).counts


@dataclass(frozen=True)
class PythonAnalysis:
    """What :func:`python_analysis` found: the counts of S1-S5 and S3-risk, the missing ranges (S3: ``group``,
    ``topic``, ``partition``, ``first``, ``last``, ``count``, ``judged_on``), the groups judged on processed records,
    the ranges committed unprocessed (S3-risk: per ``group``, ``consumer``, ``topic``, ``partition``: ``first``,
    ``last``, ``count``) and how many commits S3-risk judged."""

    counts: dict[str, int]
    missing: list[dict[str, Any]]
    processing: frozenset[str]
    at_risk: list[dict[str, Any]]
    commits_judged: int
    #: the rows behind S1 (deposed writes), S2 (overlapping pairs; deliveries outside ownership) and S5 (stale
    #: commands applied), in the Spark verdict's example form: ``details["examples"]`` of S1, S2, S5 and
    #: ``details["outside_examples"]`` of S2 hold their first ten
    deposed: list[dict[str, Any]] = field(default_factory=list)
    overlaps: list[dict[str, Any]] = field(default_factory=list)
    outside: list[dict[str, Any]] = field(default_factory=list)
    stale: list[dict[str, Any]] = field(default_factory=list)
    #: the rows behind S3 and S4 with who was involved (:class:`zkcoord.bench.involved.Involved`), in the Spark
    #: verdict's example form: the first ten missing ranges and clean duplicate ranges
    lost: list[dict[str, Any]] = field(default_factory=list)
    duplicated: list[dict[str, Any]] = field(default_factory=list)
    #: lines that could not be used (:attr:`Journal.unusable`): counts of 0 with any of them prove nothing
    unusable: int = 0
    #: S8's violation rows (the Spark verdict's ``details["examples"]`` of S8 hold the first ten) and its numbers
    region_state: list[dict[str, Any]] = field(default_factory=list)
    region_summary: dict[str, int] = field(default_factory=dict)


def python_analysis(journal: Path) -> PythonAnalysis:
    """:func:`python_verdict` with the S3 ranges behind its count."""
    j = _read(journal)
    elected = _running_max([(ts, f["epoch"]) for ts, f in j.by["coordinator.elected"]])
    ranges, processing = judged(j)
    merged = {k: _merge([(first, last) for _ts, first, last, _c in v]) for k, v in ranges.items()}
    missing = [
        {"group": g, "topic": t, "partition": p, "first": a, "last": b, "count": b - a + 1,
         "judged_on": "processed" if g in processing else "consumed"}
        for g, t, p, a, b in _missing(j, merged)
    ]  # fmt: skip
    at_risk, risked, judged_commits = _at_risk(j, processing)
    overlaps, outside = _s2_rows(j)
    stale = _stale(j)
    region_state, region_summary = analyze_regions.s8(j.regions)
    duplicates = _s4(j, ranges, processing, merged)
    counts = {
        "S1": _s1(j, elected),
        "S2": len(overlaps) + len(outside),
        "S3": sum(m["count"] for m in missing),
        "S3-risk": risked,
        "S4": sum(d["count"] for d in duplicates),
        "S5": len(stale),
        "S8": len(region_state),
    }
    involved = Involved(ranges, _intervals(j), j.applied, j.by["offsets.committed"])
    return PythonAnalysis(
        counts, missing, frozenset(processing), at_risk, judged_commits,
        deposed=_deposed(j, elected), overlaps=overlaps, outside=outside, stale=stale, unusable=j.unusable,
        region_state=region_state, region_summary=region_summary,
        lost=involved.lost(missing), duplicated=involved.duplicated(duplicates),
    )  # fmt: skip
