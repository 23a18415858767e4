"""Topic administration: create, grow, list and describe topics in ``/brokers/topics`` (Kafka 0.8's format).

Replica placement follows Kafka's ``AdminUtils.assignReplicasToBrokers`` in its simplest form: over the sorted live
broker ids, partition ``p`` gets ``replication_factor`` consecutive brokers starting at ``p mod n``.  The data plane
here is a shared partition log, so the placement is recorded (tools of the era read it) but does not move data.
"""

from __future__ import annotations

from dataclasses import dataclass

from zkcoord import paths
from zkcoord.errors import (
    BadVersionError,
    CodecError,
    ConfigurationError,
    NoBrokersError,
    NodeExistsError,
    NoNodeError,
    TopicExistsError,
    TopicNotFoundError,
)
from zkcoord.journal import Journal
from zkcoord.names import validate_partition_count, validate_topic
from zkcoord.zk import ZkClient
from zkcoord.znodes import TopicAssignment


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    assignment: TopicAssignment
    #: ``/brokers/topics/<t>``'s data version: how many times the topic has been altered.
    version: int

    @property
    def partitions(self) -> int:
        return self.assignment.partition_count


def place_replicas(broker_ids: list[int], first: int, count: int, replication_factor: int) -> list[tuple[int, ...]]:
    """Replica lists for partitions ``first .. first+count-1`` (pure; see the module docstring)."""
    ids = sorted(broker_ids)
    if not ids:
        raise NoBrokersError
    if not 1 <= replication_factor <= len(ids):
        raise ConfigurationError(
            f"replication factor {replication_factor} must be between 1 and the number of live brokers ({len(ids)})"
        )
    return [tuple(ids[(p + r) % len(ids)] for r in range(replication_factor)) for p in range(first, first + count)]


class TopicAdmin:
    """Topic operations over one :class:`ZkClient`.  Blocking; safe to use from one thread at a time."""

    def __init__(self, zk: ZkClient, journal: Journal | None = None) -> None:
        self.zk = zk
        self.journal = journal or Journal(None, "topic-admin")

    def live_brokers(self) -> list[int]:
        try:
            children = self.zk.get_children(paths.BROKER_IDS)
        except NoNodeError:
            return []
        return sorted(int(c) for c in children if c.isdigit())

    def create(self, name: str, partitions: int, replication_factor: int = 1) -> TopicInfo:
        """Create a topic.  :raises TopicExistsError, InvalidNameError, ConfigurationError, NoBrokersError:"""
        validate_topic(name)
        validate_partition_count(partitions)
        assignment = TopicAssignment(tuple(place_replicas(self.live_brokers(), 0, partitions, replication_factor)))
        self.zk.ensure_path(paths.BROKER_TOPICS)
        try:
            self.zk.create(paths.topic(name), assignment.encode())
        except NodeExistsError as e:
            raise TopicExistsError(name) from e
        self.journal.emit(
            "topic.created", topic=name, partitions=partitions, replicas=[list(r) for r in assignment.replicas]
        )
        return TopicInfo(name, assignment, 0)

    def alter(self, name: str, partitions: int) -> TopicInfo:
        """Grow a topic to ``partitions`` (never shrink, as in Kafka).  Conditional on the version read.

        :raises TopicNotFoundError, ConfigurationError: and :class:`BadVersionError` if altered concurrently.
        """
        validate_partition_count(partitions)
        current = self.describe(name)
        old = current.partitions
        if partitions < old:
            raise ConfigurationError(f"topic {name!r} has {old} partitions; partitions can be added, not removed")
        if partitions == old:
            raise ConfigurationError(f"topic {name!r} already has {old} partitions")
        rf = len(current.assignment.replicas[0]) or 1
        live = self.live_brokers()
        added = place_replicas(live, old, partitions - old, min(rf, max(len(live), 1)))
        assignment = TopicAssignment(current.assignment.replicas + tuple(added))
        try:
            stat = self.zk.set(paths.topic(name), assignment.encode(), version=current.version)
        except BadVersionError as e:
            raise BadVersionError(f"topic {name!r} was altered concurrently; retry", paths.topic(name)) from e
        self.journal.emit("topic.altered", topic=name, old_partitions=old, partitions=partitions)
        return TopicInfo(name, assignment, stat.version)

    def names(self) -> list[str]:
        try:
            return sorted(self.zk.get_children(paths.BROKER_TOPICS))
        except NoNodeError:
            return []

    def describe(self, name: str) -> TopicInfo:
        """Read one topic.  :raises TopicNotFoundError: ; :raises CodecError: if its znode is malformed."""
        validate_topic(name)
        path = paths.topic(name)
        try:
            data, stat = self.zk.get(path)
        except NoNodeError as e:
            raise TopicNotFoundError(name) from e
        return TopicInfo(name, TopicAssignment.decode(data, path), stat.version)

    def describe_all(self) -> tuple[list[TopicInfo], list[CodecError]]:
        """Every readable topic, and the errors of those whose znode is malformed (S7: reported, not fatal)."""
        infos: list[TopicInfo] = []
        bad: list[CodecError] = []
        for name in self.names():
            try:
                infos.append(self.describe(name))
            except CodecError as e:
                bad.append(e)
            except (TopicNotFoundError, ConfigurationError):
                continue  # deleted since listed, or a name no client of ours could have created
        return infos, bad
