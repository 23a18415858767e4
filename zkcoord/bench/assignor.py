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
  full computation plus the conversions from and to threads;
* ``coordinator (KIP-848)``: :func:`~zkcoord.coordinator.kip848.model.next_target`, what the consumer protocol's
  coordinator calls at a group-epoch bump: the join on the change (its cache holds the previous target as a uniform
  group) plus the conversion to its records; ``coordinator, full``: the full computation it falls back to
  (:func:`~zkcoord.coordinator.kip848.model.compute_target`).

and, for reference, ``leave`` (:meth:`~zkcoord.protocol.assignors.UniformGroup.leave` of one member) and the
heterogeneous case of Kafka's benchmark (members in 5 buckets, each bucket on its own fifth of the topics; the new
member joins the last bucket), which has no incremental form: ``full`` only.  Each figure is over ``--repeats``
timed calls after two warm-up calls: median, mean (JMH's ``avgt``) and minimum, in milliseconds; the table goes to
stdout and the rows to a JSON file (``bench-results/assignor.json`` by default).

Beside the timings, ``balance`` checks issue 16's case: 20 members subscribed to 100 topics of 4 partitions, assigned
by the function the consumer protocol's coordinator calls (:func:`~zkcoord.coordinator.kip848.model.compute_target`):
``uniform`` from scratch, ``uniform`` again after a 20th member joins 19 (sticky to the previous target), the
incremental protocol's thread-level form (:func:`~zkcoord.protocol.assignors.uniform_assign`), and KIP-848's
server-side ``range`` for contrast (it balances each topic on its own: 4 partitions go to 4 of the 20 members).  Each
row gives the per-member totals' minimum, maximum and spread (``balanced``: they differ by at most one) and the time
of that one call.
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
from zkcoord.coordinator.kip848.model import UniformCache, compute_target, next_target
from zkcoord.layout.partition_set import PartitionSet
from zkcoord.protocol.assignors import Assignment, GroupAssignment, UniformGroup, uniform, uniform_assign

#: Kafka's figure for the homogeneous incremental case at 10 000 members, 10 partitions each, 100 topics (ms).
KAFKA_ANCHOR_MS = 1.98
BUCKETS = 5
#: issue 16's balance case: members, topics, partitions per topic
BALANCE_CASE = (20, 100, 4)


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
    targets = {m: PartitionSet.of(h) for m, h in group.assignment.items()}
    # What the consumer protocol's coordinator holds after the previous bump: the target as a uniform group.
    cache = UniformCache(group, frozenset(old))
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
        {
            **shape,
            "case": "homogeneous",
            "how": "coordinator (KIP-848)",
            **_timed(lambda: next_target(cache, "uniform", thread_subs, counts, targets), repeats),
        },
        {
            **shape,
            "case": "homogeneous",
            "how": "coordinator, full",
            **_timed(lambda: compute_target("uniform", thread_subs, counts, targets), max(3, repeats // 4)),
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


def _spread(name: str, totals: list[int], ms: float, shape: dict[str, int]) -> dict[str, Any]:
    low, high = min(totals), max(totals)
    return {**shape, "how": name, "totals_min": low, "totals_max": high, "spread": high - low,
            "balanced": high - low <= 1, "ms": round(ms, 3)}  # fmt: skip


def balance(
    members: int = BALANCE_CASE[0], topics: int = BALANCE_CASE[1], per_topic: int = BALANCE_CASE[2]
) -> list[dict[str, Any]]:
    """Issue 16's balance check: every member on every topic; per-member totals of each way of assigning."""
    names = [f"topic-{i:03d}" for i in range(topics)]
    counts = dict.fromkeys(names, per_topic)
    ids = [f"m{i:03d}" for i in range(members)]
    threads = {m: dict.fromkeys(names, 1) for m in ids}
    shape = {"members": members, "topics": topics, "partitions": topics * per_topic}
    rows = []
    for name, assignor in (("uniform", "uniform"), ("range", "range")):
        began = time.perf_counter()
        target = compute_target(assignor, threads, counts, {})
        rows.append(_spread(name, [target[m].count() for m in ids], (time.perf_counter() - began) * 1000, shape))
    before: dict[str, PartitionSet] = compute_target("uniform", {m: threads[m] for m in ids[:-1]}, counts, {})
    began = time.perf_counter()
    joined = compute_target("uniform", threads, counts, before)
    ms = (time.perf_counter() - began) * 1000
    rows.append(_spread(f"uniform, {ids[-1]} joins {members - 1}", [joined[m].count() for m in ids], ms, shape))
    began = time.perf_counter()
    by_thread = uniform_assign({m: dict.fromkeys(names, 1) for m in ids}, counts, {})
    ms = (time.perf_counter() - began) * 1000
    held = dict.fromkeys(ids, 0)
    for owners in by_thread.values():
        for thread in owners.values():
            held[thread.rpartition("-")[0]] += 1
    rows.append(_spread("threads (incremental protocol)", list(held.values()), ms, shape))
    return rows


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
        "balance": balance(),
    }


def table(document: dict[str, Any]) -> str:
    lines = [
        f"{'case':<14} {'how':<22} {'members':>8} {'topics':>6} {'partitions':>10} {'moved':>5} "
        f"{'median ms':>10} {'mean ms':>9} {'min ms':>8}"
    ]
    for r in document["rows"]:
        lines.append(
            f"{r['case']:<14} {r['how']:<22} {r['members']:>8} {r['topics']:>6} {r['partitions']:>10} {r['moved']:>5} "
            f"{r['median_ms']:>10.3f} {r['mean_ms']:>9.3f} {r['min_ms']:>8.3f}"
        )
    lines.append(f"Kafka (Java, JMH avgt) homogeneous join at 10000 x 10, 100 topics: {KAFKA_ANCHOR_MS} ms")
    rows = document.get("balance") or []
    if rows:
        first = rows[0]
        lines += [
            "",
            f"Balance (issue 16): {first['members']} members on {first['topics']} topics of "
            f"{first['partitions'] // first['topics']} partitions; per-member totals",
            f"  {'how':<32} {'min':>4} {'max':>4} {'spread':>6} {'balanced':>8} {'ms':>8}",
        ]
        for r in rows:
            lines.append(
                f"  {r['how']:<32} {r['totals_min']:>4} {r['totals_max']:>4} {r['spread']:>6} "
                f"{'yes' if r['balanced'] else 'NO':>8} {r['ms']:>8.3f}"
            )
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
