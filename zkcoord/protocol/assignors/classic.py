"""Kafka 0.8.2's partition assignors, ``range`` and ``roundrobin``, and the thread-level vocabulary every assignor of
this project speaks, as pure deterministic functions (no I/O, no ZooKeeper, no state).

Vocabulary.  A *member* is named by its consumer id (``<group>_<host>-<ms>-<8 hex>``).  Its *subscription* is already
resolved to ``{topic: thread_count}`` (the caller expands wildcards).  Its *thread ids* are ``f"{consumer_id}-{n}"``
for ``n in range(thread_count)`` -- Kafka's ``ConsumerThreadId.toString`` -- and they are ordered as *strings*, as
Kafka's ``ConsumerThreadId.compare`` does, so ``c-10`` sorts before ``c-2``.  An *assignment* maps
``topic -> partition -> thread id``; only topics with at least one assigned partition appear, in sorted order.

Every assignor takes ``subscriptions`` (``consumer id -> {topic: thread_count}``) and ``partitions``
(``topic -> partition count``; a subscribed topic missing here has 0 partitions, as a missing
``/brokers/topics/<t>`` has for Kafka).  Kafka runs the assignor in every consumer and each keeps its own threads'
share; the coordinator runs it once and hands each member :func:`threads_of` the result.

Where Kafka compares strings it uses Java's ``String.compareTo`` (UTF-16 code units), reproduced by
:func:`~zkcoord.protocol.assignors.members.java_order`; for the ASCII names :mod:`zkcoord.layout.names` allows
this is plain ``str`` order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from zkcoord.errors import ConfigurationError
from zkcoord.protocol.assignors.members import java_order
from zkcoord.protocol.hashing import java_string_hash

#: ``topic -> partition -> thread id`` (the value of the owner znode ``/consumers/<g>/owners/<t>/<p>``).
Assignment = dict[str, dict[int, str]]
#: The signature every assignor has: ``(subscriptions, partitions) -> assignment``.
Assignor = Callable[[Mapping[str, Mapping[str, int]], Mapping[str, int]], Assignment]


def thread_id(consumer_id: str, n: int) -> str:
    """Kafka's ``ConsumerThreadId.toString``: ``thread_id("g_h-1-0a1b2c3d", 1) == "g_h-1-0a1b2c3d-1"``."""
    return f"{consumer_id}-{n}"


def consumer_of(thread: str) -> str | None:
    """The consumer id a thread id belongs to, or ``None`` if ``thread`` is not a thread id.

    The inverse of :func:`thread_id` is unambiguous because the thread number never contains ``-``: the consumer id
    is everything before the *last* ``-``.  So ``"g_h-1-aaaa-1-0"`` belongs to consumer ``g_h-1-aaaa-1`` (thread 0),
    never to ``g_h-1-aaaa`` -- which a prefix test would get wrong.  ``consumer_of("g_h-1-aaaa-10") == "g_h-1-aaaa"``.
    """
    consumer, sep, number = thread.rpartition("-")
    # Only the canonical spelling str(n) for n >= 0 is produced by thread_id; refuse "01", "+1", "" and the like.
    if not sep or not consumer or not number.isascii() or not number.isdigit() or str(int(number)) != number:
        return None
    return consumer


def check_inputs(subscriptions: Mapping[str, Mapping[str, int]], partitions: Mapping[str, int]) -> None:
    """:raises ConfigurationError: a negative thread count in ``subscriptions`` or partition count in ``partitions``."""
    for consumer, topics in subscriptions.items():
        for topic, count in topics.items():
            if count < 0:
                raise ConfigurationError(f"consumer {consumer!r} asks for {count} threads of topic {topic!r}")
    for topic, count in partitions.items():
        if count < 0:
            raise ConfigurationError(f"topic {topic!r} has a negative partition count ({count})")


def consumers_per_topic(subscriptions: Mapping[str, Mapping[str, int]]) -> dict[str, list[str]]:
    """Kafka's ``getConsumersPerTopic``: every subscribed topic -> the sorted thread ids of all members on it.

    A topic listed with 0 threads is present with only the other members' threads (possibly none), as in Kafka.

    >>> consumers_per_topic({"c2": {"t": 1}, "c1": {"t": 2, "u": 1}})
    {'t': ['c1-0', 'c1-1', 'c2-0'], 'u': ['c1-0']}
    """
    per_topic: dict[str, list[str]] = {}
    for consumer, topics in subscriptions.items():
        for topic, count in topics.items():
            per_topic.setdefault(topic, []).extend(thread_id(consumer, n) for n in range(count))
    return {topic: sorted(per_topic[topic], key=java_order) for topic in sorted(per_topic, key=java_order)}


