"""Who was involved in each listed S3 and S4 violation, for the single-process reference
(:mod:`zkcoord.bench.analyze_python`): the rows :mod:`zkcoord.analysis.involved` adds to the Spark verdict's
examples, by the same rules (docs/analysis.md, "Who was involved"), on plain lists.  Pure; any thread.

A *delivery* is one judged range (``records.processed`` of a group that journals them, else ``records.consumed``):
``consumer, ts, first, last``, and the ownership interval of its consumer and partition it was delivered under (the
last one started at or before ``ts``: ``start_ts, end_ts, generation``) with the ``start-fetcher`` that granted it
(the last one its consumer applied in the group at or before the interval began: ``command`` (its name),
``epoch``).  Whatever the journal lacks is None.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

Key = tuple[Any, ...]
Delivery = tuple[int, int, int, str]  # ts, first, last, consumer
Interval = tuple[int, int, str, Any]  # start, end, consumer, generation
Row = dict[str, Any]

#: The rows each kind lists per run, as the Spark verdict (``zkcoord.analysis.assemble.EXAMPLES``).
EXAMPLES = 10


def _order(*values: Any) -> tuple[tuple[Any, ...], ...]:
    """A sort key that places None first, as Spark orders a struct's null fields."""
    return tuple((0,) if v is None else (1, v) for v in values)


@dataclass(frozen=True)
class Involved:
    """What the rows are looked up in: ``ranges`` (judged deliveries per ``(group, topic, partition)``),
    ``intervals`` (per the same key), ``applied`` (``command.applied``: ``(ts, pid, seq, fields)``) and
    ``commits`` (``offsets.committed``: ``(ts, fields)``)."""

    ranges: dict[Key, list[Delivery]]
    intervals: dict[Key, list[Interval]]
    applied: Sequence[tuple[int, int, int, dict[str, Any]]]
    commits: Sequence[tuple[int, dict[str, Any]]]

    def delivery(self, where: Key, d: Delivery) -> Row:
        """``d`` of partition ``where`` as a row, with its interval and grant."""
        ts, first, last, consumer = d
        mine = [i for i in self.intervals.get(where, []) if i[2] == consumer and i[0] <= ts]
        row: Row = {"consumer": consumer, "ts": ts, "first": first, "last": last}
        if not mine:
            return row | {"start_ts": None, "end_ts": None, "generation": None, "command": None, "epoch": None}
        start, end, _consumer, generation = max(mine, key=lambda i: _order(i[0], i[1], i[3]))
        group = where[0]
        grants = [
            (t, f.get("name"), f.get("epoch")) for t, _pid, _seq, f in self.applied
            if f.get("group") == group and f.get("consumer") == consumer and f.get("option") == "start-fetcher"
            and t <= start
        ]  # fmt: skip
        grant = max(grants, key=lambda g: _order(*g)) if grants else (None, None, None)
        return row | {"start_ts": start, "end_ts": end, "generation": generation, "command": grant[1],
                      "epoch": grant[2]}  # fmt: skip

    def lost(self, missing: Sequence[Row]) -> list[Row]:
        """The first :data:`EXAMPLES` rows of ``missing`` (S3's ranges, in the verdict's order) with ``before``
        (the delivery of the group and partition that ends nearest below the gap: the greatest ``last`` below its
        ``first``, then the latest), ``after`` (the one that begins nearest above it: the least ``first`` above its
        ``last``, then the earliest) and ``commit`` (the earliest ``offsets.committed`` of the group and partition
        above the gap's first offset, which says the gap was consumed: ``consumer, ts, offset``)."""
        out = []
        for m in missing[:EXAMPLES]:
            where = (m["group"], m["topic"], m["partition"])
            ranges = self.ranges.get(where, [])
            below = [d for d in ranges if d[2] < m["first"]]
            above = [d for d in ranges if d[1] > m["last"]]
            before = max(below, key=lambda d: (d[2], d[0], d[3], d[1])) if below else None
            after = min(above, key=lambda d: (d[1], d[0], d[3], d[2])) if above else None
            past = [
                (ts, f.get("consumer"), f["offset"]) for ts, f in self.commits
                if (f.get("group"), f.get("topic"), f.get("partition")) == where and f.get("offset") is not None
                and f["offset"] > m["first"]
            ]  # fmt: skip
            commit = min(past, key=lambda c: _order(*c)) if past else None
            out.append(m | {
                "before": None if before is None else self.delivery(where, before),
                "after": None if after is None else self.delivery(where, after),
                "commit": None if commit is None else {"consumer": commit[1], "ts": commit[0], "offset": commit[2]},
            })  # fmt: skip
        return out

    def duplicated(self, duplicates: Sequence[Row]) -> list[Row]:
        """The first :data:`EXAMPLES` rows of ``duplicates`` (S4's clean ranges, in the verdict's order) with
        ``delivery_a`` and ``delivery_b``: the first two deliveries (in time order) of the range's first offset."""
        out = []
        for dup in duplicates[:EXAMPLES]:
            where = (dup["group"], dup["topic"], dup["partition"])
            covering = sorted(
                (d for d in self.ranges.get(where, []) if d[1] <= dup["first"] <= d[2]),
                key=lambda d: (d[0], d[3], d[1], d[2]),
            )
            rows = [self.delivery(where, d) for d in covering[:2]] + [None, None]
            out.append(dup | {"delivery_a": rows[0], "delivery_b": rows[1]})
        return out
