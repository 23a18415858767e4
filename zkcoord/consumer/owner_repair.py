"""Owner znodes damaged under a live claim, repaired by their claimant (the rule: :mod:`zkcoord.consumer.offsets`'s
docstring), and what a claim is.

:class:`OwnerRepairs` is the part of :class:`~zkcoord.consumer.offsets.OffsetStore` that looks at an owner znode a
claim or a commit found not as the coordinator wrote it -- absent, unreadable, naming another thread, or rewritten --
and decides whether it is still ours (the group's state vouches, our registration lives in the claim's session) and
repairs it.  Threads: as the offset store's (its lock held where a method says so).
"""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass

from zkcoord.consumer.records import TopicPartition
from zkcoord.errors import BadVersionError, CodecError, NodeExistsError, NoNodeError
from zkcoord.layout import paths
from zkcoord.layout.group_state import GroupState, decode_owner, encode_owner
from zkcoord.zk import Stat, ZkClient


@dataclass(frozen=True, slots=True)
class Claim:
    """What a consumer knows of a partition it was told to fetch."""

    thread: str
    owner_version: int
    committed: int | None
    offset_exists: bool
    #: the ZooKeeper session the claim was read in (only a claim of the current session may repair its owner znode)
    session: int = 0
    #: the ``czxid`` of the owner znode the claim was read from (or repaired to)
    owner_czxid: int = 0
    #: the version of the offset znode as last read or written by us (None: not known); a stop's acknowledgement
    #: carries it with the committed offset, for the next owner to check instead of reading (issue 16)
    offset_version: int | None = None


@dataclass(frozen=True, slots=True)
class Repair:
    """An owner znode a consumer rewrote with its own thread: ``reason`` says what it found."""

    tp: TopicPartition
    thread: str
    reason: str


