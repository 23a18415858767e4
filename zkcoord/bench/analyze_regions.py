"""S8 exactly-once state in one process, for :mod:`zkcoord.bench.analyze_python`: the same rows as the Spark
verdict's :func:`zkcoord.analysis.regions.state_violations`, from dictionaries (definition in docs/analysis.md).
Pure; any thread.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from typing import Any

#: (ts, pid, seq, ev, fields) of the events S8 reads: ``produce.records`` and ``region.*``
RegionEvent = tuple[int, int, int, str, dict[str, Any]]
_Region = tuple[str, str]
_Checkpoint = tuple[str, str, int]

_TP = re.compile(r"^(.+)/([0-9]{1,18})$")
_RECORDS = "produce.records"


def wanted(ev: str) -> bool:
    """Whether S8 reads events of type ``ev``."""
    return ev == _RECORDS or ev.startswith("region.")


def region_groups(events: list[RegionEvent]) -> set[str]:
    """The groups that take part in a consistent region (any ``region.*`` event names them)."""
    return {f["group"] for _ts, _pid, _seq, ev, f in events if ev.startswith("region.") and f.get("group") is not None}


def _int(value: object) -> bool:
    return type(value) is int


def _region(value: object) -> str:
    """The region id as the Spark reader's text column holds it: a string as is, any other value as its JSON."""
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


def _records(events: list[RegionEvent]) -> dict[tuple[str, int], list[tuple[int, str, int]]]:
    """(topic, partition) -> [(offset, key, value)] of every usable ``produce.records``."""
    out: dict[tuple[str, int], list[tuple[int, str, int]]] = defaultdict(list)
    for _ts, _pid, _seq, ev, f in events:
        keys, values, first = f.get("keys"), f.get("values"), f.get("first")
        if ev != _RECORDS or f.get("topic") is None or f.get("partition") is None or not isinstance(first, int):
            continue
        if first < 0:
            continue
        if not (isinstance(keys, list) and isinstance(values, list) and len(keys) == len(values)):
            continue
        if not all(_int(v) for v in values) or not all(k is None or isinstance(k, str) for k in keys):
            continue
        for i, (k, v) in enumerate(zip(keys, values, strict=True)):
            out[(f["topic"], f["partition"])].append((first + i, "-" if k is None else k, int(v)))
    return out


def _contributions(events: list[RegionEvent]) -> dict[_Checkpoint, dict[str, dict[str, Any]]]:
    """(group, region, checkpoint) -> member -> its latest ``region.checkpoint`` (by ts, pid, seq)."""
    latest: dict[_Checkpoint, dict[str, tuple[tuple[int, int, int], dict[str, Any]]]] = defaultdict(dict)
    for ts, pid, seq, ev, f in events:
        if ev != "region.checkpoint" or any(f.get(k) is None for k in ("group", "region", "member", "checkpoint")):
            continue
        key = (f["group"], _region(f["region"]), f["checkpoint"])
        order = (ts, pid, seq)
        if f["member"] not in latest[key] or latest[key][f["member"]][0] < order:
            latest[key][f["member"]] = (order, f)
    return {k: {m: f for m, (_o, f) in v.items()} for k, v in latest.items()}


def _merged(members: dict[str, dict[str, Any]]) -> dict[tuple[str, int], int]:
    merged: dict[tuple[str, int], int] = {}
    for f in members.values():
        offsets = f.get("offsets")
        for tp, nxt in offsets.items() if isinstance(offsets, dict) else []:
            m = _TP.match(tp)
            if m and _int(nxt):
                where = (m.group(1), int(m.group(2)))
                merged[where] = max(merged.get(where, nxt), nxt)
    return merged


def _completed(events: list[RegionEvent]) -> dict[_Checkpoint, list[Any]]:
    """(group, region, checkpoint) -> the members its latest ``region.completed`` names."""
    latest: dict[_Checkpoint, tuple[tuple[int, int, int], list[Any]]] = {}
    for ts, pid, seq, ev, f in events:
        if ev != "region.completed" or any(f.get(k) is None for k in ("group", "region", "checkpoint")):
            continue
        key = (f["group"], _region(f["region"]), f["checkpoint"])
        members = f["members"] if isinstance(f.get("members"), list) else []
        if key not in latest or latest[key][0] < (ts, pid, seq):
            latest[key] = ((ts, pid, seq), members)
    return {k: v for k, (_o, v) in latest.items()}


