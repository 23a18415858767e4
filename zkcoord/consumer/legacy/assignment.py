"""The legacy ownership decision: every member computes the whole assignment and keeps its own threads' part.

Pure (no I/O): :func:`decide` takes the group as one attempt read it
(:class:`~zkcoord.consumer.legacy.registry.GroupView`) and runs Kafka 0.8.2's assignor over *all* members, exactly as
``PartitionAssignor.assign`` does inside every
``ZookeeperConsumerConnector``.  Members that read the same ZooKeeper state decide the same thing; members that
read different states (one saw a member join that the other did not yet) decide differently, and their claims
conflict: the legacy protocol's herd and split-brain behaviour comes from here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from zkcoord.consumer.legacy.registry import GroupView
from zkcoord.consumer.records import TopicPartition
from zkcoord.protocol.assignors import Assignment, get_assignor, threads_of
from zkcoord.protocol.subscriptions import resolve


@dataclass(frozen=True, slots=True)
class Decision:
    """One member's outcome of the assignor.

    :ivar assignment: the whole group's assignment, ``topic -> partition -> thread id``.
    :ivar mine: this consumer's part of it, ``partition -> thread id``.
    :ivar subscriptions: every member's subscription resolved against the existing topics.
    """

    assignment: Assignment
    mine: dict[TopicPartition, str]
    subscriptions: dict[str, dict[str, int]]


def subscriptions_of(view: GroupView) -> dict[str, dict[str, int]]:
    """Each member's ``{topic: threads}`` over the topics that exist (Kafka's ``getConsumersPerTopic`` input).

    Wildcards match whole topic names (Java ``String.matches``), as the coordinator resolves them
    (:func:`zkcoord.protocol.subscriptions.resolve`), so both protocols agree on what a registration covers.
    """
    return {cid: resolve(registration, view.partitions)[0] for cid, registration in sorted(view.members.items())}


def decide(consumer_id: str, view: GroupView, assignor: str) -> Decision:
    """Run ``assignor`` (``range`` or ``roundrobin``) over the whole group; keep ``consumer_id``'s threads' part.

    :raises ConfigurationError: the assignor refuses the group (round-robin over non-uniform subscriptions, as
        Kafka's ``require`` did); the attempt fails and is retried like any other.
    """
    subscriptions = subscriptions_of(view)
    partitions: Mapping[str, int] = {t: view.partitions[t] for subs in subscriptions.values() for t in subs}
    assignment = get_assignor(assignor)(subscriptions, partitions)
    mine = {
        TopicPartition(topic, partition): thread
        for topic, owners in threads_of(assignment, consumer_id).items()
        for partition, thread in owners.items()
    }
    return Decision(assignment, mine, subscriptions)
