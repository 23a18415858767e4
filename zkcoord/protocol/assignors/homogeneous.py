"""The uniform assignor for a homogeneous group (every member subscribes to the same topics): balance over all
topics first, then stickiness, in the spirit of Kafka's ``UniformHomogeneousAssignmentBuilder``.

The rule, for ``N`` members and ``P`` partitions in all (``base, extra = divmod(P, N)``):

1. *Quotas.*  Every member's quota is ``base``; ``extra`` members get ``base + 1``.  Those extra slots go first to
   the members that hold more than ``base`` now, in member order, and only then, if slots remain, to the other
   members in member order.  (Kafka hands them out in the iteration order of its member map; giving them to the
   members that can use them keeps the most partitions in place: ``sum(min(held, quota))`` is the largest any
   balanced assignment can keep.)
2. *Keep.*  A member keeps what it holds up to its quota; above it, it keeps the partitions with the smallest
   :data:`~zkcoord.protocol.assignors.members.Retention` keys and gives up the rest.
3. *Deal.*  The pool -- partitions nobody holds, and those given up -- sorted by (topic, partition), is dealt one at
   a time to the members below their quota, in member order, round after round (a round-robin, so that partitions of
   one topic spread over the members that fill up).

With racks (:mod:`~zkcoord.protocol.assignors.racks`), step 2 keeps the partitions of the member's rack first (and
gives up first those of another member's rack), and step 3 first deals as many partitions as it can to members of
their racks; the quotas, and so every count and how many partitions each member keeps, are the same.

So per-member totals over all topics differ by at most one.  From a balanced assignment: a member joining takes
``P // (N + 1)`` partitions and nothing else moves; a member leaving moves only its own partitions; a re-run changes
nothing.  (``tests/unit/test_uniform.py`` checks these for every input it draws.)

The work is organised by *size classes* (members holding the same number of partitions, each class in member order)
so that it touches only the members whose quota differs from what they hold: :func:`settle` is shared by the full
computation (:func:`assign_homogeneous`) and by the incremental one (:mod:`zkcoord.protocol.assignors.incremental`),
which keeps the classes between calls and so computes one join or leave in time proportional to what moves.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator, Mapping, Sequence
from itertools import islice

from zkcoord.protocol.assignors.members import (
    GroupAssignment,
    Holdings,
    Retention,
    java_order,
    size_of,
    topic_partition_order,
)
from zkcoord.protocol.assignors.racks import Racks, deal, rack_retention


def _in_order(classes: Sequence[Sequence[str]]) -> Iterator[str]:
    """The members of several size classes (each in member order), merged into member order."""
    if len(classes) == 1:
        return iter(classes[0])
    return heapq.merge(*classes, key=java_order)


def _in_reverse_order(classes: Sequence[Sequence[str]]) -> Iterator[str]:
    """The members of several size classes, merged into reverse member order."""
    if len(classes) == 1:
        return reversed(classes[0])
    return heapq.merge(*(reversed(c) for c in classes), key=java_order, reverse=True)


def quotas(by_size: Mapping[int, Sequence[str]], total: int) -> dict[str, tuple[int, int]]:
    """Step 1 for the members in ``by_size`` (``size -> members holding that many``, each list in member order)
    sharing ``total`` partitions: ``member -> (held, quota)`` for exactly the members whose quota is not what they
    hold.  The others keep exactly what they hold.

    Three members sharing 7 partitions (``base`` 2, one extra): ``a`` and ``b`` hold 3 each (one partition is
    free), over ``base``, but only one extra slot exists, and ``a`` comes first; ``c`` holds nothing:

    >>> quotas({3: ["a", "b"], 0: ["c"]}, 7)
    {'b': (3, 2), 'c': (0, 2)}

    Cost: the size of the answer plus the members of the classes above ``base + 1`` and below ``base`` (the
    classes are only sliced, not walked, where they straddle the cut), not the number of members.
    """
    count = sum(len(members) for members in by_size.values())
    if count == 0:
        return {}
    base, extra = divmod(total, count)
    sizes = sorted(s for s in by_size if by_size[s])
    over = [by_size[s] for s in sizes if s > base]
    n_over = sum(map(len, over))
    out: dict[str, tuple[int, int]] = {}
    if extra <= n_over:
        # The first `extra` over-base members (member order) keep base + 1; the rest come down to base.
        above = {m: s for s in sizes if s > base + 1 for m in by_size[s]}
        for member in islice(_in_reverse_order(over), n_over - extra):
            out[member] = (above.get(member, base + 1), base)
        for member, size in above.items():
            out.setdefault(member, (size, base + 1))
        lucky: set[str] = set()
    else:
        # Every over-base member keeps base + 1; the remaining extra slots go to the first others in member order.
        out.update({m: (s, base + 1) for s in sizes if s > base + 1 for m in by_size[s]})
        lucky = set(islice(_in_order([by_size[s] for s in sizes if s <= base]), extra - n_over))
        below = {m: s for s in sizes if s < base for m in by_size[s]}
        out.update({m: (below.get(m, base), base + 1) for m in lucky})
    out.update({m: (s, base) for s in sizes if s < base for m in by_size[s] if m not in lucky})
    return out


def settle(
    by_size: Mapping[int, Sequence[str]],
    holdings: Mapping[str, Holdings],
    free: Iterable[tuple[str, int]],
    total: int,
    retention: Retention,
    *,
    racks: Racks | None = None,
) -> dict[str, Holdings]:
    """Steps 1-3: the new holdings of exactly the members whose holdings change.

    ``by_size`` classes the members by how many partitions they hold (``holdings``, valid and disjoint); ``free``
    is every one of the ``total`` partitions that none of them holds.  Members absent from the answer keep their
    holdings unchanged.

    With no members at all, nothing is assigned and the answer is empty.  ``racks`` (in use:
    :func:`~zkcoord.protocol.assignors.racks.in_use`) chooses which partitions move, never how many
    (:mod:`~zkcoord.protocol.assignors.racks`' rules 1 and 2).

    :raises AssertionError: the inputs are inconsistent (``free`` and ``holdings`` do not add up to ``total``).
    """
    if not any(by_size.values()):
        return {}
    plan = quotas(by_size, total)
    if racks is not None:
        retention = rack_retention(racks, retention)
    pool = list(free)
    kept: dict[str, list[tuple[str, int]]] = {}
    for member, (held, quota) in plan.items():
        if held > quota:
            mine = ranked(member, holdings[member], retention)
            kept[member] = mine[:quota]
            pool.extend(mine[quota:])
    pool.sort(key=lambda tp: topic_partition_order(tp[0], tp[1]))
    need = {member: quota - held for member, (held, quota) in plan.items() if held < quota}
    gained = deal(pool, need, racks)
    out: dict[str, Holdings] = {}
    for member, pairs in kept.items():
        out[member] = _group(pairs)
    for member, pairs in gained.items():
        merged = {t: set(ps) for t, ps in holdings[member].items()}
        for topic, partition in pairs:
            merged.setdefault(topic, set()).add(partition)
        out[member] = {t: frozenset(ps) for t, ps in merged.items()}
    return out


def ranked(member: str, holdings: Holdings, retention: Retention) -> list[tuple[str, int]]:
    """``member``'s partitions, those it keeps first (smallest :data:`Retention` key first)."""
    pairs = [(t, p) for t, ps in holdings.items() for p in ps]
    pairs.sort(key=lambda tp: retention(member, tp[0], tp[1]))
    return pairs


def _group(pairs: Iterable[tuple[str, int]]) -> dict[str, frozenset[int]]:
    grouped: dict[str, set[int]] = {}
    for topic, partition in pairs:
        grouped.setdefault(topic, set()).add(partition)
    return {t: frozenset(ps) for t, ps in grouped.items()}


def size_classes(order: Iterable[str], holdings: Mapping[str, Holdings]) -> dict[int, list[str]]:
    """``size -> members holding that many``, each list in the order of ``order`` (member order)."""
    classes: dict[int, list[str]] = {}
    for member in order:
        classes.setdefault(size_of(holdings[member]), []).append(member)
    return classes


def assign_homogeneous(
    order: list[str],
    topics: Mapping[str, int],
    holdings: Mapping[str, Holdings],
    claimed: Mapping[str, set[int]],
    retention: Retention,
    *,
    racks: Racks | None = None,
) -> GroupAssignment:
    """The homogeneous uniform assignment of ``topics`` (``topic -> partition count``, all subscribed by every
    member) to the members of ``order`` (member order), each holding ``holdings[m]`` (valid and disjoint; their
    union per topic is ``claimed``).  Members that keep what they hold get the very mapping of ``holdings``."""
    free = [(t, p) for t in topics for p in sorted(set(range(topics[t])) - claimed.get(t, set()))]
    changes = settle(size_classes(order, holdings), holdings, free, sum(topics.values()), retention, racks=racks)
    return {member: changes.get(member, holdings[member]) for member in order}