def range_assign(subscriptions: Mapping[str, Mapping[str, int]], partitions: Mapping[str, int]) -> Assignment:
    """Kafka 0.8.2 ``RangeAssignor``: per topic, contiguous ranges of partitions to the sorted threads.

    For a topic with ``n`` partitions and ``T`` threads (of the members subscribed to it, sorted as strings),
    the thread at position ``i`` gets ``n // T`` partitions starting at ``(n // T) * i + min(i, n % T)``, plus one
    more if ``i < n % T``.  Kafka's own example: members C1, C2 with 2 streams each and partitions p0..p4:

    >>> range_assign({"C1": {"t": 2}, "C2": {"t": 2}}, {"t": 5})
    {'t': {0: 'C1-0', 1: 'C1-0', 2: 'C1-1', 3: 'C2-0', 4: 'C2-1'}}

    Members not subscribed to a topic take no part in it; surplus threads get nothing (Kafka logs "No broker
    partitions consumed by consumer thread ..."):

    >>> range_assign({"a": {"t": 1, "u": 1}, "b": {"t": 2}}, {"t": 2, "u": 3})
    {'t': {0: 'a-0', 1: 'b-0'}, 'u': {0: 'a-0', 1: 'a-0', 2: 'a-0'}}

    :raises ConfigurationError: a negative thread or partition count.
    """
    check_inputs(subscriptions, partitions)
    assignment: Assignment = {}
    for topic, threads in consumers_per_topic(subscriptions).items():
        count = partitions.get(topic, 0)
        if not threads or count == 0:
            continue
        per_thread, with_extra = divmod(count, len(threads))
        owners: dict[int, str] = {}
        for position, thread in enumerate(threads):
            start = per_thread * position + min(position, with_extra)
            size = per_thread + (1 if position + 1 <= with_extra else 0)
            for partition in range(start, start + size):
                owners[partition] = thread
        assignment[topic] = owners
    return assignment


def _require_uniform(per_topic: Mapping[str, list[str]], subscriptions: Mapping[str, Mapping[str, int]]) -> None:
    """Kafka's ``require``: every subscribed topic must have the same set of thread ids.

    That holds exactly when every member lists the same number of streams for every topic of the group (a topic it
    does not list counts as 0).  Members may differ from *each other*: ``{a: {t: 2, u: 2}, b: {t: 1, u: 1}}`` is legal.
    """
    head_topic, head = next(iter(per_topic.items()))
    if all(set(threads) == set(head) for threads in per_topic.values()):
        return
    # Name the first (sorted) member whose stream counts differ across the group's topics.
    for consumer in sorted(subscriptions, key=java_order):
        counts = {topic: subscriptions[consumer].get(topic, 0) for topic in per_topic}
        if len(set(counts.values())) > 1:
            shown = ", ".join(
                f"{topic}={count}" if topic in subscriptions[consumer] else f"{topic}=0 (not subscribed)"
                for topic, count in counts.items()
            )
            raise ConfigurationError(
                "round-robin assignment needs every consumer to subscribe to all of the group's topics with one "
                f"stream count for all of them; consumer {consumer!r} has {shown} (use the range assignor instead)"
            )
    raise AssertionError(f"unreachable: thread sets differ but no member does (head topic {head_topic!r})")


