"""KIP-848's member-level assignors in this project's thread-level form: what the coordinator calls.

A consumer here subscribes to ``{topic: thread_count}`` and fetches each partition on one of its threads
(``<consumer>-<n>``, :func:`~zkcoord.protocol.assignors.classic.thread_id`); Kafka's server-side assignors know
only members.  The rule: **balance per member, then spread over that member's threads.**

1. A member's subscription is its topics with at least one thread (a topic listed with 0 threads is not
   subscribed).  It *holds* a partition of ``previous`` when the owning thread id is one of its own
   (:func:`~zkcoord.protocol.assignors.classic.consumer_of`) and it subscribes to the topic -- even on a thread
   number it no longer has (the partition then stays with the member, on another of its threads).
2. The member-level assignor runs on that.  For the uniform assignor, a member over its quota gives up partitions
   so that its threads stay even (:meth:`Placement.retention`): first those on threads it no longer has, then one at a
   time from the thread holding the most of a topic.
3. Per member and topic, its partitions are spread over its threads ``0..k-1`` (in thread id order, as strings):
   for ``uniform``, stickily (:func:`spread_sticky`: counts per thread differ by at most one, and a thread keeps what
   it held up to its share); for ``range``, in contiguous blocks (:func:`spread_contiguous`, as Kafka 0.8's range).

So a member with more threads does not get more partitions (Kafka's member-level balance, unlike 0.8's range and
round-robin, which balance threads), and partitions change thread within a member only when its share of a topic
changes or its thread count does.
"""

from __future__ import annotations

from collections.abc import Mapping

from zkcoord.protocol.assignors.classic import Assignment, check_inputs, collect, consumer_of, thread_id
from zkcoord.protocol.assignors.members import GroupAssignment, java_order
from zkcoord.protocol.assignors.racks import Racks
from zkcoord.protocol.assignors.server_range import server_range
from zkcoord.protocol.assignors.uniform import uniform

ThreadSubscriptions = Mapping[str, Mapping[str, int]]
Previous = Mapping[str, Mapping[int, str]]


def member_topics(subscriptions: ThreadSubscriptions) -> dict[str, frozenset[str]]:
    """``consumer -> topics it has at least one thread on``."""
    seen: dict[int, frozenset[str]] = {}  # members sharing one subscription object are read once
    out: dict[str, frozenset[str]] = {}
    for member, topics in subscriptions.items():
        got = seen.get(id(topics))
        if got is None:
            got = seen[id(topics)] = frozenset(t for t, n in topics.items() if n > 0)
        out[member] = got
    return out


class Placement:
    """``previous`` (``topic -> partition -> thread``) read by member, as step 1 reads it: entries whose thread is
    not a thread id of a member of ``subscriptions`` subscribed to the topic are left out."""

    def __init__(self, subscriptions: ThreadSubscriptions, previous: Previous) -> None:
        self.subscriptions = subscriptions
        #: ``member -> topic -> partition -> thread``
        self.threads: dict[str, dict[str, dict[int, str]]] = {}
        owner_of: dict[str, str | None] = {}
        for topic, owners in previous.items():
            for partition, thread in owners.items():
                if thread not in owner_of:
                    owner_of[thread] = consumer_of(thread)
                member = owner_of[thread]
                if member is not None and subscriptions.get(member, {}).get(topic, 0) > 0:
                    self.threads.setdefault(member, {}).setdefault(topic, {})[partition] = thread
        self._keys: dict[str, dict[tuple[str, int], tuple[int, int, bytes, bytes, int]]] = {}

    def holdings(self) -> dict[str, dict[str, frozenset[int]]]:
        """``member -> topic -> partitions`` it holds."""
        return {m: {t: frozenset(ps) for t, ps in topics.items()} for m, topics in self.threads.items()}

    def retention(self, member: str, topic: str, partition: int) -> tuple[int, int, bytes, bytes, int]:
        """The :data:`~zkcoord.protocol.assignors.members.Retention` that keeps a member's threads even when it gives
        partitions up (step 2).

        For each of a member's threads on a topic, holding ``c`` partitions, its ``i``-th highest partition gets the
        rank ``c - i``: the partition given up first is the highest of the thread holding the most, and so on, so the
        counts go down evenly.  Partitions on a thread number the member no longer has go first; ties go by topic,
        thread and partition.  Computed for a member the first time it is asked (only members over their quota are).
        """
        keys = self._keys.get(member)
        if keys is None:
            keys = self._keys[member] = self._member_keys(member)
        return keys.get((topic, partition), (1, 0, java_order(topic), b"", partition))

    def _member_keys(self, member: str) -> dict[tuple[str, int], tuple[int, int, bytes, bytes, int]]:
        keys: dict[tuple[str, int], tuple[int, int, bytes, bytes, int]] = {}
        for topic, placed in self.threads.get(member, {}).items():
            per_thread: dict[str, list[int]] = {}
            for partition, thread in placed.items():
                per_thread.setdefault(thread, []).append(partition)
            count = self.subscriptions[member][topic]
            for thread, held in per_thread.items():
                gone = 0 if int(thread.rpartition("-")[2]) < count else 1
                held.sort(reverse=True)
                for i, partition in enumerate(held):
                    keys[topic, partition] = (gone, len(held) - i, java_order(topic), java_order(thread), partition)
        return keys


def _threads(member: str, count: int) -> list[str]:
    return sorted((thread_id(member, n) for n in range(count)), key=java_order)


