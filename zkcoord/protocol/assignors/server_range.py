"""KIP-848's server-side ``range`` assignor, member level (Kafka's ``group-coordinator`` ``RangeAssignor``, as
rewritten in KAFKA-16944): per topic, contiguous ranges of partitions to the topic's subscribers in a fixed order.

The order: members with an instance id (static membership) first, by instance id, then the others by member id
(both in Java string order).  For a topic with ``n`` partitions and ``s`` subscribers, the subscriber at position
``i`` of that order gets ``n // s`` partitions, one more if ``i < n % s``, starting where the previous one ended.  So
when every member subscribes to the same topics and the topics have equal partition counts, each member gets the
same partition numbers of every topic (co-partitioning, for joins of keyed streams):

>>> result = server_range(dict.fromkeys(["M0", "M1"], {"T1", "T2"}), {"T1": 3, "T2": 3})
>>> {m: {t: sorted(ps) for t, ps in sorted(h.items())} for m, h in result.items()}
{'M0': {'T1': [0, 1], 'T2': [0, 1]}, 'M1': {'T1': [2], 'T2': [2]}}

It is not sticky, as Kafka's is not since that rewrite: the result depends only on the subscriptions, the partition
counts and the order, so it is stable only while member ids (or instance ids) and their number stay the same.  That
is what instance ids are for: a static member that restarts under a new member id keeps its place in the order.
"""

from __future__ import annotations

from collections.abc import Mapping

from zkcoord.protocol.assignors.members import (
    GroupAssignment,
    MemberSubscriptions,
    check_counts,
    effective_subscriptions,
    java_order,
)


def range_order(members: list[str], instance_ids: Mapping[str, str]) -> list[str]:
    """Kafka's ``sortMemberIds``: members with an instance id first, by instance id, then the others by member id.
    (Instance ids are unique in a group; were two equal, member id would break the tie.)

    >>> range_order(["b", "a", "z", "y"], {"z": "i1", "y": "i2"})
    ['z', 'y', 'a', 'b']
    """
    static = sorted(
        (m for m in members if m in instance_ids), key=lambda m: (java_order(instance_ids[m]), java_order(m))
    )
    dynamic = sorted((m for m in members if m not in instance_ids), key=java_order)
    return static + dynamic


def server_range(
    subscriptions: MemberSubscriptions,
    partitions: Mapping[str, int],
    instance_ids: Mapping[str, str] | None = None,
) -> GroupAssignment:
    """The server-side range assignment of ``partitions`` (``topic -> count``) to the members of
    ``subscriptions`` (``member -> topics``); ``instance_ids`` maps static members to their instance id.

    Contract: every member is in the result; every partition of every subscribed topic is assigned exactly once, to a
    subscriber, in contiguous ranges whose sizes differ by at most one per topic, the larger ranges first in
    :func:`range_order`.  Topics with no partitions (or missing from ``partitions``) are assigned to nobody.

    :raises ConfigurationError: a negative partition count.
    """
    check_counts(partitions)
    subs = effective_subscriptions(subscriptions, partitions)
    order = range_order(list(subs), instance_ids or {})
    result: dict[str, dict[str, frozenset[int]]] = {member: {} for member in order}
    subscribers: dict[str, list[str]] = {}
    for member in order:
        for topic in subs[member]:
            subscribers.setdefault(topic, []).append(member)
    for topic, members in subscribers.items():
        per_member, extra = divmod(partitions[topic], len(members))
        start = 0
        for position, member in enumerate(members):
            end = start + per_member + (1 if position < extra else 0)
            if end > start:
                result[member][topic] = frozenset(range(start, end))
            start = end
    return dict(result)
