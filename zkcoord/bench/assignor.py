"""The uniform assignor's time for one join at scale, beside Kafka's JMH anchor.

    python -m zkcoord.bench.assignor [--members N] [--ratio R] [--topics T ...] [--repeats K] [--out FILE]

Kafka measures its server-side uniform assignor with the JMH ``ServerSideAssignorBenchmark`` (``INCREMENTAL``): a
group of ``N - 1`` members already assigned, ``R`` partitions per member over ``T`` topics (``N * R / T``
partitions each), every member subscribed to every topic (homogeneous); the timed call assigns again with one new
member added.  At ``N = 10 000``, ``R = 10``, ``T = 100`` it reports 1.98 ms per assignment (commit fb566e48bf0,
KAFKA-16864); the prepared group spec (with its inverted partition -> owner index) is built outside the timed call.

This benchmark times the same join three ways:

* ``incremental``: :meth:`~zkcoord.protocol.assignors.UniformGroup.join` on a prepared
  :class:`~zkcoord.protocol.assignors.UniformGroup` (the assignment and its size classes), working on the change;
  its result is checked equal to the full computation's;
* ``full``: :func:`~zkcoord.protocol.assignors.uniform` with the previous assignment as ``current``: it reads and
  validates every member's partitions (``O(P)``);
* ``threads``: :func:`~zkcoord.protocol.assignors.uniform_assign`, the thread-level form the coordinator's
  incremental rebalance calls with the ownership registry (``topic -> partition -> thread``) as ``previous``: the
  full computation plus the conversions from and to threads.

and, for reference, ``leave`` (:meth:`~zkcoord.protocol.assignors.UniformGroup.leave` of one member) and the
heterogeneous case of Kafka's benchmark (members in 5 buckets, each bucket on its own fifth of the topics; the new
member joins the last bucket), which has no incremental form: ``full`` only.  Each figure is over ``--repeats``
timed calls after two warm-up calls: median, mean (JMH's ``avgt``) and minimum, in milliseconds; the table goes to
stdout and the rows to a JSON file (``bench-results/assignor.json`` by default).
"""

from __future__ import annotations

import argparse
import gc
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from zkcoord.bench.common import BenchError, default_out, envelope, write_document
from zkcoord.protocol.assignors import Assignment, GroupAssignment, UniformGroup, uniform, uniform_assign

#: Kafka's figure for the homogeneous incremental case at 10 000 members, 10 partitions each, 100 topics (ms).
KAFKA_ANCHOR_MS = 1.98
BUCKETS = 5


def _member(i: int) -> str:
    return f"member{i}"


def _timed(call: Callable[[], object], repeats: int) -> dict[str, float]:
    """Two warm-up calls, then ``repeats`` timed ones (garbage collection off while timing, as it is run between)."""
    for _ in range(2):
        call()
    samples = []
    for _ in range(repeats):
        gc.collect()
        gc.disable()
        try:
            start = time.perf_counter_ns()
            call()
            samples.append((time.perf_counter_ns() - start) / 1e6)
        finally:
            gc.enable()
    return {
        "median_ms": round(statistics.median(samples), 3),
        "mean_ms": round(statistics.fmean(samples), 3),
        "min_ms": round(min(samples), 3),
        "repeats": repeats,
    }


def _to_threads(assignment: GroupAssignment) -> Assignment:
    out: Assignment = {}
    for member, holdings in assignment.items():
        for topic, partitions in holdings.items():
            owners = out.setdefault(topic, {})
            for partition in partitions:
                owners[partition] = f"{member}-0"
    return out


