"""Offset-range arithmetic of the single-process reference verdict (:mod:`zkcoord.bench.analyze_python`): inclusive
``[first, last]`` ranges merged into islands, subtracted, intersected; "as of" lookups in sorted markers.  Pure,
any thread."""

from __future__ import annotations

import bisect


def merge(spans: list[tuple[int, int]]) -> tuple[list[list[int]], list[tuple[int, int]]]:
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


def subtract(a: list[list[int]], b: list[list[int]]) -> list[tuple[int, int]]:
    """The ranges of islands ``a`` that islands ``b`` do not cover (both sorted and disjoint: one sweep)."""
    out: list[tuple[int, int]] = []
    j = 0
    for first, last in a:
        while j < len(b) and b[j][1] < first:
            j += 1
        lo, k = first, j
        while k < len(b) and b[k][0] <= last:
            if b[k][0] > lo:
                out.append((lo, b[k][0] - 1))
            lo = max(lo, b[k][1] + 1)
            k += 1
        if lo <= last:
            out.append((lo, last))
    return out


def intersect(a: list[list[int]], b: list[list[int]]) -> list[tuple[int, int]]:
    """The ranges both islands ``a`` and ``b`` cover (both sorted and disjoint: one sweep)."""
    out: list[tuple[int, int]] = []
    i = k = 0
    while i < len(a) and k < len(b):
        lo, hi = max(a[i][0], b[k][0]), min(a[i][1], b[k][1])
        if lo <= hi:
            out.append((lo, hi))
        if a[i][1] < b[k][1]:
            i += 1
        else:
            k += 1
    return out


def asof(markers: list[tuple[int, int]], ts: int) -> int | None:
    """The largest marker value with a time strictly before ``ts`` (markers sorted by time, with running maxima)."""
    i = bisect.bisect_left(markers, (ts, -(1 << 62)))
    return markers[i - 1][1] if i else None


def running_max(pairs: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out, top = [], None
    for ts, value in sorted(pairs):
        top = value if top is None else max(top, value)
        out.append((ts, top))
    return out