def spread_sticky(partitions: frozenset[int], threads: list[str], held: Mapping[int, str]) -> dict[int, str]:
    """``partitions`` over ``threads`` (in order), counts differing by at most one, moving the fewest.

    A thread's share is ``len(partitions) // len(threads)``, one more for the ``len % threads`` threads holding the
    most now (ties in thread order); a thread keeps its lowest held partitions up to its share; the rest, ascending,
    fill the threads below their share in thread order.  ``held`` (``partition -> thread``) may name anything: only
    entries for a partition of ``partitions`` and a thread of ``threads`` count.

    >>> spread_sticky(frozenset({1, 2, 3, 7}), ["c-0", "c-1"], {1: "c-1", 2: "c-1", 3: "c-1", 7: "c-9"})
    {1: 'c-1', 2: 'c-1', 3: 'c-0', 7: 'c-0'}
    """
    mine: dict[str, list[int]] = {thread: [] for thread in threads}
    for partition in sorted(partitions):
        thread = held.get(partition)
        if thread is not None and thread in mine:
            mine[thread].append(partition)
    base, extra = divmod(len(partitions), len(threads))
    ranked = sorted(threads, key=lambda thread: -len(mine[thread]))  # stable: ties stay in thread order
    share = {thread: base + (1 if rank < extra else 0) for rank, thread in enumerate(ranked)}
    out: dict[int, str] = {}
    for thread in threads:
        out.update(dict.fromkeys(mine[thread][: share[thread]], thread))
    pool = iter(sorted(partitions - out.keys()))
    for thread in threads:
        kept = min(len(mine[thread]), share[thread])
        out.update((next(pool), thread) for _ in range(share[thread] - kept))
    return dict(sorted(out.items()))


def spread_contiguous(partitions: frozenset[int], threads: list[str]) -> dict[int, str]:
    """``partitions`` in ascending order cut into contiguous blocks over ``threads`` (in order), the first
    ``len % threads`` blocks one longer -- Kafka 0.8's range within one member.

    >>> spread_contiguous(frozenset({4, 5, 6}), ["c-0", "c-1"])
    {4: 'c-0', 5: 'c-0', 6: 'c-1'}
    """
    ordered = sorted(partitions)
    base, extra = divmod(len(ordered), len(threads))
    out: dict[int, str] = {}
    start = 0
    for position, thread in enumerate(threads):
        end = start + base + (1 if position < extra else 0)
        out.update(dict.fromkeys(ordered[start:end], thread))
        start = end
    return out


def _to_threads(result: GroupAssignment, subscriptions: ThreadSubscriptions, placement: Placement | None) -> Assignment:
    """Step 3: each member's partitions spread over its threads (stickily if ``placement`` is given)."""
    owners: list[tuple[tuple[str, int], str]] = []
    for member, holdings in result.items():
        placed = placement.threads.get(member, {}) if placement is not None else {}
        for topic, partitions in holdings.items():
            count = subscriptions[member][topic]
            if count == 1:  # the common case: one thread takes everything
                only = thread_id(member, 0)
                owners.extend(((topic, partition), only) for partition in partitions)
                continue
            threads = _threads(member, count)
            if placement is not None:
                spread = spread_sticky(partitions, threads, placed.get(topic, {}))
            else:
                spread = spread_contiguous(partitions, threads)
            owners.extend(((topic, partition), thread) for partition, thread in spread.items())
    return collect(owners)


def uniform_assign(
    subscriptions: ThreadSubscriptions,
    partitions: Mapping[str, int],
    previous: Previous | None = None,
    racks: Racks | None = None,
) -> Assignment:
    """The uniform assignor (:func:`~zkcoord.protocol.assignors.uniform.uniform`) on threads: balanced per member
    over all its topics, sticky to ``previous`` (``topic -> partition -> thread``, anything at all: entries that name
    no thread of a member subscribed to the topic are ignored), then spread over each member's threads.

    This is the assignor of incremental rebalances (:mod:`zkcoord.coordinator.plan` passes the partitions members
    fetch now as ``previous``).  Called with two arguments (the :data:`~zkcoord.protocol.assignors.classic.Assignor`
    signature) it has no previous owners.  ``racks`` (consumer racks, partition racks) are the member-level
    assignor's (:mod:`~zkcoord.protocol.assignors.racks`).

    Member ``b`` joins: ``a`` gives up two partitions, one from each of its threads, which stay even; ``b``, with
    one thread, gets as many partitions as ``a`` with two:

    >>> uniform_assign({"a": {"t": 2}, "b": {"t": 1}}, {"t": 4}, {"t": {0: "a-0", 1: "a-1", 2: "a-0", 3: "a-1"}})
    {'t': {0: 'a-0', 1: 'a-1', 2: 'b-0', 3: 'b-0'}}

    :raises ConfigurationError: a negative thread or partition count.
    """
    check_inputs(subscriptions, partitions)
    placement = Placement(subscriptions, previous or {})
    result = uniform(member_topics(subscriptions), partitions, placement.holdings(), placement.retention, racks)
    return _to_threads(result, subscriptions, placement)


def server_range_assign(
    subscriptions: ThreadSubscriptions, partitions: Mapping[str, int], instance_ids: Mapping[str, str] | None = None
) -> Assignment:
    """KIP-848's server-side range (:func:`~zkcoord.protocol.assignors.server_range.server_range`) on threads:
    each member's range of a topic cut into contiguous blocks over its threads.  With one thread per member and no
    instance ids it is Kafka 0.8's range over member ids.

    >>> server_range_assign({"C1": {"t": 2}, "C2": {"t": 1}}, {"t": 5})
    {'t': {0: 'C1-0', 1: 'C1-0', 2: 'C1-1', 3: 'C2-0', 4: 'C2-0'}}

    :raises ConfigurationError: a negative thread or partition count.
    """
    check_inputs(subscriptions, partitions)
    return _to_threads(server_range(member_topics(subscriptions), partitions, instance_ids), subscriptions, None)
