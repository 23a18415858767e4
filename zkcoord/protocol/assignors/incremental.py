"""The homogeneous uniform assignment computed from the change: one join or leave in time proportional to what
moves, not to the size of the group.

:func:`~zkcoord.protocol.assignors.uniform.uniform` reads every member's current partitions to validate them, which
is ``O(P)`` however little changes.  A :class:`UniformGroup` is a value that carries a *valid* uniform assignment
together with its members' size classes (:func:`~zkcoord.protocol.assignors.homogeneous.size_classes`), so that
:meth:`UniformGroup.join` and :meth:`UniformGroup.leave` can run the same step
(:func:`~zkcoord.protocol.assignors.homogeneous.settle`) on only the members whose quota changes.  The result is
*equal* to what ``uniform`` computes from scratch with the previous assignment as ``current`` (the property tests
check it for every case they draw); only the work differs: the members whose partitions move, plus a copy of the
member map (``O(N)``, done in C) instead of ``O(P)`` Python steps.

This is the shape of Kafka's own measurement of its uniform assignor (the JMH ``ServerSideAssignorBenchmark``,
``INCREMENTAL``): the group's current assignment is prepared before the timed call, which adds one member.
Values are immutable: a join or leave returns a new :class:`UniformGroup` sharing the unchanged members' holdings.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from zkcoord.errors import ConfigurationError
from zkcoord.protocol.assignors.homogeneous import settle, size_classes
from zkcoord.protocol.assignors.members import (
    CurrentAssignment,
    Holdings,
    default_retention,
    java_order,
    member_order,
    size_of,
)
from zkcoord.protocol.assignors.uniform import uniform


class _Classes:
    """Size classes being updated: a list is copied the first time it changes, so the previous value stays intact."""

    def __init__(self, classes: Mapping[int, list[str]]) -> None:
        self.classes = dict(classes)
        self._copied: set[int] = set()

    def _mutable(self, size: int) -> list[str]:
        if size not in self._copied:
            self.classes[size] = list(self.classes.get(size, ()))
            self._copied.add(size)
        return self.classes[size]

    def add(self, member: str, size: int) -> None:
        insort(self._mutable(size), member, key=java_order)

    def remove(self, member: str, size: int) -> None:
        members = self._mutable(size)
        at = bisect_left(members, java_order(member), key=java_order)
        if at == len(members) or members[at] != member:
            raise AssertionError(f"member {member!r} is not in size class {size}")
        del members[at]
        if not members:
            del self.classes[size]
            self._copied.discard(size)


class _Joined(Mapping[str, Holdings]):
    """The holdings of a group plus one newcomer holding nothing, without copying the group's."""

    def __init__(self, holdings: Mapping[str, Holdings], newcomer: str) -> None:
        self._holdings = holdings
        self._newcomer = newcomer

    def __getitem__(self, member: str) -> Holdings:
        return {} if member == self._newcomer else self._holdings[member]

    def __iter__(self) -> Iterator[str]:
        yield from self._holdings
        yield self._newcomer

    def __len__(self) -> int:
        return len(self._holdings) + 1


@dataclass(frozen=True, slots=True)
class UniformGroup:
    """A homogeneous group -- every member subscribed to :attr:`topics` -- with its uniform assignment.

    Build one with :meth:`start`; never construct one by hand (the fields must agree: :attr:`classes` are the
    members of :attr:`assignment` by size, in member order; :attr:`assignment` is a valid uniform assignment).
    """

    #: ``topic -> partition count`` (topics with at least one partition)
    topics: Mapping[str, int]
    #: ``member -> topic -> partitions``: every partition of :attr:`topics` exactly once
    assignment: Mapping[str, Holdings]
    #: ``size -> members holding that many partitions``, each in member order
    classes: Mapping[int, list[str]]
    #: how many partitions :attr:`topics` have in all
    total: int

    @classmethod
    def start(
        cls, members: Iterable[str], topics: Mapping[str, int], current: CurrentAssignment | None = None
    ) -> UniformGroup:
        """The group of ``members`` on ``topics``, assigned by :func:`~zkcoord.protocol.assignors.uniform.uniform`
        from ``current`` (a full computation).

        :raises ConfigurationError: a negative partition count.
        """
        assignment = uniform(dict.fromkeys(members, frozenset(topics)), topics, current)
        kept = {t: n for t, n in topics.items() if n > 0}
        classes = size_classes(member_order(assignment), assignment)
        return cls(kept, assignment, classes, sum(kept.values()))

    def join(self, member: str) -> UniformGroup:
        """The group after ``member`` (subscribed to :attr:`topics`, holding nothing) joins.

        Equal to ``uniform({m: topics for every member and member}, topics, current=self.assignment)``.

        :raises ConfigurationError: ``member`` is already in the group.
        """
        if member in self.assignment:
            raise ConfigurationError(f"member {member!r} is already in the group")
        classes = _Classes(self.classes)
        classes.add(member, 0)
        # A group with members has every partition assigned; an empty one has them all free.
        free = () if self.assignment else [(t, p) for t, n in self.topics.items() for p in range(n)]
        changes = settle(classes.classes, _Joined(self.assignment, member), free, self.total, default_retention)
        return self._with(classes, {member: {}}, changes, gone=None)

    def leave(self, member: str) -> UniformGroup:
        """The group after ``member`` leaves (its partitions are free).

        Equal to ``uniform({m: topics for every member but member}, topics, current=self.assignment)``.

        :raises ConfigurationError: ``member`` is not in the group.
        """
        held = self.assignment.get(member)
        if held is None:
            raise ConfigurationError(f"member {member!r} is not in the group")
        classes = _Classes(self.classes)
        classes.remove(member, size_of(held))
        free = [(t, p) for t, ps in held.items() for p in ps]
        changes = settle(classes.classes, self.assignment, free, self.total, default_retention)
        return self._with(classes, {}, changes, gone=member)

    def _with(
        self, classes: _Classes, added: Mapping[str, Holdings], changes: Mapping[str, Holdings], gone: str | None
    ) -> UniformGroup:
        assignment = dict(self.assignment)
        if gone is not None:
            del assignment[gone]
        assignment.update(added)
        for member, holdings in changes.items():
            classes.remove(member, size_of(assignment[member]))
            classes.add(member, size_of(holdings))
            assignment[member] = holdings
        return UniformGroup(self.topics, assignment, classes.classes, self.total)