def homogeneous(members: int, ratio: int, topics: int, repeats: int) -> list[dict[str, Any]]:
    """The rows of the homogeneous case: ``members - 1`` assigned, one joins."""
    names = [f"topic{i}" for i in range(topics)]
    per_topic = members * ratio // topics
    counts = dict.fromkeys(names, per_topic)
    everyone = frozenset(names)
    old = [_member(i) for i in range(members - 1)]
    group = UniformGroup.start(old, counts)
    joiner = "newMember"
    joined = group.join(joiner)
    subs = dict.fromkeys([*old, joiner], everyone)
    full = uniform(subs, counts, group.assignment)
    if {m: dict(h) for m, h in full.items()} != {m: dict(h) for m, h in joined.assignment.items()}:
        raise AssertionError("the incremental join differs from the full computation")
    moved = sum(len(ps) for ps in joined.assignment[joiner].values())
    thread_subs = dict.fromkeys([*old, joiner], dict.fromkeys(names, 1))  # one dict shared: identical subscriptions
    previous = _to_threads(dict(group.assignment))
    shape = {"members": members, "ratio": ratio, "topics": topics, "partitions": per_topic * topics, "moved": moved}
    rows = [
        {**shape, "case": "homogeneous", "how": "incremental", **_timed(lambda: group.join(joiner), repeats)},
        {
            **shape,
            "case": "homogeneous",
            "how": "full",
            **_timed(lambda: uniform(subs, counts, group.assignment), repeats),
        },
        {
            **shape,
            "case": "homogeneous",
            "how": "threads",
            **_timed(lambda: uniform_assign(thread_subs, counts, previous), max(3, repeats // 4)),
        },
    ]
    leaver = old[len(old) // 2]
    left = dict(group.leave(leaver).assignment)
    rows.append({**shape, "moved": sum(len(ps) for ps in group.assignment[leaver].values()), "case": "homogeneous",
                 "how": "leave (incremental)", **_timed(lambda: group.leave(leaver), repeats)})  # fmt: skip
    if not left or leaver in left:
        raise AssertionError("the leave did not remove the member")
    return rows


def heterogeneous(members: int, ratio: int, topics: int, repeats: int) -> dict[str, Any]:
    """The heterogeneous case of Kafka's benchmark: 5 buckets of members, each on its own slice of the topics."""
    names = [f"topic{i}" for i in range(topics)]
    counts = dict.fromkeys(names, members * ratio // topics)
    buckets = min(BUCKETS, members - 1, topics)  # (Kafka requires at least as many topics as buckets)
    per_bucket_topics = -(-topics // buckets)
    per_bucket_members = -(-(members - 1) // buckets)
    subs: dict[str, frozenset[str]] = {}
    for i in range(members - 1):
        bucket = i // per_bucket_members
        subs[_member(i)] = frozenset(names[bucket * per_bucket_topics : (bucket + 1) * per_bucket_topics])
    before = uniform(subs, counts)
    joined = {**subs, "newMember": subs[_member(members - 2)]}
    after = uniform(joined, counts, before)
    moved = sum(len(ps) for ps in after["newMember"].values())
    shape = {"members": members, "ratio": ratio, "topics": topics, "partitions": sum(counts.values()), "moved": moved}
    return {**shape, "case": "heterogeneous", "how": "full", **_timed(lambda: uniform(joined, counts, before), repeats)}


def run(members: int, ratio: int, topics: Sequence[int], repeats: int) -> dict[str, Any]:
    """Every row, and the context needed to read them."""
    rows: list[dict[str, Any]] = []
    for count in topics:
        rows.extend(homogeneous(members, ratio, count, repeats))
        rows.append(heterogeneous(members, ratio, count, max(3, repeats // 4)))
    return {
        "kafka_anchor_ms": KAFKA_ANCHOR_MS,
        "kafka_anchor": (
            "JMH ServerSideAssignorBenchmark INCREMENTAL UNIFORM HOMOGENEOUS, 10000 members x 10, 100 topics"
        ),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "rows": rows,
    }


def table(document: dict[str, Any]) -> str:
    lines = [
        f"{'case':<14} {'how':<20} {'members':>8} {'topics':>6} {'partitions':>10} {'moved':>5} "
        f"{'median ms':>10} {'mean ms':>9} {'min ms':>8}"
    ]
    for r in document["rows"]:
        lines.append(
            f"{r['case']:<14} {r['how']:<20} {r['members']:>8} {r['topics']:>6} {r['partitions']:>10} {r['moved']:>5} "
            f"{r['median_ms']:>10.3f} {r['mean_ms']:>9.3f} {r['min_ms']:>8.3f}"
        )
    lines.append(f"Kafka (Java, JMH avgt) homogeneous join at 10000 x 10, 100 topics: {KAFKA_ANCHOR_MS} ms")
    return "\n".join(lines)


def bench_assignor(members: int, ratio: int, topics: Sequence[int], repeats: int, out: Path) -> None:
    """``zkcoord bench assignor``: run, print the table, write the document.

    :raises BenchError: a setting out of range (members >= 2, ratio >= 1, repeats >= 1, topics >= 1, and at most
        10 000 000 partitions in all).
    """
    if members < 2 or ratio < 1 or repeats < 1 or not topics or min(topics) < 1:
        raise BenchError("members >= 2, ratio >= 1, repeats >= 1 and topics >= 1 are required")
    if members * ratio > 10_000_000:
        raise BenchError(f"{members} members x {ratio} partitions is over 10 000 000 partitions")
    document = envelope("assignor", run(members, ratio, topics, repeats))
    print(table(document))
    write_document(out, document)
    print(f"written to {out}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m zkcoord.bench.assignor", description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=10_000, help="members after the join [10000]")
    parser.add_argument("--ratio", type=int, default=10, help="partitions per member [10]")
    parser.add_argument("--topics", type=int, nargs="+", default=[100, 1000], help="topic counts [100 1000]")
    parser.add_argument("--repeats", type=int, default=40, help="timed calls per row [40]")
    parser.add_argument("--out", type=Path, default=None, help="JSON file [bench-results/assignor.json]")
    args = parser.parse_args(argv)
    if args.members < 2 or args.ratio < 1 or args.repeats < 1 or min(args.topics) < 1:
        print("Error: members >= 2, ratio >= 1, repeats >= 1 and topics >= 1 are required", file=sys.stderr)
        return 2
    document = envelope("assignor", run(args.members, args.ratio, args.topics, args.repeats))
    print(table(document))
    out = args.out or default_out("assignor")
    write_document(out, document)
    print(f"written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
