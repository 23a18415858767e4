"""KIP-848's server-side ``uniform`` assignor, member level: the default assignor of the consumer protocol
(Kafka's ``UniformAssignor``), and this project's assignor for incremental rebalances.

Priorities, as Kafka's: balance over all of a member's topics first, then stickiness (keep partitions where they
are).  :func:`uniform` looks at the subscriptions and dispatches, as Kafka does on ``SubscriptionType``:

* every member subscribes to the same topics (*homogeneous*): :mod:`~zkcoord.protocol.assignors.homogeneous` --
  per-member totals over all topics differ by at most one, and the fewest partitions move that such a result allows;
* otherwise (*heterogeneous*): :mod:`~zkcoord.protocol.assignors.heterogeneous` -- valid, and balanced as Kafka's
  assignor tests define it (no partition can move to another subscriber of its topic holding two or more fewer).

Subscribed topics with no partitions (or missing from ``partitions``) count for neither: a group whose members differ
only in such topics is homogeneous.  The thread-level form the coordinator uses is
:func:`zkcoord.protocol.assignors.threads.uniform_assign`.
"""

from __future__ import annotations

from collections.abc import Mapping

from zkcoord.protocol.assignors.heterogeneous import assign_heterogeneous
from zkcoord.protocol.assignors.homogeneous import assign_homogeneous
from zkcoord.protocol.assignors.members import (
    CurrentAssignment,
    GroupAssignment,
    MemberSubscriptions,
    Retention,
    check_counts,
    common_topics,
    default_retention,
    effective_subscriptions,
    member_order,
    valid_holdings,
)
from zkcoord.protocol.assignors.racks import Racks, in_use


def uniform(
    subscriptions: MemberSubscriptions,
    partitions: Mapping[str, int],
    current: CurrentAssignment | None = None,
    retention: Retention = default_retention,
    racks: Racks | None = None,
) -> GroupAssignment:
    """The uniform assignment of ``partitions`` (``topic -> count``) to the members of ``subscriptions``
    (``member -> topics``), as sticky to ``current`` (``member -> topic -> partitions``, typically the previous
    result) as balance allows.

    Contract: every member of ``subscriptions`` is in the result; every partition of every topic some member
    subscribes to is assigned exactly once, to a subscriber; the result depends only on the values of the inputs,
    never on the iteration order of a mapping.  ``current`` may hold anything -- members that left, topics nobody
    subscribes to, partitions beyond a topic's end, a partition claimed twice: what is not valid is ignored (see
    :func:`~zkcoord.protocol.assignors.members.valid_holdings`).  ``retention`` chooses which partitions a member
    over its quota gives up (by default its highest in (topic, partition) order).  ``racks`` (member racks and
    partition racks) chooses, where racks are in use, which partitions move, never how many, nor which stay
    (:mod:`~zkcoord.protocol.assignors.racks`); None, or racks not in use: the rack-blind assignment.

    Homogeneous, the 3-member, 10-topic case of issue 16 (the per-topic ``sticky`` it replaces gave all ten
    partitions to one member):

    >>> result = uniform(dict.fromkeys("abc", {f"t{i}" for i in range(10)}), {f"t{i}": 1 for i in range(10)})
    >>> sorted(sum(len(ps) for ps in result[m].values()) for m in "abc")
    [3, 3, 4]

    A member joining takes its share from those above the new quota, and nothing else moves:

    >>> before = {"a": {"t": frozenset({0, 1, 2})}, "b": {"t": frozenset({3, 4, 5})}}
    >>> after = uniform(dict.fromkeys("abc", {"t"}), {"t": 6}, before)
    >>> {m: sorted(after[m]["t"]) for m in "abc"}
    {'a': [0, 1], 'b': [3, 4], 'c': [2, 5]}

    :raises ConfigurationError: a negative partition count.
    """
    check_counts(partitions)
    subs = effective_subscriptions(subscriptions, partitions)
    order = member_order(subs)
    holdings, claimed = valid_holdings(order, subs, partitions, current)
    common = common_topics(subs)
    if common is not None:
        counts = {t: partitions[t] for t in common}
        return assign_homogeneous(order, counts, holdings, claimed, retention, racks=in_use(racks, order, counts))
    topics = {t: partitions[t] for topics in set(subs.values()) for t in topics}
    return assign_heterogeneous(
        order, subs, topics, holdings, claimed=claimed, retention=retention, racks=in_use(racks, order, topics)
    )
