"""The member-level vocabulary of KIP-848's server-side assignors, and the input checks they share.

KIP-848's assignors (Kafka's ``group-coordinator`` ``UniformAssignor`` and ``RangeAssignor``) assign partitions to
*members*, not to threads: a member subscribes to a set of topics and receives, per topic, a set of partitions.  The
thread-level view of this project (``topic -> partition -> "<consumer>-<n>"``) is built on top of it in
:mod:`zkcoord.protocol.assignors.threads`.

Vocabulary.

* :data:`Holdings`: one member's partitions, ``topic -> frozenset of partitions``; a topic with none is absent.
* :data:`GroupAssignment`: ``member id -> Holdings`` for every member of the group (a member given nothing maps to an
  empty mapping).  Iteration orders are not part of any contract: compare as mappings.  An assignor may hand back the
  very mapping objects of its ``current`` input for members whose partitions do not change (Kafka's copy-on-write):
  treat inputs and results as immutable.
* *Member order* is Java's ``String.compareTo`` on member ids (:func:`java_order`), which is also ``str`` order for
  the ASCII names :mod:`zkcoord.layout.names` allows.  Every tie an assignor breaks, it breaks in member order, so the
  result never depends on the iteration order of a mapping it is given.

Everything here is pure: no I/O, no state, no clock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from collections.abc import Set as AbstractSet
from typing import Any

from zkcoord.errors import ConfigurationError

#: one member's partitions: ``topic -> partitions`` (a topic with none is absent)
Holdings = Mapping[str, frozenset[int]]
#: ``member id -> Holdings`` for every member
GroupAssignment = dict[str, Holdings]
#: ``member id -> subscribed topics``
MemberSubscriptions = Mapping[str, AbstractSet[str]]
#: a member's current holdings as an assignor receives them (Kafka's "current assignment": the previous target)
CurrentAssignment = Mapping[str, Mapping[str, frozenset[int]]]
#: ``retention(member, topic, partition)``: a sort key over one member's partitions; a member that must give some
#: up keeps those with the *smallest* keys.  Keys of one member's partitions must be distinct and comparable.
Retention = Callable[[str, str, int], Any]


def java_order(text: str) -> bytes:
    """Sort key equal to Java's ``String.compareTo``: UTF-16 big-endian bytes compare as UTF-16 code units do."""
    return text.encode("utf-16-be", "surrogatepass")


def topic_partition_order(topic: str, partition: int) -> tuple[bytes, int]:
    """The default :data:`Retention` order, and the order of every pool of partitions: topic (Java order), then
    partition number."""
    return java_order(topic), partition


def default_retention(member: str, topic: str, partition: int) -> tuple[bytes, int]:
    """Keep a member's lowest partitions in (topic, partition) order; give up the highest first."""
    return topic_partition_order(topic, partition)


def check_counts(partitions: Mapping[str, int]) -> None:
    """:raises ConfigurationError: a negative partition count."""
    for topic, count in partitions.items():
        if count < 0:
            raise ConfigurationError(f"topic {topic!r} has a negative partition count ({count})")


def effective_subscriptions(
    subscriptions: MemberSubscriptions, partitions: Mapping[str, int]
) -> dict[str, frozenset[str]]:
    """Each member's subscribed topics that have at least one partition (a topic missing from ``partitions`` has
    none, as a missing ``/brokers/topics/<t>`` has).  Every member is kept, an empty set included.

    Members with equal subscriptions get the same ``frozenset`` object, so that deciding whether a group is
    homogeneous (:func:`common_topics`) costs one hash per member, not one per topic.
    """
    seen: dict[frozenset[str], frozenset[str]] = {}
    out: dict[str, frozenset[str]] = {}
    for member, topics in subscriptions.items():
        key = topics if isinstance(topics, frozenset) else frozenset(topics)
        topic_set = seen.get(key)
        if topic_set is None:
            topic_set = seen[key] = frozenset(t for t in key if partitions.get(t, 0) > 0)
        out[member] = topic_set
    return out


def common_topics(subscriptions: Mapping[str, frozenset[str]]) -> frozenset[str] | None:
    """The one topic set every member subscribes to, or ``None`` if members differ (a heterogeneous group).

    >>> common_topics(effective_subscriptions({"a": {"t", "gone"}, "b": {"t"}}, {"t": 2}))
    frozenset({'t'})
    >>> common_topics(effective_subscriptions({"a": {"t", "u"}, "b": {"t"}}, {"t": 2, "u": 1})) is None
    True
    """
    distinct = set(subscriptions.values())
    if len(distinct) == 1:
        return next(iter(distinct))
    return frozenset() if not distinct else None


def member_order(members: Iterable[str]) -> list[str]:
    """``members`` sorted in member order."""
    return sorted(members, key=java_order)


def valid_holdings(
    order: list[str],
    subscriptions: Mapping[str, frozenset[str]],
    partitions: Mapping[str, int],
    current: CurrentAssignment | None,
) -> tuple[dict[str, Holdings], dict[str, set[int]]]:
    """What each member of ``order`` may keep of ``current``, and every kept partition per topic.

    A member keeps its current partitions of topics it still subscribes to (with at least one partition) that are
    within the topic's partition count and that no member before it in ``order`` already keeps: a partition two
    members claim stays with the first of them (a consistent ``current`` -- a previous result -- has no such
    conflicts; this only makes garbage harmless).  Entries of members outside ``order`` are ignored: a member that
    left frees its partitions.

    Returns ``(holdings, claimed)``: ``holdings[m]`` for every member of ``order`` -- the very mapping of
    ``current[m]`` when all of it is kept, so an unchanged member costs no copy -- and ``claimed[t]``, the kept
    partitions of every topic some member of ``order`` subscribes to.
    """
    current = current or {}
    claimed: dict[str, set[int]] = {t: set() for topics in set(subscriptions.values()) for t in topics}
    out: dict[str, Holdings] = {}
    for member in order:
        mine = current.get(member)
        if not mine:
            out[member] = {} if mine is None else mine
            continue
        topics = subscriptions[member]
        kept: dict[str, frozenset[int]] = {}
        whole = True
        for topic, held in mine.items():
            if topic not in topics or not held:
                whole = False
                continue
            taken = claimed[topic]
            valid = held
            if (
                not isinstance(held, frozenset)
                or min(held) < 0
                or max(held) >= partitions[topic]
                or not taken.isdisjoint(held)
            ):
                valid = frozenset(p for p in held if 0 <= p < partitions[topic] and p not in taken)
                whole = False
                if not valid:
                    continue
            taken.update(valid)
            kept[topic] = valid
        out[member] = mine if whole else kept
    return out, claimed


def size_of(holdings: Holdings) -> int:
    """How many partitions ``holdings`` has."""
    return sum(len(ps) for ps in holdings.values())


def freeze(holdings: Mapping[str, Iterable[int]]) -> dict[str, frozenset[int]]:
    """``holdings`` as a :data:`Holdings` value: frozensets, empty topics left out."""
    return {topic: frozenset(ps) for topic, ps in holdings.items() if ps}