def _found(members: dict[str, dict[str, Any]], named: list[Any]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for member, f in members.items():
        if member not in named:
            continue
        state = f.get("state")
        for key, cs in state.items() if isinstance(state, dict) else []:
            if isinstance(cs, list) and len(cs) == 2 and all(_int(x) for x in cs):
                out[key][0] += cs[0]
                out[key][1] += cs[1]
    return out


def _aggregate(rows: list[tuple[int, str, int]], below: int | None) -> dict[str, list[int]]:
    out: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for offset, key, value in rows:
        if below is None or offset < below:
            out[key][0] += 1
            out[key][1] += value
    return out


def s8(events: list[RegionEvent]) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """S8's violation rows, sorted as the Spark verdict's examples (group, region, checkpoint, key; nulls first),
    and the numbers its details give (regions, checkpoints, complete_checkpoints, resets, records_journalled)."""
    records = _records(events)
    contrib = _contributions(events)
    regions: set[_Region] = {
        (f["group"], _region(f["region"]))
        for _ts, _pid, _seq, ev, f in events
        if ev in ("region.joined", "region.checkpoint", "region.completed")
        and f.get("group") is not None
        and f.get("region") is not None
    }
    topics: dict[_Region, set[str]] = defaultdict(set)
    for (group, region, _checkpoint), members in contrib.items():
        topics[(group, region)] |= {t for t, _p in _merged(members)}
    completed = _completed(events)
    complete: dict[_Region, list[int]] = defaultdict(list)
    for group, region, checkpoint in completed:
        complete[(group, region)].append(checkpoint)
    rows: list[dict[str, Any]] = []
    for (group, region), ids in complete.items():
        last = max(ids)
        for checkpoint in ids:
            members = contrib.get((group, region, checkpoint), {})
            expected: dict[str, list[int]] = defaultdict(lambda: [0, 0])
            if checkpoint == last:
                parts = [_aggregate(rs, None) for (t, _p), rs in records.items() if t in topics[(group, region)]]
            else:
                parts = [_aggregate(records.get(tp, []), nxt) for tp, nxt in _merged(members).items()]
            for part in parts:
                for key, (c, s) in part.items():
                    expected[key][0] += c
                    expected[key][1] += s
            found = _found(members, completed[(group, region, checkpoint)])
            for key in sorted(set(expected) | set(found)):
                e, g = expected.get(key, [0, 0]), found.get(key, [0, 0])
                if e != g:
                    rows.append(_row((group, region, checkpoint), checkpoint == last, key, e, g))
    for group, region in regions - set(complete):
        everything = [_aggregate(rs, None) for (t, _p), rs in records.items() if t in topics[(group, region)]]
        total = [sum(a[k][0] for a in everything for k in a), sum(a[k][1] for a in everything for k in a)]
        rows.append(_row((group, region, None), True, None, total, [0, 0]))
    rows.sort(key=lambda r: (r["group"], r["region"], (r["checkpoint"] is not None, r["checkpoint"] or 0),
                             (r["key"] is not None, r["key"] or "")))  # fmt: skip
    summary = {
        "regions": len(regions),
        "checkpoints": len(contrib),
        "complete_checkpoints": len(completed),
        "resets": sum(1 for e in events if e[3] == "region.reset"),
        "records_journalled": sum(len(rs) for rs in records.values()),
    }
    return rows, summary


def _row(where: tuple[str, str, int | None], last: bool, key: str | None, expected: list[int],
         found: list[int]) -> dict[str, Any]:  # fmt: skip
    group, region, checkpoint = where
    return {"group": group, "region": region, "checkpoint": checkpoint, "last": last, "key": key,
            "expected_count": expected[0], "expected_sum": expected[1], "found_count": found[0],
            "found_sum": found[1]}  # fmt: skip
