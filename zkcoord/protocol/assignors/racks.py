"""Racks in the uniform assignor (seed 000's Rack ID; Kafka's KIP-881): a member with a rack is preferably given
partitions that have a replica on a broker of its rack, so that it can fetch from a replica near it.

**The rule here: balance, then stickiness, then rack matching.**  Racks only decide what the rack-blind assignor
leaves open: every member gets exactly the partition *count* it would get without racks (in a heterogeneous group,
of each topic), and keeps as many of its partitions (all of them unless it is over its quota); what racks change is
*which* partitions move, and where:

1. a member over its quota keeps the partitions of its rack first, and gives up first those of another member's
   rack (then by the usual retention order);
2. the partitions that move (free, or given up) are dealt so that as many as possible land on a member of one of
   their racks: a maximum flow from partition classes (partitions with the same set of useful racks) to racks (each
   with the room its members have), computed on those classes, not on partitions; within a rack, and for what no
   rack can take, the usual round-robin in member order;
3. heterogeneous groups: the subscribers that receive a topic's free partitions, and how many each, are the
   rack-blind ones; which partitions each gets is dealt as in 2; a balancing move gives up a partition of the
   taker's rack (and not of the giver's) first.

So with racks every property of the rack-blind assignor holds (``tests/unit/test_uniform_racks.py`` checks them with
racks drawn at random); in a homogeneous group the rack matches are never fewer than the rack-blind result's, and
an assignment dealt afresh has the most matches its per-member counts allow.

**Departure from Kafka.**  Kafka ranks rack matching *above* stickiness: KIP-881's client-side sticky assignors
("Previously owned partitions may be reassigned to improve rack locality", ``AbstractStickyAssignor``), the
server-side uniform assignors of Kafka 3.7 (KAFKA-14515 and KAFKA-15484; ``OptimizedUniformAssignmentBuilder``:
"Balance > Rack Matching > Stickiness": a held partition whose racks do not include its member's is released, and
given back only if no member of its rack has room) and the open proposal to restore them (apache/kafka#20000,
KAFKA-19909).  Kafka 3.8 removed rack awareness from its server-side assignors altogether (KAFKA-16694, "not
performing as expected"), so Kafka's current uniform assignor ignores racks.  Here stickiness comes first because
issue 16's stickiness properties (a join moves only the joiner's share, a leave only the leaver's partitions, the
fewest moves a balanced result allows) are this assignor's contract, and Kafka's order breaks them (a join can move
a partition held outside its rack, and then another to fill the gap).  The cost: a partition held outside its rack
stays there until it moves for another reason (a join, a leave, new partitions), and a change of a broker's rack
bumps the group epoch (KIP-848 bumps it on any change of partition metadata) without moving anything held.

When racks are used at all is Kafka's rule (``useRackAwareAssignment``): some member has a rack, some partition
has a replica in one of the members' racks, and not every partition has the same racks (then no choice would matter).
Otherwise the assignment is exactly the rack-blind one.

Pure; member order and (topic, partition) order break every tie, so the result depends on values only.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any

from zkcoord.protocol.assignors.members import Retention, java_order

#: ``topic -> the racks of each of its partitions`` (index = partition number; one beyond the end has none)
PartitionRacks = Mapping[str, Sequence[AbstractSet[str]]]

_NONE: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Racks:
    """The racks an assignment may take into account: ``members`` (member id -> its rack; a member absent has none)
    and ``partitions`` (the racks of each partition's replicas; a partition absent has none)."""

    members: Mapping[str, str] = field(default_factory=dict)
    partitions: PartitionRacks = field(default_factory=dict)

    def of(self, topic: str, partition: int) -> AbstractSet[str]:
        """The racks of one partition (none if unknown)."""
        racks = self.partitions.get(topic)
        if racks is None or not 0 <= partition < len(racks):
            return _NONE
        return racks[partition]

    def matches(self, member: str, topic: str, partition: int) -> bool:
        """Whether ``member`` has a rack and the partition a replica in it."""
        rack = self.members.get(member)
        return rack is not None and rack in self.of(topic, partition)


def in_use(racks: Racks | None, members: Iterable[str], topics: Mapping[str, int]) -> Racks | None:
    """``racks`` if racks are to be used for assigning ``topics`` (``topic -> partition count``) to ``members``, else
    None: Kafka's ``useRackAwareAssignment`` (``AbstractUniformAssignmentBuilder`` before KAFKA-16694; the same rule in
    ``AbstractStickyAssignor``): some member has a rack, some partition a replica in a member's rack, and the
    partitions do not all have the same racks.  Costs one look at each partition, only when some member has a rack.
    """
    if racks is None:
        return None
    member_racks = {racks.members[m] for m in members if m in racks.members}
    if not member_racks:
        return None
    first: AbstractSet[str] | None = None
    varied = False
    every: set[str] = set()
    for topic, count in topics.items():
        for partition in range(count):
            here = racks.of(topic, partition)
            every.update(here)
            if first is None:
                first = here
            elif not varied and here != first:
                varied = True
    if not varied or member_racks.isdisjoint(every):
        return None
    return Racks({m: racks.members[m] for m in members if m in racks.members}, racks.partitions)


def rack_retention(racks: Racks, retention: Retention) -> Retention:
    """``retention`` with a member's partitions ranked by rack first (rule 1): those of its own rack are kept first,
    then those no member's rack holds (nobody can do better with them), and those of another member's rack are
    given up first (they may go to that member)."""
    wanted = frozenset(racks.members.values())

    def key(member: str, topic: str, partition: int) -> tuple[int, Any]:
        here = racks.of(topic, partition)
        rank = 0 if racks.members.get(member) in here else 2 if not wanted.isdisjoint(here) else 1
        return rank, retention(member, topic, partition)

    return key


def deal(
    pool: Sequence[tuple[str, int]], need: Mapping[str, int], racks: Racks | None
) -> dict[str, list[tuple[str, int]]]:
    """Deal ``pool`` (in (topic, partition) order) to the members of ``need`` (``member -> how many it takes``,
    which add up to ``len(pool)``): ``member -> what it gets``.

    Without ``racks``: one partition at a time to the members below their count, in member order, round after round
    (a round-robin, so that partitions of one topic spread over the members that fill up).  With them: first as many
    partitions as possible to members of one of their racks (rule 2), then the rest as without.

    :raises AssertionError: the counts do not add up to the pool.
    """
    gained: dict[str, list[tuple[str, int]]] = {member: [] for member in need}
    left = dict(need)
    members = sorted(need, key=java_order)
    rest: Sequence[tuple[str, int]] = pool
    if racks is not None:
        rest = _deal_by_rack(pool, members, left, gained, racks)
    _round_robin(rest, members, left, gained, exact=True)
    return gained


def _round_robin(
    pool: Iterable[tuple[str, int]],
    members: Sequence[str],
    left: dict[str, int],
    gained: dict[str, list[tuple[str, int]]],
    *,
    exact: bool,
) -> None:
    """Deal ``pool`` to ``members`` (in this order) below their count in ``left``, round after round; ``exact``:
    the counts must take the whole pool, and the pool must fill them."""
    dealt = iter(pool)
    active = [m for m in members if left[m] > 0]
    while active:
        still = []
        for member in active:
            pair = next(dealt, None)
            if pair is None:
                if exact:
                    raise AssertionError("too few partitions for the quotas: the counts do not add up to the pool")
                return
            gained[member].append(pair)
            left[member] -= 1
            if left[member]:
                still.append(member)
        active = still
    leftover = next(dealt, None)
    if leftover is not None:
        raise AssertionError(f"partition {leftover} left over: the counts do not add up to the pool")


def _deal_by_rack(
    pool: Sequence[tuple[str, int]],
    members: Sequence[str],
    left: dict[str, int],
    gained: dict[str, list[tuple[str, int]]],
    racks: Racks,
) -> list[tuple[str, int]]:
    """Rule 2's rack phase: deals what racks can take (updating ``left`` and ``gained``) and returns the rest, in
    pool order."""
    by_rack: dict[str, list[str]] = {}
    for member in members:
        rack = racks.members.get(member)
        if rack is not None and left[member] > 0:
            by_rack.setdefault(rack, []).append(member)
    room = {rack: sum(left[m] for m in ms) for rack, ms in by_rack.items()}
    classes: dict[frozenset[str], list[tuple[str, int]]] = {}
    rest: list[tuple[str, int]] = []
    for pair in pool:
        useful = frozenset(r for r in racks.of(*pair) if r in room)
        if useful:
            classes.setdefault(useful, []).append(pair)
        else:
            rest.append(pair)
    if not classes:
        return rest
    flow = max_flow({c: len(ps) for c, ps in classes.items()}, room)
    to_rack: dict[str, list[tuple[str, int]]] = {rack: [] for rack in room}
    for cls in sorted(classes, key=sorted):
        members_of = iter(classes[cls])
        for rack in sorted(cls):
            to_rack[rack].extend(next(members_of) for _ in range(flow.get((cls, rack), 0)))
        rest.extend(members_of)
    position = {pair: i for i, pair in enumerate(pool)}
    for rack, pairs in to_rack.items():
        pairs.sort(key=position.__getitem__)
        _round_robin(pairs, by_rack[rack], left, gained, exact=False)
    rest.sort(key=position.__getitem__)
    return rest


def max_flow(supply: Mapping[frozenset[str], int], room: Mapping[str, int]) -> dict[tuple[frozenset[str], str], int]:
    """How many partitions of each class (``its useful racks -> how many partitions``) go to each rack (``rack ->
    room``), each to one of its class's racks, for the most in all: ``(class, rack) -> count`` (absent: 0).

    A maximum flow by shortest augmenting paths (Edmonds-Karp) on the classes and racks, not on partitions: a path
    starts at a class with partitions left, goes to one of its racks, and, while that rack is full, on to a class
    that sends it partitions (which are sent to another of its racks instead), until a rack with room.  Classes are
    visited in sorted order and racks in name order, so the answer depends on values only.

    >>> flow = max_flow({frozenset("a"): 2, frozenset("ab"): 2}, {"a": 2, "b": 2})
    >>> sorted((sorted(c), r, n) for (c, r), n in flow.items() if n)
    [(['a'], 'a', 2), (['a', 'b'], 'b', 2)]
    """
    flow: dict[tuple[frozenset[str], str], int] = {}
    sent = dict.fromkeys(supply, 0)
    used = dict.fromkeys(room, 0)
    classes = sorted(supply, key=sorted)
    senders = {rack: [c for c in classes if rack in c] for rack in room}
    while True:
        via_class: dict[frozenset[str], str | None] = {c: None for c in classes if sent[c] < supply[c]}
        via_rack: dict[str, frozenset[str]] = {}
        queue = deque(via_class)
        end: str | None = None
        while queue and end is None:
            cls = queue.popleft()
            for rack in sorted(cls):
                if rack in via_rack or rack not in room:
                    continue
                via_rack[rack] = cls
                if used[rack] < room[rack]:
                    end = rack
                    break
                for other in senders[rack]:
                    if other not in via_class and flow.get((other, rack), 0) > 0:
                        via_class[other] = rack
                        queue.append(other)
        if end is None:
            return flow
        amount, rack = room[end] - used[end], end
        while True:  # the bottleneck: the room at the end, what is rerouted, what the first class has left
            cls = via_rack[rack]
            back = via_class[cls]
            if back is None:
                amount = min(amount, supply[cls] - sent[cls])
                break
            amount = min(amount, flow[cls, back])
            rack = back
        used[end] += amount
        rack = end
        while True:
            cls = via_rack[rack]
            flow[cls, rack] = flow.get((cls, rack), 0) + amount
            back = via_class[cls]
            if back is None:
                sent[cls] += amount
                break
            flow[cls, back] -= amount
            rack = back


def reroute_key(racks: Racks, giver: str, taker: str) -> Callable[[str, int], tuple[bool, bool]]:
    """Rule 3's preference among the partitions of a topic a balancing move may take from ``giver`` to ``taker``:
    the smallest key goes first -- one of the taker's rack, then one outside the giver's."""

    def key(topic: str, partition: int) -> tuple[bool, bool]:
        return not racks.matches(taker, topic, partition), racks.matches(giver, topic, partition)

    return key