class OwnerRepairs:
    """The claims of one consumer, and the repairs of their owner znodes (see the module's docstring)."""

    def __init__(self, zk: ZkClient, group: str, member: str | None = None) -> None:
        """``member``: the path of our registration (a repair needs it alive in the claim's session)."""
        self.zk = zk
        self.group = group
        self.member = member
        self._lock = threading.Lock()
        self._claims: dict[TopicPartition, Claim] = {}
        self._repairs: list[Repair] = []
        #: claims a commit of which had an unknown outcome (its reply lost): it may have landed, handing the partition
        #: over, so that claim is never repaired or renewed (only a fresh claim is trusted again)
        self._uncertain: set[TopicPartition] = set()

    def _holder(
        self, tp: TopicPartition, thread: str, owner: tuple[bytes, Stat] | None, *, repair: bool, session: int
    ) -> tuple[str | None, tuple[int, int], str]:
        """``(holder, (version, czxid), problem)`` of ``tp``'s owner znode as read (``owner``) by a claim for
        ``thread``.  With ``repair`` (the group's state vouches that the start gives us ``tp``), one that is absent,
        unreadable or names another thread was not written by the coordinator that sent the start (see the module's
        docstring): it is ours to repair, and is."""
        problem = "no owner registered"
        if owner is not None:
            try:
                holder = decode_owner(owner[0], paths.owner(self.group, *tp))
            except CodecError as e:
                problem = f"unreadable ({e.reason})"
            else:
                if holder == thread or not repair:
                    return holder, (owner[1].version, owner[1].czxid), ""
                problem = f"named {holder}"
        if not repair:
            return None, (-1, 0), problem
        repaired = self._repair(tp, thread, owner[1] if owner else None, problem, session)
        if repaired is None:
            return None, (-1, 0), f"{problem}, and could not be repaired"
        return thread, (repaired.version, repaired.czxid), ""

    def take_repairs(self) -> list[Repair]:
        """The owner znodes repaired since the last call (to journal them)."""
        with self._lock:
            out, self._repairs = self._repairs, []
        return out

    def _recheck(self, tp: TopicPartition) -> bool:
        """A commit's check of ``tp``'s owner znode failed: look at it again.  True if the partition is still ours
        -- it names our thread (at another version: rewritten by hand to the same value), or it was absent,
        unreadable, or named another thread while the group's state still gives it to us (:meth:`_target_vouches`),
        and has been repaired -- with the claim's version updated.  Only for a claim none of whose commits
        had an unknown outcome: while we hold such a claim nobody else writes the owner znode (the coordinator waits
        for our stop, and a hand-over is our own write), so a change we did not make was made by hand.  Lock held.
        :raises ZkError: on I/O failure."""
        claim, path = self._claims[tp], paths.owner(self.group, tp.topic, tp.partition)
        now: Stat | None
        try:
            data, stat = self.zk.get(path)
        except NoNodeError:
            now = self._repair(tp, claim.thread, None, "vanished", claim.session)
        else:
            try:
                holder = decode_owner(data, path)
            except CodecError as e:
                now = self._repair(tp, claim.thread, stat, f"unreadable ({e.reason})", claim.session)
            else:
                now = stat
                if holder != claim.thread:
                    vouched = self._target_vouches(tp, claim.thread, claim.session, stat)
                    now = self._repair(tp, claim.thread, stat, f"named {holder}", claim.session) if vouched else None
        if now is None:
            return False
        self._claims[tp] = dataclasses.replace(claim, owner_version=now.version, owner_czxid=now.czxid)
        return True

    def _target_vouches(self, tp: TopicPartition, thread: str, session: int, owner: Stat) -> bool:
        """Whether the group's state still gives ``tp`` to ``thread``, with our registration, alive in ``session``, the
        incarnation the state's rebalance counted, and the owner znode (``owner``) was written after the state's last
        write.  Then nobody but a hand wrote another thread into it: the coordinator writes owner znodes only in
        transactions that also write the state, as its target says, and an old owner hands a partition over only
        as a target written before says.  Lock held.  :raises ZkError: on I/O failure."""
        if self.member is None or session != self.zk.session_id:
            return False
        state_path = paths.group_state(self.group)
        state, member = self.zk.get_many([state_path, self.member])
        if state is None or member is None or member[1].ephemeralOwner != session:
            return False
        if owner.mzxid <= state[1].mzxid:
            return False  # written with or before the state: the coordinator's (or a hand-over's) doing
        try:
            current = GroupState.decode(state[0], state_path)
        except CodecError:
            return False
        ours = current.members.get(self.member.rpartition("/")[2])
        return ours == member[1].czxid and current.target.get(tp.topic, {}).get(tp.partition) == thread

    def _repair(self, tp: TopicPartition, thread: str, found: Stat | None, reason: str, session: int) -> Stat | None:
        """Write ``thread`` into ``tp``'s owner znode, which was absent (``found`` None: created, parents first) or
        unreadable (set, conditionally on ``found``'s version), provided our registration is alive in ``session``.
        Returns the znode's new stat, or None if it could not be repaired (someone else wrote it meanwhile, or
        we are not the registration that claimed it).  :raises ZkError: on other I/O failures."""
        if session != self.zk.session_id or session == 0:
            return None
        if self.zk.role == "member":
            # With ACLs only the coordinator identity writes owner znodes (docs/security.md): a repair would be
            # refused, and a refusal stops the consumer.  The coordinator rewrites it at the next rebalance.
            return None
        if self.member is not None:
            registered = self.zk.exists(self.member)
            if registered is None or registered.ephemeralOwner != session:
                return None
        path = paths.owner(self.group, tp.topic, tp.partition)
        try:
            if found is None:
                self.zk.ensure_path(paths.owners(self.group, tp.topic))
                created = self.zk.create_stat(path, encode_owner(thread))
                # Then set once: a claim at version 1 or more needs no read before its commits (see above).
                stat = self.zk.set(path, encode_owner(thread), created.version)
            else:
                stat = self.zk.set(path, encode_owner(thread), found.version)
        except (NodeExistsError, BadVersionError, NoNodeError):
            return None
        self._repairs.append(Repair(tp, thread, reason))
        return stat
