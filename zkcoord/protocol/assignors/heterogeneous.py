"""The uniform assignor for a heterogeneous group (members subscribe to different topics), in the spirit of Kafka's
``UniformHeterogeneousAssignmentBuilder``: every partition of every subscribed topic is assigned once, to a member
subscribed to it, and the result is *balanced* in the sense Kafka's own assignor tests check
(``AbstractStickyAssignorTest.verifyValidityAndBalance``): for any two members whose totals differ by two or more,
the more loaded one holds no partition of a topic the other subscribes to -- no single move of a partition to
another of its topic's subscribers can make the totals more even.

The rule:

1. *Keep.*  Every member keeps its valid current partitions (subscribed topic, in range, not claimed twice).
2. *Place.*  The partitions nobody holds are placed topic by topic -- topics by partitions per subscriber
   (descending), then subscriber count (ascending), then name (Kafka's order) -- each partition, in ascending order,
   to the subscriber of its topic with the fewest partitions in all (ties in member order).
3. *Balance.*  Topic by topic in the same order, while the most loaded member holding a partition of the topic has
   two or more partitions more than the least loaded subscriber of it, one partition of the topic moves from the
   first to the second (ties: the most loaded last in member order gives, the least loaded first in member order
   takes).  The partition moved is one the giver was placed in step 2 or 3 if it has one (the highest), otherwise
   its partition with the largest :data:`~zkcoord.protocol.assignors.members.Retention` key.  Passes over the
   topics repeat until one moves nothing.  Every move lowers the sum of the squares of the totals, so this ends.

Unlike Kafka's builder, which stops after 16 passes and may end "nearly balanced", this one runs to the end, so the
property above always holds.  It is not the most even assignment possible for overlapping subscriptions (a chain of
moves through a third member can sometimes do better: Kafka's javadoc example ends 9/10/11, as this one may), and,
balance coming first, a join or leave may move partitions between members other than the one that came or went.
A re-run with the result as the current assignment changes nothing.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from fractions import Fraction

from zkcoord.protocol.assignors.members import (
    GroupAssignment,
    Holdings,
    Retention,
    java_order,
    size_of,
)
from zkcoord.protocol.assignors.racks import Racks, deal, rack_retention, reroute_key


def topic_order(topics: Mapping[str, int], subscribers: Mapping[str, list[str]]) -> list[str]:
    """Kafka's order of topics for placing and balancing: partitions per subscriber descending, then subscriber
    count ascending, then topic name (Java order)."""
    return sorted(
        topics,
        key=lambda t: (-Fraction(topics[t], len(subscribers[t])), len(subscribers[t]), java_order(t)),
    )


class _Work:
    """The assignment being built: per-member partition sets, copied from the kept holdings on first change."""

    def __init__(self, order: list[str], holdings: Mapping[str, Holdings]) -> None:
        self.index = {member: i for i, member in enumerate(order)}
        self.kept = holdings
        self.size = {member: size_of(holdings[member]) for member in order}
        self.changed: dict[str, dict[str, set[int]]] = {}
        #: how many moves had been made when each member's total last changed
        self.stamp = dict.fromkeys(order, 0)
        self.moves = 0

    def mine(self, member: str) -> dict[str, set[int]]:
        work = self.changed.get(member)
        if work is None:
            work = self.changed[member] = {t: set(ps) for t, ps in self.kept[member].items()}
        return work

    def held(self, member: str, topic: str) -> int:
        work = self.changed.get(member)
        if work is not None:
            return len(work.get(topic, ()))
        return len(self.kept[member].get(topic, ()))

    def give(self, member: str, topic: str, partition: int) -> None:
        self.mine(member).setdefault(topic, set()).add(partition)
        self.size[member] += 1
        self.stamp[member] = self.moves

    def take(self, member: str, topic: str, partition: int) -> None:
        self.mine(member)[topic].discard(partition)
        self.size[member] -= 1
        self.stamp[member] = self.moves

    def result(self, order: list[str]) -> GroupAssignment:
        out: GroupAssignment = {}
        for member in order:
            work = self.changed.get(member)
            if work is None:
                out[member] = self.kept[member]
            else:
                out[member] = {t: frozenset(ps) for t, ps in work.items() if ps}
        return out


def assign_heterogeneous(
    order: list[str],
    subscriptions: Mapping[str, frozenset[str]],
    topics: Mapping[str, int],
    holdings: Mapping[str, Holdings],
    *,
    claimed: Mapping[str, set[int]],
    retention: Retention,
    racks: Racks | None = None,
) -> GroupAssignment:
    """The heterogeneous uniform assignment (steps 1-3 above); ``racks`` (in use:
    :func:`~zkcoord.protocol.assignors.racks.in_use`) chooses which partitions go where, never how many
    (:mod:`~zkcoord.protocol.assignors.racks`' rule 3).

    ``order``: every member, in member order; ``subscriptions[m]``: its topics (each with at least one partition);
    ``topics``: ``topic -> partition count`` for every topic some member subscribes to; ``holdings``: what each
    member keeps (valid and disjoint, as :func:`~zkcoord.protocol.assignors.members.valid_holdings` gives), whose
    union per topic is ``claimed``.  Members whose partitions do not change get the very mapping of ``holdings``.

    Kafka's javadoc example: ``m1`` on topic A, ``m3`` on B, ``m2`` on both, 15 partitions each.  ``m3`` has two
    more than ``m1``, but they share no topic; a chain of two moves (B from ``m3`` to ``m2``, A from ``m2`` to
    ``m1``) would even it out, a single move cannot:

    >>> from zkcoord.protocol.assignors.uniform import uniform
    >>> result = uniform({"m1": {"A"}, "m2": {"A", "B"}, "m3": {"B"}}, {"A": 15, "B": 15})
    >>> {m: {t: len(ps) for t, ps in sorted(result[m].items())} for m in sorted(result)}
    {'m1': {'A': 9}, 'm2': {'A': 6, 'B': 4}, 'm3': {'B': 11}}
    """
    subscribers: dict[str, list[str]] = {t: [] for t in topics}
    for member in order:
        for topic in subscriptions[member]:
            subscribers[topic].append(member)
    ranked = topic_order(topics, subscribers)
    work = _Work(order, holdings)
    for topic in ranked:
        free = sorted(set(range(topics[topic])) - claimed.get(topic, set()))
        _place(work, topic, free, subscribers[topic], racks)
    if racks is not None:
        retention = rack_retention(racks, retention)
    _balance(work, [t for t in ranked if len(subscribers[t]) >= 2], subscribers, retention, racks)
    return work.result(order)


def _place(work: _Work, topic: str, free: list[int], subscribers: list[str], racks: Racks | None) -> None:
    """Step 2 for one topic: each free partition to its least loaded subscriber.  With racks, the subscribers and
    how many each gets are the same, which partitions each gets is dealt by rack."""
    if not free:
        return
    heap = [(work.size[m], work.index[m], m) for m in subscribers]
    heapq.heapify(heap)
    need: dict[str, int] = {}
    for partition in free:
        size, index, member = heapq.heappop(heap)
        if racks is None:
            work.give(member, topic, partition)
        else:
            need[member] = need.get(member, 0) + 1
        heapq.heappush(heap, (size + 1, index, member))
    if racks is not None:
        for member, pairs in deal([(topic, p) for p in free], need, racks).items():
            for _, partition in pairs:
                work.give(member, topic, partition)


def _balance(
    work: _Work,
    topics: list[str],
    subscribers: Mapping[str, list[str]],
    retention: Retention,
    racks: Racks | None,
) -> None:
    """Step 3: passes over ``topics`` (each with two subscribers or more) until one moves nothing.  A topic none of
    whose subscribers changed total since it was last balanced is skipped: it is still balanced."""
    checked: dict[str, int] = {}
    while True:
        before = work.moves
        for topic in topics:
            members = subscribers[topic]
            if topic in checked and all(work.stamp[m] < checked[topic] for m in members):
                continue
            _balance_topic(work, topic, members, retention, racks)
            checked[topic] = work.moves + 1
        if work.moves == before:
            return


def _balance_topic(work: _Work, topic: str, members: list[str], retention: Retention, racks: Racks | None) -> None:
    sizes = [work.size[m] for m in members]
    if max(sizes) - min(sizes) <= 1:
        return  # already balanced, whoever holds what (the common case, checked without building heaps)
    # Lazy heaps: an entry is current while its size is the member's size (and, for givers, it holds the topic).
    takers = [(work.size[m], work.index[m], m) for m in members]
    givers = [(-work.size[m], -work.index[m], m) for m in members if work.held(m, topic)]
    heapq.heapify(takers)
    heapq.heapify(givers)
    while True:
        while takers and takers[0][0] != work.size[takers[0][2]]:
            heapq.heappop(takers)
        while givers and (-givers[0][0] != work.size[givers[0][2]] or not work.held(givers[0][2], topic)):
            heapq.heappop(givers)
        if not givers:
            return
        taker, giver = takers[0][2], givers[0][2]
        if work.size[giver] - work.size[taker] <= 1:
            return
        partition = _pick(work, giver, taker, topic, retention=retention, racks=racks)
        work.moves += 1
        work.take(giver, topic, partition)
        work.give(taker, topic, partition)
        for member in (giver, taker):
            heapq.heappush(takers, (work.size[member], work.index[member], member))
            heapq.heappush(givers, (-work.size[member], -work.index[member], member))


def _pick(work: _Work, giver: str, taker: str, topic: str, *, retention: Retention, racks: Racks | None) -> int:
    """The partition of ``topic`` that ``giver`` gives up to ``taker``: one it was given in this run if any (the
    highest, as it moved nothing yet), else the kept one with the largest retention key.  With racks, within each of
    those two, first one of the taker's rack, then one outside the giver's."""
    mine = work.mine(giver)[topic]
    kept = work.kept[giver].get(topic, frozenset())
    fresh = mine - kept
    candidates = fresh or mine
    if racks is not None:
        prefer = reroute_key(racks, giver, taker)
        best = min(prefer(topic, p) for p in candidates)
        candidates = {p for p in candidates if prefer(topic, p) == best}
    if fresh:
        return max(candidates)
    return max(candidates, key=lambda p: retention(giver, topic, p))
