"""Committed offsets under ``/consumers/groups/<g>/offsets/<t>/<p>``, fenced by the ownership registry (S3).

When a consumer starts fetching a partition it reads the partition's owner znode (written by the coordinator in the
same transaction as the start-fetcher) and remembers its version and its ``czxid`` (which znode it is).  Every commit
is a transaction that first checks that version: if the coordinator has since given the partition to another thread
(a new owner value, so a new version) or removed it, the check fails and the commit of that partition is refused with
:class:`OffsetCommitFencedError`.  A consumer that no longer owns a partition therefore cannot move its offset.  A
version alone does not tell a znode deleted and created again (it restarts at 0, so a claim made at version 0 would
pass the check of a new owner's znode): so a commit first reads the owner znodes it is about to check, and one that is
another znode than the claim's (another ``czxid``) is looked at again before the transaction, as a failed check is.

An owner znode that vanished or cannot be decoded under a live claim was not written by the coordinator (it never
deletes or rewrites the owner znode of a partition a live member holds before that member acknowledged a stop of it;
a member whose registration went away in a session expiry holds nothing): it was damaged by hand or by a buggy
client.  The claimant is then the legitimate owner, and repairs the znode with its own thread (conditionally on what
it read) before it commits -- but only while the registration it claimed under is still alive in the same session,
so that a consumer whose session ended (a zombie) can never recreate an owner znode.  Likewise, a start-fetcher's
partition whose owner znode is absent, unreadable or names another thread is repaired to the thread the command
names -- only where the group's state, still at the command's epoch and generation, gives that partition to that
thread (``zkcoord.consumer.vouch``): the coordinator then wrote our thread there with the start, after every earlier
holder acknowledged its stop, so anything else was written by hand.
Each repair is reported (:meth:`OffsetStore.take_repairs`, journalled ``owner.repaired``).

Threads: methods are called by the consumer's command thread and by ``poll()``/``commit()`` on the application's
thread; a lock serialises them.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterable, Mapping, Set
from dataclasses import dataclass

from zkcoord.consumer.acks import acknowledge, add_acknowledgement
from zkcoord.consumer.records import TopicPartition
from zkcoord.errors import BadVersionError, CodecError, NodeExistsError, NoNodeError, ZkCoordError, ZkError
from zkcoord.layout import paths
from zkcoord.layout.group_state import GroupState, decode_owner, encode_owner
from zkcoord.layout.znodes import decode_int, encode_int
from zkcoord.zk import Stat, WatchEvent, ZkClient


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
    #: the ZooKeeper session the claim was read in (only a claim of the current session may repair its owner znode)
    session: int = 0
    #: the ``czxid`` of the owner znode the claim was read from (or repaired to)
    owner_czxid: int = 0


@dataclass(frozen=True, slots=True)
class Repair:
    """An owner znode a consumer rewrote with its own thread: ``reason`` says what it found."""

    tp: TopicPartition
    thread: str
    reason: str


class OffsetStore:
    def __init__(self, zk: ZkClient, group: str, member: str | None = None) -> None:
        """``member``: the path of our registration (a repair needs it alive in the claim's session)."""
        self.zk = zk
        self.group = group
        self.member = member
        self._lock = threading.Lock()
        self._claims: dict[TopicPartition, Claim] = {}
        self._committed: dict[TopicPartition, int] = {}
        self._ensured: set[str] = set()
        self._repairs: list[Repair] = []
        #: claims a commit of which had an unknown outcome (its reply lost): it may have landed, handing the partition
        #: over, so that claim is never repaired or renewed (only a fresh claim is trusted again)
        self._uncertain: set[TopicPartition] = set()

    def claim(
        self,
        ownership: Mapping[TopicPartition, str],
        *,
        add: bool = False,
        wait: Callable[[WatchEvent], None] | None = None,
        repairable: Set[TopicPartition] = frozenset(),
    ) -> Claims:
        """Read owner versions and committed offsets of the partitions a start-fetcher gives us.

        Returns the claims and, for partitions whose registry does not name the expected thread, a reason each
        (those partitions are not fetched).  The claims replace those held, or with ``add`` join them (an
        incremental start-fetcher: the partitions kept are not read again).  With ``wait`` (partitions handed over
        by their previous owner), each owner znode read gets a one-shot watch calling ``wait``, and a partition
        whose owner znode names another thread (or is absent) is *pending*, not a problem.  Without ``wait``, the
        owner znodes of ``repairable`` partitions (those the group's state gives us at the start's own generation)
        are repaired when absent, unreadable or naming another thread: the coordinator wrote our thread there with
        the start, so anything else was written by hand.
        :raises ZkError: on I/O failure.
        """
        tps = sorted(ownership)
        for topic in sorted({tp.topic for tp in tps} - self._ensured):
            self.zk.ensure_path(paths.offsets(self.group, topic))
            self._ensured.add(topic)  # persistent: once there, it stays (a round trip saved per start-fetcher)
        owner_paths = [paths.owner(self.group, tp.topic, tp.partition) for tp in tps]
        offset_paths = [paths.offset(self.group, tp.topic, tp.partition) for tp in tps]
        session = self.zk.session_id
        reads = self.zk.get_many(owner_paths + offset_paths, watch=wait, watched=set(owner_paths))
        claims: dict[TopicPartition, Claim] = {}
        problems: list[str] = []
        pending: set[TopicPartition] = set()
        for i, tp in enumerate(tps):
            owner, offset = reads[i], reads[len(tps) + i]
            if owner is None and wait is not None:
                pending.add(tp)
                continue
            repair = wait is None and tp in repairable
            holder, (version, czxid), problem = self._holder(tp, ownership[tp], owner, repair=repair, session=session)
            if holder is None:
                problems.append(f"{owner_paths[i]}: {problem}")
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
            claims[tp] = Claim(ownership[tp], version, committed, offset is not None, session, czxid)
        with self._lock:
            if not add:
                self._claims, self._committed = {}, {}
            self._claims.update(claims)
            self._uncertain -= set(claims)
            self._committed.update({tp: c.committed for tp, c in claims.items() if c.committed is not None})
        return Claims(claims, problems, pending)

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

    def release(self, tps: Iterable[TopicPartition] | None = None) -> None:
        """Forget the claims on ``tps`` (None: all of them); their offsets can no longer be committed by us."""
        with self._lock:
            if tps is None:
                self._claims, self._committed, self._uncertain = {}, {}, set()
                return
            for tp in tps:
                self._claims.pop(tp, None)
                self._committed.pop(tp, None)
                self._uncertain.discard(tp)

    def _to_write(self, positions: Mapping[TopicPartition, int], *, final: bool) -> dict[TopicPartition, int]:
        """The positions of claimed partitions that :meth:`commit` writes: changed ones, and with ``final`` unchanged
        ones whose offset znode is absent (one pipelined read).  Under the lock."""
        todo = {tp: off for tp, off in positions.items() if tp in self._claims}
        unchanged = [tp for tp, off in todo.items() if self._committed.get(tp) == off]
        found = (
            self.zk.get_many([paths.offset(self.group, tp.topic, tp.partition) for tp in unchanged]) if final else []
        )
        for i, tp in enumerate(unchanged):
            if not final or found[i] is not None:
                del todo[tp]
        return todo

    def committed(self) -> dict[TopicPartition, int]:
        with self._lock:
            return dict(self._committed)

    def claimed(self) -> set[TopicPartition]:
        """The partitions we hold a claim on now."""
        with self._lock:
            return set(self._claims)

    def commit(
        self,
        positions: Mapping[TopicPartition, int],
        ack: str | None = None,
        handover: Mapping[TopicPartition, str] | None = None,
        *,
        final: bool = False,
    ) -> dict[TopicPartition, int]:
        """Commit ``positions`` (next offset to consume) of partitions we still own; return what was written.

        Only changed positions are written (``final``: also an unchanged one whose offset znode is gone, the last
        commit before the partitions go to another owner -- the next owner starts from what it reads there; an
        existing one is left alone, since it may hold an operator's fix of a position we never moved), in one
        transaction that checks every owner version first.  ``ack``: a
        command to acknowledge in that same transaction (deleted and recorded in its channel,
        :mod:`zkcoord.consumer.acks`: so it is acknowledged exactly when the commit lands), or alone when there is
        nothing to write; already gone is fine.  ``handover``: partitions (claimed by us, and no
        longer fetched) whose owner znode that same transaction sets to the given thread, conditional on the version
        we claimed -- the new owner starts them once it reads itself there, so after this commit (S2, S3).  Only
        partitions we hold a claim on can be handed over; others are left out.
        :raises OffsetCommitFencedError: for partitions we no longer own (the others are committed).
        :raises ZkError: on I/O failure (nothing is committed then).
        """
        with self._lock:
            todo = self._to_write(positions, final=final)
            fenced: list[TopicPartition] = [tp for tp in positions if tp not in self._claims]
            handing = {tp: thread for tp, thread in (handover or {}).items() if tp in self._claims}
            written: dict[TopicPartition, int] = {}
            # Each owner znode is looked at again at most once per commit.
            rechecked = self._recheck_other_znodes(todo, handing, fenced)
            recreated: set[TopicPartition] = set()
            while todo or handing:
                try:
                    self._commit_once(todo, ack, handing)
                except NodeExistsError as e:
                    # Our record said "absent" but the node exists (an earlier commit whose reply was lost):
                    # set it instead of creating it.
                    tp_created = self._offset_of_path(e.path, todo)
                    if tp_created is None:
                        raise
                    self._offset_exists(tp_created, exists=True)
                    continue
                except (BadVersionError, NoNodeError) as e:
                    if ack is not None and e.path == ack:
                        ack = None  # acknowledged already (a reply lost earlier): commit alone
                        continue
                    gone = self._offset_of_path(e.path, todo)
                    if isinstance(e, NoNodeError) and gone is not None and gone not in recreated:
                        # The offset znode (or its parents) was deleted under us: create it, parents first.
                        recreated.add(gone)
                        self._offset_exists(gone, exists=False)
                        continue
                    lost = self._owner_of_path(e.path, [*todo, *handing])
                    if lost is None:
                        raise
                    if lost not in rechecked and lost not in self._uncertain:
                        rechecked.add(lost)
                        if self._recheck(lost):
                            continue  # still ours (repaired if it had to be): commit again
                    self._lose(lost, todo, handing, fenced)
                    continue
                except ZkError:
                    # Not a refusal: the outcome is unknown (a reply lost), so these claims may be over already.
                    self._uncertain.update({*todo, *handing})
                    raise
                ack = None  # deleted with the commit
                written.update(todo)
                todo, handing = {}, {}
            if ack is not None:  # nothing (left) to commit: acknowledge alone
                acknowledge(self.zk, ack)
        if fenced:
            raise OffsetCommitFencedError(self.group, sorted(set(fenced)), written)
        return written

    def _lose(
        self,
        tp: TopicPartition,
        todo: dict[TopicPartition, int],
        handing: dict[TopicPartition, str],
        fenced: list[TopicPartition],
    ) -> None:
        """``tp`` is somebody else's now: forget our claim and leave it out of this commit.  Lock held."""
        fenced.append(tp)
        del self._claims[tp]
        todo.pop(tp, None)
        handing.pop(tp, None)

    def _commit_once(
        self, todo: Mapping[TopicPartition, int], ack: str | None, handover: Mapping[TopicPartition, str]
    ) -> None:
        """One transaction: check every owner version (setting those handed over), write every offset, acknowledge
        ``ack`` (deleted, and recorded in its channel).  Lock held."""
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
            add_acknowledgement(txn, ack)  # the delete, and the channel's record of it (zkcoord.consumer.acks)
        txn.commit()
        for tp, off in todo.items():
            c = self._claims[tp]
            self._claims[tp] = dataclasses.replace(c, committed=off, offset_exists=True)
            self._committed[tp] = off

    def _offset_exists(self, tp: TopicPartition, *, exists: bool) -> None:
        """Correct what our claim on ``tp`` knows of its offset znode's existence (absent: its parents are created,
        as it may have been deleted with them).  Lock held.  :raises ZkError: on I/O failure."""
        if not exists:
            self.zk.ensure_path(paths.offsets(self.group, tp.topic))
        c = self._claims[tp]
        self._claims[tp] = dataclasses.replace(c, offset_exists=exists)

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

    def _recheck_other_znodes(
        self, todo: dict[TopicPartition, int], handing: dict[TopicPartition, str], fenced: list[TopicPartition]
    ) -> set[TopicPartition]:
        """Before a commit: read the owner znodes of ``todo`` and ``handing`` whose claim was read at version 0 (one
        pipelined read); one that exists but is not the znode its claim was read from (another ``czxid``: deleted and
        created again since, back at version 0, which the transaction's version check would let pass) is looked at
        again now (:meth:`_recheck`), and lost unless it is still ours.  Only version-0 claims need it, so a commit
        usually costs no read: the coordinator and the repairs leave owner znodes at version 1 or more (they create
        then set them), and a hand-over sets them.  Returns the partitions looked at again.  Lock held.
        :raises ZkError: on I/O failure."""
        tps = sorted(tp for tp in {*todo, *handing} if self._claims[tp].owner_version == 0)
        if not tps:
            return set()
        reads = self.zk.get_many([paths.owner(self.group, tp.topic, tp.partition) for tp in tps])
        other = {tp for tp, got in zip(tps, reads, strict=True) if got and got[1].czxid != self._claims[tp].owner_czxid}
        for tp in sorted(other):
            if tp in self._uncertain or not self._recheck(tp):
                self._lose(tp, todo, handing, fenced)
        return other

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