def roundrobin_assign(subscriptions: Mapping[str, Mapping[str, int]], partitions: Mapping[str, int]) -> Assignment:
    """Kafka 0.8.2 ``RoundRobinAssignor`` (KAFKA-687): deal every partition, in hash order, to the threads in turn.

    All ``(topic, partition)`` pairs of the group's topics are sorted by the Java ``String.hashCode`` of
    ``f"[{topic},{partition}]"`` (``TopicAndPartition.toString``; signed 32-bit compare), then dealt to the sorted
    thread ids, cycling.  The reference example: ``[t,0]`` = 87540032 < ``[t,1]`` < ``[t,2]`` < ``[t,3]`` < ``[u,0]``
    = 87569823 < ``[u,1]``, so with threads ``c1-0, c2-0`` the owners alternate:

    >>> roundrobin_assign({"c1": {"t": 1, "u": 1}, "c2": {"t": 1, "u": 1}}, {"t": 4, "u": 2})
    {'t': {0: 'c1-0', 1: 'c2-0', 2: 'c1-0', 3: 'c2-0'}, 'u': {0: 'c1-0', 1: 'c2-0'}}

    Ties (two pairs with the same hash, e.g. ``[Aa,0]`` and ``[BB,0]``): Kafka's ``sortWith`` is a stable sort
    (``java.util.Arrays.sort`` on objects), so tied pairs keep their input order -- partitions ascending within a
    topic, but topics in the iteration order of a Scala ``mutable.HashMap``, which is not a specified order.  Here
    ties are broken by topic name (Java string order), then partition number: the same within a topic, and
    deterministic across topics.

    With identical subscriptions the per-thread counts over all topics differ by at most one.

    :raises ConfigurationError: the members' subscriptions are not uniform (see :func:`_require_uniform`; Kafka
        fails the rebalance with ``IllegalArgumentException``), or a negative thread or partition count.
    """
    check_inputs(subscriptions, partitions)
    per_topic = consumers_per_topic(subscriptions)
    if not per_topic:
        return {}
    _require_uniform(per_topic, subscriptions)
    threads = next(iter(per_topic.values()))
    if not threads:
        # Every member listed its topics with 0 streams.  (Kafka's circular iterator would spin forever here.)
        return {}
    pairs = [(topic, partition) for topic in per_topic for partition in range(partitions.get(topic, 0))]
    pairs.sort(key=lambda pair: (java_string_hash(f"[{pair[0]},{pair[1]}]"), java_order(pair[0]), pair[1]))
    return collect((pair, threads[i % len(threads)]) for i, pair in enumerate(pairs))


def collect(owners: Iterable[tuple[tuple[str, int], str]]) -> Assignment:
    """Group ``((topic, partition), thread)`` pairs into an :data:`Assignment` with sorted topics and partitions (a
    pair repeated keeps its last thread)."""
    grouped: dict[str, dict[int, str]] = {}
    for (topic, partition), thread in owners:
        grouped.setdefault(topic, {})[partition] = thread
    return {topic: dict(sorted(grouped[topic].items())) for topic in sorted(grouped, key=java_order)}


def threads_of(assignment: Mapping[str, Mapping[int, str]], consumer_id: str) -> Assignment:
    """The part of ``assignment`` owned by the threads of ``consumer_id`` (topics where it owns nothing are absent).

    Ownership is decided with :func:`consumer_of`, not a prefix test, so consumer ``g_h-1-aaaa`` does not pick up
    the threads of consumer ``g_h-1-aaaa-1``:

    >>> threads_of({"t": {0: "g_h-1-aaaa-1-0", 1: "g_h-1-aaaa-1"}}, "g_h-1-aaaa")
    {'t': {1: 'g_h-1-aaaa-1'}}
    """
    mine: Assignment = {}
    for topic, owners in assignment.items():
        owned = {partition: thread for partition, thread in owners.items() if consumer_of(thread) == consumer_id}
        if owned:
            mine[topic] = owned
    return mine


def shares(assignment: Mapping[str, Mapping[int, str]]) -> dict[str, Assignment]:
    """``assignment`` split by consumer: ``threads_of(assignment, c)`` for every consumer ``c`` at once, in one pass
    (a coordinator that needs the share of every member does not scan the whole assignment per member).  Threads
    that are not thread ids belong to no consumer and are left out.

    >>> shares({"t": {0: "g_h-1-aaaa-0", 1: "g_h-1-bbbb-0", 2: "g_h-1-aaaa-1"}})["g_h-1-aaaa"]
    {'t': {0: 'g_h-1-aaaa-0', 2: 'g_h-1-aaaa-1'}}
    """
    out: dict[str, dict[str, dict[int, str]]] = {}
    owner_of: dict[str, str | None] = {}
    for topic, owners in assignment.items():
        for partition, thread in owners.items():
            if thread not in owner_of:
                owner_of[thread] = consumer_of(thread)
            consumer = owner_of[thread]
            if consumer is not None:
                out.setdefault(consumer, {}).setdefault(topic, {})[partition] = thread
    return out


def moved_partitions(old: Mapping[str, Mapping[int, str]], new: Mapping[str, Mapping[int, str]]) -> int:
    """How many partitions change owning *thread* between two assignments.

    A partition present in only one of them counts (it goes from no owner to one, or back), because its owner
    znode must be written or deleted either way.

    >>> moved_partitions({"t": {0: "a-0", 1: "a-0"}}, {"t": {0: "a-0", 1: "b-0", 2: "b-0"}})
    2
    """
    keys = {(topic, partition) for topic, owners in old.items() for partition in owners}
    keys |= {(topic, partition) for topic, owners in new.items() for partition in owners}
    return sum(1 for topic, partition in keys if old.get(topic, {}).get(partition) != new.get(topic, {}).get(partition))
