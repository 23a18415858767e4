"""Committed offsets under ``/consumers/groups/<g>/offsets/<t>/<p>``, fenced by the ownership registry (S3).

When a consumer starts fetching a partition it reads the partition's owner znode (written by the coordinator in the
same transaction as the start-fetcher) and remembers its version.  Every commit is a transaction that first checks
that version: if the coordinator has since given the partition to another thread (a new owner value, so a new
version) or removed it, the check fails and the commit of that partition is refused with
:class:`OffsetCommitFencedError`.  A consumer that no longer owns a partition therefore cannot move its offset.

Threads: methods are called by the consumer's command thread and by ``poll()``/``commit()`` on the application's
thread; a lock serialises them.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from consumer.records import TopicPartition
from zkcoord import paths
from zkcoord.errors import BadVersionError, CodecError, NodeExistsError, NoNodeError, ZkCoordError
from zkcoord.zk import WatchEvent, ZkClient
from zkcoord.znodes import decode_int, decode_owner, encode_int, encode_owner


class OffsetCommitFencedError(ZkCoordError):
    """The consumer no longer owns these partitions; their offsets were not committed."""

    def __init__(self, group: str, partitions: list[TopicPartition], committed: Mapping[TopicPartition, int]) -> None:
        self.group = group
        self.partitions = partitions
        self.committed = dict(committed)
        names = ", ".join(f"{tp.topic}/{tp.partition}" for tp in partitions)
        super().__init__(f"group {group}: not the owner of {names} any more; their offsets were not committed")


@dataclass(frozen=True, slots=True)
class Claims:
    """What :meth:`OffsetStore.claim` found: the partitions claimed, the reasons others were refused, and (when
    waiting for hand-overs) those whose owner znode does not name the expected thread yet."""

    claims: dict[TopicPartition, Claim]
    problems: list[str]
    pending: set[TopicPartition]


@dataclass(frozen=True, slots=True)
class Claim:
    """What a consumer knows of a partition it was told to fetch."""

    thread: str
    owner_version: int
    committed: int | None
    offset_exists: bool


class OffsetStore:
    def __init__(self, zk: ZkClient, group: str) -> None:
        self.zk = zk
        self.group = group
        self._lock = threading.Lock()
        self._claims: dict[TopicPartition, Claim] = {}
        self._committed: dict[TopicPartition, int] = {}
        self._ensured: set[str] = set()

    def claim(
        self,
        ownership: Mapping[TopicPartition, str],
        *,
        add: bool = False,
        wait: Callable[[WatchEvent], None] | None = None,
    ) -> Claims:
        """Read owner versions and committed offsets of the partitions a start-fetcher gives us.

        Returns the claims and, for partitions whose registry does not name the expected thread, a reason each
        (those partitions are not fetched).  The claims replace those held, or with ``add`` join them (an
        incremental start-fetcher: the partitions kept are not read again).  With ``wait`` (partitions handed over
        by their previous owner), each owner znode read gets a one-shot watch calling ``wait``, and a partition
        whose owner znode names another thread (or is absent) is *pending*, not a problem.
        :raises ZkError: on I/O failure.
        """
        tps = sorted(ownership)
        for topic in sorted({tp.topic for tp in tps} - self._ensured):
            self.zk.ensure_path(paths.offsets(self.group, topic))
            self._ensured.add(topic)  # persistent: once there, it stays (a round trip saved per start-fetcher)
        owner_paths = [paths.owner(self.group, tp.topic, tp.partition) for tp in tps]
        offset_paths = [paths.offset(self.group, tp.topic, tp.partition) for tp in tps]
        reads = self.zk.get_many(owner_paths + offset_paths, watch=wait, watched=set(owner_paths))
        claims: dict[TopicPartition, Claim] = {}
        problems: list[str] = []
        pending: set[TopicPartition] = set()
        for i, tp in enumerate(tps):
            owner, offset = reads[i], reads[len(tps) + i]
            if owner is None and wait is not None:
                pending.add(tp)
                continue
            if owner is None:
                problems.append(f"{owner_paths[i]}: no owner registered")
                continue
            try:
                holder = decode_owner(owner[0], owner_paths[i])
            except CodecError as e:
                problems.append(str(e))
                continue
            if holder != ownership[tp] and wait is not None:
                pending.add(tp)
                continue
            if holder != ownership[tp]:
                problems.append(f"{owner_paths[i]}: owned by {holder}, not {ownership[tp]}")
                continue
            committed = None
            if offset is not None:
                try:
                    committed = decode_int("committed offset", offset[0], offset_paths[i])
                except CodecError as e:
                    problems.append(f"{e}; starting from the start policy")
            claims[tp] = Claim(ownership[tp], owner[1].version, committed, offset is not None)
        with self._lock:
            if not add:
                self._claims, self._committed = {}, {}
            self._claims.update(claims)
            self._committed.update({tp: c.committed for tp, c in claims.items() if c.committed is not None})
        return Claims(claims, problems, pending)

    def release(self, tps: Iterable[TopicPartition] | None = None) -> None:
        """Forget the claims on ``tps`` (None: all of them); their offsets can no longer be committed by us."""
        with self._lock:
            if tps is None:
                self._claims, self._committed = {}, {}
                return
            for tp in tps:
                self._claims.pop(tp, None)
                self._committed.pop(tp, None)

    def committed(self) -> dict[TopicPartition, int]:
        with self._lock:
            return dict(self._committed)

    def commit(
        self,
        positions: Mapping[TopicPartition, int],
        ack: str | None = None,
        handover: Mapping[TopicPartition, str] | None = None,
    ) -> dict[TopicPartition, int]:
        """Commit ``positions`` (next offset to consume) of partitions we still own; return what was written.

        Only changed positions are written, in one transaction that checks every owner version first.  ``ack``: a
        command to delete in that same transaction (so it is acknowledged exactly when the commit lands), or alone
        when there is nothing to write; already gone is fine.  ``handover``: partitions (claimed by us, and no
        longer fetched) whose owner znode that same transaction sets to the given thread, conditional on the version
        we claimed -- the new owner starts them once it reads itself there, so after this commit (S2, S3).  Only
        partitions we hold a claim on can be handed over; others are left out.
        :raises OffsetCommitFencedError: for partitions we no longer own (the others are committed).
        :raises ZkError: on I/O failure (nothing is committed then).
        """
        with self._lock:
            todo = {tp: off for tp, off in positions.items() if tp in self._claims and self._committed.get(tp) != off}
            fenced: list[TopicPartition] = [tp for tp in positions if tp not in self._claims]
            handing = {tp: thread for tp, thread in (handover or {}).items() if tp in self._claims}
            written: dict[TopicPartition, int] = {}
            while todo or handing:
                try:
                    self._commit_once(todo, ack, handing)
                except NodeExistsError as e:
                    # Our record said "absent" but the node exists (an earlier commit whose reply was lost):
                    # set it instead of creating it.
                    tp_created = self._offset_of_path(e.path, todo)
                    if tp_created is None:
                        raise
                    c = self._claims[tp_created]
                    self._claims[tp_created] = Claim(c.thread, c.owner_version, c.committed, True)
                    continue
                except (BadVersionError, NoNodeError) as e:
                    if ack is not None and e.path == ack:
                        ack = None  # acknowledged already (a reply lost earlier): commit alone
                        continue
                    lost = self._owner_of_path(e.path, [*todo, *handing])
                    if lost is None:
                        raise
                    fenced.append(lost)
                    del self._claims[lost]  # it is somebody else's now
                    todo.pop(lost, None)
                    handing.pop(lost, None)
                    continue
                ack = None  # deleted with the commit
                written.update(todo)
                todo, handing = {}, {}
            if ack is not None:  # nothing (left) to commit: acknowledge alone
                with contextlib.suppress(NoNodeError):
                    self.zk.delete(ack)
        if fenced:
            raise OffsetCommitFencedError(self.group, sorted(set(fenced)), written)
        return written

    def _commit_once(
        self, todo: Mapping[TopicPartition, int], ack: str | None, handover: Mapping[TopicPartition, str]
    ) -> None:
        """One transaction: check every owner version (setting those handed over), write every offset, delete
        ``ack``.  Lock held."""
        txn = self.zk.transaction()
        for tp in sorted({*todo, *handover}):
            owner, version = paths.owner(self.group, tp.topic, tp.partition), self._claims[tp].owner_version
            if tp in handover:
                txn.set_data(owner, encode_owner(handover[tp]), version)
            else:
                txn.check(owner, version)
        for tp in sorted(todo):
            path = paths.offset(self.group, tp.topic, tp.partition)
            if self._claims[tp].offset_exists:
                txn.set_data(path, encode_int(todo[tp]))
            else:
                txn.create(path, encode_int(todo[tp]))
        if ack is not None:
            txn.delete(ack)
        txn.commit()
        for tp, off in todo.items():
            self._claims[tp] = Claim(self._claims[tp].thread, self._claims[tp].owner_version, off, True)
            self._committed[tp] = off

    def _offset_of_path(self, path: str | None, todo: Mapping[TopicPartition, int]) -> TopicPartition | None:
        for tp in todo:
            if path == paths.offset(self.group, tp.topic, tp.partition):
                return tp
        return None

    def _owner_of_path(self, path: str | None, todo: Iterable[TopicPartition]) -> TopicPartition | None:
        for tp in todo:
            if path == paths.owner(self.group, tp.topic, tp.partition):
                return tp
        return None
