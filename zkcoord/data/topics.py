"""Topic administration: create, grow, list and describe topics in ``/brokers/topics`` (Kafka 0.8's format).

Replica placement follows Kafka's ``AdminUtils.assignReplicasToBrokers`` in its simplest form: over the sorted live
broker ids, partition ``p`` gets ``replication_factor`` consecutive brokers starting at ``p mod n``.  The data plane
here is a shared partition log, so the placement is recorded (tools of the era read it) but does not move data.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

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
from zkcoord.layout import paths
from zkcoord.layout.names import validate_partition_count, validate_topic
from zkcoord.layout.paths import MAX_BROKER_ID
from zkcoord.layout.registrations import TopicAssignment
from zkcoord.runtime.journal import Journal
from zkcoord.zk import ZkClient


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    assignment: TopicAssignment
    #: ``/brokers/topics/<t>``'s data version: how many times the topic has been altered.
    version: int

    @property
    def partitions(self) -> int:
        return self.assignment.partition_count


_BROKER_ID = re.compile(r"0|[1-9][0-9]{0,9}")


@dataclass(frozen=True, slots=True)
class CountChange:
    """What a reader of ``/brokers/topics/<t>`` does with a new version of it (:func:`follow_partition_count`)."""

    #: the partition count to follow from now on
    count: int
    #: why the znode's data was not taken (to journal as ``input.rejected``), or None
    refused: str | None = None
    #: the replica broker ids of each partition, as the data lists them (None when refused)
    replicas: tuple[tuple[int, ...], ...] | None = None


def follow_partition_count(known: int, data: bytes | None, path: str) -> CountChange:
    """The partition count to follow when topic znode ``path`` holds ``data``, given the count ``known`` so far (0:
    none, e.g. a topic new to the reader or deleted since).  Pure.

    Partitions are only ever added, as in Kafka (``TopicAdmin.alter`` refuses to shrink): data that is malformed
    (not JSON, wrong types, gaps, beyond 10 000 partitions) or that lists fewer partitions than known was not written
    by a topic admin, so it is refused with its reason and the known count kept.  Removing partitions would strip
    them from every group consuming them while producers that know them still write to them (S3); only deleting
    the topic ends it."""
    try:
        assignment = TopicAssignment.decode(data, path)
    except CodecError as e:
        return CountChange(known, e.reason)
    count = assignment.partition_count
    if count < known:
        return CountChange(known, f"partitions can be added, not removed: {known} known, {count} written; kept {known}")
    return CountChange(count, replicas=assignment.replicas)


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
        """Ids of the live brokers: registrations under ``/brokers/ids`` that are ephemeral, a broker session's.
        A persistent one (written by hand: no broker writes one, and no broker's end would remove it) and a name
        that is not a canonical broker id are not live brokers, and no replica is ever placed on them."""
        try:
            children = self.zk.get_children(paths.BROKER_IDS)
        except NoNodeError:
            return []
        ids = sorted(int(c) for c in children if _BROKER_ID.fullmatch(c) and int(c) <= MAX_BROKER_ID)
        reads = self.zk.get_many([paths.broker(i) for i in ids])
        return [i for i, got in zip(ids, reads, strict=True) if got is not None and got[1].ephemeralOwner != 0]

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
