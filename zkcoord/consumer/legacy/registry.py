"""The legacy consumer's ZooKeeper operations: registration, the group's view, ownership claims, offsets.

Every read and write of the legacy protocol goes through :class:`LegacyRegistry`, so the rebalance logic
(:mod:`zkcoord.consumer.legacy.rebalance`) reads as Kafka 0.8.2's ``rebalance()`` and this module as its ``ZkUtils``
calls. Failures surface as the project's typed errors (:mod:`zkcoord.errors`); nothing here catches
:class:`~zkcoord.errors.ZkUnavailableError`: a rebalance attempt that meets one fails and is retried, as in Kafka.

Owner claims are tracked in :attr:`LegacyRegistry.held`: every owner znode this session may have created and not
deleted yet -- including one whose ``create`` was cut off by a connection loss, which may or may not have landed.
:meth:`LegacyRegistry.release` deletes them, but only those whose ``ephemeralOwner`` is this session, so it never
deletes another consumer's claim (Kafka deleted by path alone; see ``docs/legacy-protocol.md``).

Threads: one thread at a time (the consumer's rebalance thread, or the application's thread under the consumer's
ownership lock for :meth:`~LegacyRegistry.commit`).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from zkcoord.consumer.records import TopicPartition
from zkcoord.errors import BadVersionError, CodecError, NodeExistsError, NoNodeError, ZkCoordError, ZkError
from zkcoord.layout import legacy_paths as paths
from zkcoord.layout import paths as common
from zkcoord.layout.group_state import encode_owner
from zkcoord.layout.registrations import MemberRegistration, Pattern, TopicAssignment
from zkcoord.layout.znodes import decode_int, encode_int
from zkcoord.protocol.subscriptions import matches
from zkcoord.zk import ZkClient

log = logging.getLogger(__name__)


class AttemptFailedError(ZkCoordError):
    """A rebalance attempt cannot succeed with what ZooKeeper holds now; it is retried after the backoff."""

    retriable = True

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


@dataclass(frozen=True, slots=True)
class GroupView:
    """What one attempt read of the group (Kafka's ``AssignmentContext``).

    :ivar members: every readable member registration, by consumer id.
    :ivar partitions: partition count of every existing topic some member subscribes to (wildcards expanded
        against ``/brokers/topics``); a subscribed topic that does not exist is absent (0 partitions).
    :ivar rejected: ``(path, reason)`` of znodes that could not be decoded and were left out (S7).
    """

    members: dict[str, MemberRegistration]
    partitions: dict[str, int]
    rejected: list[tuple[str, str]] = field(default_factory=list)


class LegacyRegistry:
    """Kafka 0.8.2's ZooKeeper calls for one consumer of one group.  See the module docstring."""

    def __init__(self, zk: ZkClient, group: str, consumer_id: str) -> None:
        self.zk = zk
        self.group = group
        self.consumer_id = consumer_id
        #: Owner znodes this session may hold (see the module docstring).
        self.held: set[TopicPartition] = set()
        #: Kafka's ``checkpointedZkOffsets``: the offset last read or written per partition; unchanged ones are
        #: not written again.
        self.checkpointed: dict[TopicPartition, int] = {}

    @property
    def member_path(self) -> str:
        return paths.member(self.group, self.consumer_id)

    def ensure_paths(self) -> None:
        """Create the persistent parents this consumer needs (Kafka's ``setupCommonPaths`` plus the group's dirs)."""
        self.zk.ensure_paths([common.BROKER_IDS, common.BROKER_TOPICS, paths.ids(self.group)])

    def reset(self) -> None:
        """Forget claims and checkpoints: the session that held them expired (its ephemerals are gone)."""
        self.held.clear()
        self.checkpointed.clear()

    # --- membership -------------------------------------------------------------------------------------------

    def register(self, registration: MemberRegistration, wait_s: float, stop: threading.Event) -> None:
        """Create ``/consumers/<g>/ids/<consumerId>`` (ephemeral, Kafka's JSON).

        If it exists in this session (a create whose reply was lost) that is success.  If it exists in another
        session -- the previous incarnation's node that ZooKeeper has not removed yet (ZOOKEEPER-1740), or a live
        consumer with the same id -- wait for it to go, as Kafka's ``createEphemeralPathExpectConflictHandleZKBug``
        does, for at most ``wait_s`` seconds or until ``stop`` is set.

        :raises NodeExistsError: the node belongs to another session for longer than ``wait_s``.
        :raises ZkError: on other failures.
        """
        deadline = time.monotonic() + wait_s
        path = self.member_path
        while True:
            try:
                self.zk.create(path, registration.encode(), ephemeral=True, makepath=True)
            except NodeExistsError:
                stat = self.zk.exists(path)
                if stat is not None and stat.ephemeralOwner == self.zk.session_id:
                    return
                if stat is not None and (time.monotonic() >= deadline or stop.is_set()):
                    raise
                log.info("consumer %s: %s exists in another session; waiting for it to expire", self.consumer_id, path)
                stop.wait(0.1)
            else:
                return

    def deregister(self) -> None:
        """Delete this consumer's registration (absent already is fine)."""
        with contextlib.suppress(NoNodeError):
            self.zk.delete(self.member_path)

    def own_registration(self) -> MemberRegistration:
        """Read this consumer's registration back (Kafka re-reads its own ``TopicCount`` at every attempt).

        :raises AttemptFailedError: it is missing (the session expired and it is not registered again yet).
        :raises CodecError: it is malformed.
        """
        try:
            data, _ = self.zk.get(self.member_path)
        except NoNodeError as e:
            raise AttemptFailedError(f"own registration {self.member_path} is missing") from e
        return MemberRegistration.decode(data, self.member_path)

    def brokers(self) -> list[str]:
        """The live broker ids (children of ``/brokers/ids``)."""
        try:
            return sorted(self.zk.get_children(common.BROKER_IDS))
        except NoNodeError:
            return []

    def read_group(self) -> GroupView:
        """Every member's registration and the partition counts of every topic they subscribe to.

        A member listed but gone before its registration is read fails the attempt, as Kafka's ``readData`` did
        (ZkNoNodeException); a malformed registration or topic znode is left out and reported.

        :raises AttemptFailedError: a member vanished while the group was read.
        """
        children = sorted(self.zk.get_children(paths.ids(self.group)))
        member_paths = [paths.member(self.group, cid) for cid in children]
        members: dict[str, MemberRegistration] = {}
        rejected: list[tuple[str, str]] = []
        for cid, path, read in zip(children, member_paths, self.zk.get_many(member_paths), strict=True):
            if read is None:
                raise AttemptFailedError(f"member {cid} left while the group was being read")
            try:
                members[cid] = MemberRegistration.decode(read[0], path)
            except CodecError as e:
                rejected.append((path, e.reason))
        wanted: set[str] = set()
        wildcards = [m for m in members.values() if m.pattern is not Pattern.STATIC]
        for registration in members.values():
            if registration.pattern is Pattern.STATIC:
                wanted.update(registration.subscription)
        if wildcards:
            try:
                existing = self.zk.get_children(common.BROKER_TOPICS)
            except NoNodeError:
                existing = []
            wanted.update(t for t in existing if any(matches(m, t) for m in wildcards))
        topics = sorted(wanted)
        topic_paths = [common.topic(t) for t in topics]
        partitions: dict[str, int] = {}
        for topic, path, read in zip(topics, topic_paths, self.zk.get_many(topic_paths), strict=True):
            if read is None:
                continue
            try:
                partitions[topic] = TopicAssignment.decode(read[0], path).partition_count
            except CodecError as e:
                rejected.append((path, e.reason))
        return GroupView(members, partitions, rejected)

    # --- offsets ----------------------------------------------------------------------------------------------

    def read_offsets(self, tps: Iterable[TopicPartition]) -> tuple[dict[TopicPartition, int | None], list[str]]:
        """The committed offset of each partition (``None``: none yet, or malformed) and a reason per malformed one.

        What is read becomes the checkpoint, so an unchanged position is not written back.
        """
        wanted = sorted(tps)
        offset_paths = [paths.offset(self.group, tp.topic, tp.partition) for tp in wanted]
        out: dict[TopicPartition, int | None] = {}
        problems: list[str] = []
        for tp, path, read in zip(wanted, offset_paths, self.zk.get_many(offset_paths), strict=True):
            out[tp] = None
            if read is None:
                continue
            try:
                out[tp] = self.checkpointed[tp] = decode_int("committed offset", read[0], path)
            except CodecError as e:
                problems.append(f"{e}; starting from the start policy")
        return out, problems

    def commit(self, positions: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        """Write each changed position to ``/consumers/<g>/offsets/<t>/<p>``; return what was written.

        As Kafka 0.8.2's ``commitOffsetToZooKeeper`` (``updatePersistentPath``): an unconditional write, creating
        the node if needed, skipped when the value equals the checkpoint.  Nothing checks ownership: the caller
        passes only the partitions it believes it owns.

        :raises ZkError: on failure (positions before the failing one are written and checkpointed).
        """
        written: dict[TopicPartition, int] = {}
        for tp, offset in sorted(positions.items()):
            if self.checkpointed.get(tp) == offset:
                continue
            path = paths.offset(self.group, tp.topic, tp.partition)
            data = encode_int(offset)
            try:
                self.zk.set(path, data)
            except NoNodeError:
                try:
                    self.zk.create(path, data, makepath=True)
                except NodeExistsError:
                    self.zk.set(path, data)
            self.checkpointed[tp] = written[tp] = offset
        return written

    # --- ownership --------------------------------------------------------------------------------------------

    def claim(self, decided: Mapping[TopicPartition, str]) -> dict[TopicPartition, str]:
        """Kafka's ``reflectPartitionOwnershipDecision``: create every decided owner znode, ephemeral, valued with
        the owning thread id; return the conflicts, ``partition -> owner value seen`` (``""`` if it vanished).

        Every partition is tried, in order, one create at a time, even after a conflict.  A node that exists with
        this very thread id as its value counts as ours (Kafka's ``createEphemeralPathExpectConflict``: "exists
        ... during connection loss; this is ok").  Created nodes join :attr:`held`; the caller releases them when
        the attempt fails.

        :raises ZkError: on failures other than a conflict (what was created stays in :attr:`held`).
        """
        conflicts: dict[TopicPartition, str] = {}
        for topic in sorted({tp.topic for tp in decided}):
            self.zk.ensure_path(paths.owners(self.group, topic))
        for tp, thread in sorted(decided.items()):
            path = paths.owner(self.group, tp.topic, tp.partition)
            self.held.add(tp)  # before the create: a connection loss may leave it created
            try:
                self.zk.create(path, encode_owner(thread), ephemeral=True)
                continue
            except NodeExistsError:
                pass
            try:
                stored = self.zk.get(path)[0].decode("utf-8", "replace")
            except NoNodeError:
                stored = ""
            if stored != thread:
                self.held.discard(tp)
                conflicts[tp] = stored
        return conflicts

    def release(self) -> None:
        """Kafka's ``releasePartitionOwnership``: delete every owner znode in :attr:`held` that this session owns.

        Every one is tried; those deleted (or found gone, or found to be another session's) leave :attr:`held`
        and their checkpoint is dropped.

        :raises ZkError: the first failure, after trying them all (the failed ones stay in :attr:`held`).
        """
        first_error: ZkError | None = None
        for tp in sorted(self.held):
            try:
                self._delete_if_mine(paths.owner(self.group, tp.topic, tp.partition))
            except ZkError as e:
                first_error = first_error or e
                continue
            self.held.discard(tp)
            self.checkpointed.pop(tp, None)
        if first_error is not None:
            raise first_error

    def _delete_if_mine(self, path: str) -> None:
        stat = self.zk.exists(path)
        if stat is None or stat.ephemeralOwner != self.zk.session_id:
            return
        # Gone, or (impossible for our own ephemeral) changed: not ours to delete either way.
        with contextlib.suppress(NoNodeError, BadVersionError):
            self.zk.delete(path, version=stat.version)
