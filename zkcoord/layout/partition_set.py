"""An immutable set of topic-partitions, the one shape every KIP-848 record and rule uses for partitions.

:class:`PartitionSet` is a set of ``(topic, partition)`` pairs seen as a mapping ``topic -> frozenset of partitions``
in which a topic with none is absent.  It *is* a ``Mapping[str, frozenset[int]]``, so it compares equal to a dict
of the same content and goes wherever the assignors' ``Holdings`` go (:mod:`zkcoord.protocol.assignors.members`);
unlike a dict it is immutable and hashable, so the frozen records that hold it (:mod:`zkcoord.layout.kip848`) are
values.  Set operations (``&``, ``-``, ``|``, :meth:`~PartitionSet.isdisjoint`, :meth:`~PartitionSet.issubset`)
work topic by topic, as Kafka's ``CurrentAssignmentBuilder`` does.

Pure: no I/O.  Imports nothing from zkcoord.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from collections.abc import Set as AbstractSet
from typing import Self

#: What the set operations and the constructor accept: any mapping topic -> partitions (a PartitionSet included).
PartitionsLike = Mapping[str, AbstractSet[int]]


class PartitionSet(Mapping[str, frozenset[int]]):
    """An immutable set of topic-partitions: ``topic -> frozenset of partitions``, a topic with none absent.

    ``len()`` and iteration are over *topics* (it is a mapping); :meth:`count` is the number of partitions and
    :meth:`pairs` iterates ``(topic, partition)``.

    :raises ValueError: from the constructor, a topic that is not a non-empty string or a partition that is not an
        integer >= 0 (a bool is not a partition).
    """

    __slots__ = ("_hash", "_topics")

    def __init__(self, topics: Mapping[str, Iterable[int]] | None = None) -> None:
        normalized: dict[str, frozenset[int]] = {}
        for topic, partitions in (topics or {}).items():
            if not isinstance(topic, str) or not topic:
                raise ValueError(f"a topic must be a non-empty string, got {topic!r}")
            frozen = partitions if isinstance(partitions, frozenset) else frozenset(partitions)
            for p in frozen:
                if not isinstance(p, int) or isinstance(p, bool) or p < 0:
                    raise ValueError(f"a partition of {topic!r} must be an integer >= 0, got {p!r}")
            if frozen:
                normalized[topic] = frozen
        self._topics = normalized
        self._hash: int | None = None

    @classmethod
    def of(cls, topics: Mapping[str, Iterable[int]] | None) -> Self:
        """``topics`` as a PartitionSet: the very object when it already is one (no copy), else a normalized copy."""
        if isinstance(topics, cls):
            return topics
        return cls(topics)

    @classmethod
    def from_pairs(cls, pairs: Iterable[tuple[str, int]]) -> Self:
        grouped: dict[str, set[int]] = {}
        for topic, partition in pairs:
            grouped.setdefault(topic, set()).add(partition)
        return cls(grouped)

    # --- Mapping ---------------------------------------------------------------------------------------------------

    def __getitem__(self, topic: str) -> frozenset[int]:
        return self._topics[topic]

    def __iter__(self) -> Iterator[str]:
        return iter(self._topics)

    def __len__(self) -> int:
        return len(self._topics)

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(frozenset(self._topics.items()))
        return self._hash

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PartitionSet):
            return self._topics == other._topics
        if isinstance(other, Mapping):
            # A plain mapping with an empty entry is the same set as one without it.
            return self._topics == {t: frozenset(ps) for t, ps in other.items() if ps}
        return NotImplemented

    def __repr__(self) -> str:
        body = ", ".join(f"{t!r}: {sorted(ps)}" for t, ps in sorted(self._topics.items()))
        return f"PartitionSet({{{body}}})"

    # --- as a set of (topic, partition) ------------------------------------------------------------------------------

    def count(self) -> int:
        """The number of topic-partitions."""
        return sum(len(ps) for ps in self._topics.values())

    def pairs(self) -> Iterator[tuple[str, int]]:
        """Every ``(topic, partition)``, topics and partitions in no particular order."""
        for topic, partitions in self._topics.items():
            for p in partitions:
                yield topic, p

    def has(self, topic: str, partition: int) -> bool:
        return partition in self._topics.get(topic, ())

    def __and__(self, other: PartitionsLike) -> PartitionSet:
        return PartitionSet({t: ps & other[t] for t, ps in self._topics.items() if t in other})

    def __sub__(self, other: PartitionsLike) -> PartitionSet:
        return PartitionSet({t: ps - other[t] if t in other else ps for t, ps in self._topics.items()})

    def __or__(self, other: PartitionsLike) -> PartitionSet:
        merged: dict[str, frozenset[int]] = dict(self._topics)
        for t, ps in other.items():
            merged[t] = merged.get(t, frozenset()) | ps
        return PartitionSet(merged)

    def isdisjoint(self, other: PartitionsLike) -> bool:
        return all(ps.isdisjoint(other[t]) for t, ps in self._topics.items() if t in other)

    def issubset(self, other: PartitionsLike) -> bool:
        return all(t in other and ps <= other[t] for t, ps in self._topics.items())


#: the empty set
NO_PARTITIONS = PartitionSet()
