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
from collections.abc import Callable, Iterable, Mapping, Set
from dataclasses import dataclass

from zkcoord.consumer.acks import ack_znode, acknowledge, add_acknowledgement
from zkcoord.consumer.carried import carried_out, carry, check_carried, version_of
from zkcoord.consumer.owner_repair import Claim, OwnerRepairs
from zkcoord.consumer.records import TopicPartition
from zkcoord.errors import BadVersionError, CodecError, NodeExistsError, NoNodeError, ZkCoordError, ZkError
from zkcoord.layout import paths
from zkcoord.layout.group_state import encode_owner
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
    #: the start's acknowledgement landed with the checks of its carried versions (:meth:`OffsetStore.claim`)
    acked: bool = False


class OffsetStore(OwnerRepairs):
    def __init__(self, zk: ZkClient, group: str, member: str | None = None) -> None:
        """``member``: the path of our registration (a repair needs it alive in the claim's session)."""
        super().__init__(zk, group, member)
        self._committed: dict[TopicPartition, int] = {}
        #: topics whose ``offsets/<t>`` is known to exist (persistent: once there, it stays)
        self._ensured: set[str] = set()

    def claim(
        self,
        ownership: Mapping[TopicPartition, str],
        *,
        add: bool = False,
        wait: Callable[[WatchEvent], None] | None = None,
        repairable: Set[TopicPartition] = frozenset(),
        carried: Mapping[TopicPartition, int] | None = None,
        offsets: Mapping[TopicPartition, tuple[int, int]] | None = None,
        ack: str | None = None,
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

        ``carried``: owner znode versions the start carries (:mod:`zkcoord.consumer.carried`); those of
        ``repairable`` partitions are claimed by a check of that version, in one transaction with the start's
        acknowledgement ``ack``, instead of a read of each owner znode (``Claims.acked`` then).  A check that fails
        sends every carried partition back to the read above: nothing is claimed on a version not checked.
        ``offsets``: committed offsets the start carries with their offset znodes' versions (the previous owner's
        acknowledged stop left them so); those of partitions claimed by a carried version are checked at that
        version in the same transaction instead of read, and read with the owner znodes if it fails.
        :raises ZkError: on I/O failure.
        """
        tps = sorted(ownership)
        session = self.zk.held_session
        checked = carry(carried, ownership, repairable, wait)
        known = {tp: pair for tp, pair in (offsets or {}).items() if tp in checked}
        owners, found, acked = self._read_claimed(tps, checked, known, wait, ack)
        if checked and not acked:
            checked, known = {}, {}
        self._ensured |= {tp.topic for tp in known}  # (an offset znode found at its checked version: parent exists)
        claims: dict[TopicPartition, Claim] = {}
        problems: list[str] = []
        pending: set[TopicPartition] = set()
        for tp in tps:
            owner, offset = owners.get(tp), found.get(tp)
            owner_path = paths.owner(self.group, tp.topic, tp.partition)
            holder: str | None
            if tp in checked:
                holder, version, czxid, problem = ownership[tp], checked[tp], 0, ""
            elif owner is None and wait is not None:
                pending.add(tp)
                continue
            else:
                repair = wait is None and tp in repairable
                holder, (version, czxid), problem = self._holder(
                    tp, ownership[tp], owner, repair=repair, session=session
                )
            if holder is None:
                problems.append(f"{owner_path}: {problem}")
                continue
            if holder != ownership[tp] and wait is not None:
                pending.add(tp)
                continue
            if holder != ownership[tp]:
                problems.append(f"{owner_path}: owned by {holder}, not {ownership[tp]}")
                continue
            committed: int | None
            offset_version: int | None
            if tp in known:  # checked at its carried version with the acknowledgement
                committed, offset_version = known[tp]
            else:
                committed = self._committed_of(tp, offset, problems)
                offset_version = None if offset is None else offset[1].version
            exists = tp in known or offset is not None
            claims[tp] = Claim(ownership[tp], version, committed, exists, session, czxid, offset_version)
        with self._lock:
            if not add:
                self._claims, self._committed = {}, {}
            self._claims.update(claims)
            self._uncertain -= set(claims)
            self._committed.update({tp: c.committed for tp, c in claims.items() if c.committed is not None})
        return Claims(claims, problems, pending, acked)

    def _read_claimed(
        self,
        tps: list[TopicPartition],
        checked: Mapping[TopicPartition, int],
        known: Mapping[TopicPartition, tuple[int, int]],
        wait: Callable[[WatchEvent], None] | None,
        ack: str | None,
    ) -> tuple[dict[TopicPartition, tuple[bytes, Stat] | None], dict[TopicPartition, tuple[bytes, Stat] | None], bool]:
        """:meth:`claim`'s reads: the owner znodes of ``tps`` not ``checked`` and the offset znodes not ``known``
        (one pipelined burst), then the transaction that checks the carried versions and acknowledges ``ack``; if
        it fails, the owner and offset znodes of the carried partitions are read after all.  Returns what was read
        of owners and offsets, and whether the transaction landed.  :raises ZkError: on I/O failure."""
        read = [tp for tp in tps if tp not in checked]
        unknown = [tp for tp in tps if tp not in known]
        owner_paths = [paths.owner(self.group, tp.topic, tp.partition) for tp in read]
        offset_paths = [paths.offset(self.group, tp.topic, tp.partition) for tp in unknown]
        reads = self.zk.get_many(owner_paths + offset_paths, watch=wait, watched=set(owner_paths))
        owners = dict(zip(read, reads, strict=False))
        found = dict(zip(unknown, reads[len(read) :], strict=True))
        self._ensure_parents(found)
        acked = bool(checked) and check_carried(self.zk, self.group, checked, ack, known)
        if checked and not acked:  # a carried version is not the znode's: read them all, as without one
            again, offsets_again = sorted(checked), sorted(known)
            owner_paths = [paths.owner(self.group, tp.topic, tp.partition) for tp in again]
            offset_paths = [paths.offset(self.group, tp.topic, tp.partition) for tp in offsets_again]
            reads = self.zk.get_many(owner_paths + offset_paths)
            owners.update(zip(again, reads, strict=False))
            found.update(zip(offsets_again, reads[len(again) :], strict=True))
            self._ensure_parents(found)
        return owners, found, acked

    def _ensure_parents(self, offsets: Mapping[TopicPartition, tuple[bytes, Stat] | None]) -> None:
        """Make sure ``offsets/<t>`` exists for each topic one of whose offset znodes a claim found absent, before
        anything is fetched: the first commit then needs no extra round trip, and a commit sent while ZooKeeper
        is paused (a closing consumer's last) lands whole once it resumes.  An offset znode found present proves its
        parent exists: no request (issue 16: the joiner's ``exists`` of ``offsets/<t>``).
        :raises ZkError: on I/O failure."""
        present = {tp.topic for tp, got in offsets.items() if got is not None}
        absent = {tp.topic for tp, got in offsets.items() if got is None}
        self._ensured |= present
        for topic in sorted(absent - self._ensured):
            self.zk.ensure_path(paths.offsets(self.group, topic))
            self._ensured.add(topic)

    def _committed_of(self, tp: TopicPartition, offset: tuple[bytes, Stat] | None, problems: list[str]) -> int | None:
        """The committed offset a claim read (None: none, or unreadable, which ``problems`` then says)."""
        if offset is None:
            return None
        try:
            return decode_int("committed offset", offset[0], paths.offset(self.group, *tp))
        except CodecError as e:
            problems.append(f"{e}; starting from the start policy")
            return None

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

    def _to_write(
        self, positions: Mapping[TopicPartition, int], *, final: bool
    ) -> tuple[dict[TopicPartition, int], dict[TopicPartition, int]]:
        """The positions of claimed partitions that :meth:`commit` writes (changed ones), and with ``final`` the
        unchanged ones whose offset znode must still exist (the transaction checks that it does, version -1, instead
        of a read before it: one absent is created then).  Under the lock."""
        todo = {tp: off for tp, off in positions.items() if tp in self._claims}
        unchanged = {tp: off for tp, off in todo.items() if self._committed.get(tp) == off}
        for tp in unchanged:
            del todo[tp]
        return todo, (unchanged if final else {})

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
        verify: Mapping[TopicPartition, int] | None = None,
        releasing: Set[TopicPartition] = frozenset(),
    ) -> dict[TopicPartition, int]:
        """Commit ``positions`` (next offset to consume) of partitions we still own; return what was written.

        Only changed positions are written (``final``: also an unchanged one whose offset znode is gone, the last
        commit before the partitions go to another owner -- the next owner starts from what it reads there; an
        existing one is left alone, since it may hold an operator's fix of a position we never moved; whether it is
        gone is checked inside the transaction, a ``check`` at any version, not by a read before it; ``verify``: more
        positions of claimed partitions checked so, and written only if gone -- a stop's, whose auto-commit before
        the callback found them committed), in one transaction that checks every owner version first.  ``ack``: a
        command to acknowledge in that same transaction (deleted and recorded in its channel,
        :mod:`zkcoord.consumer.acks`: so it is acknowledged exactly when the commit lands), or alone when there is
        nothing to write; already gone is fine.  ``handover``: partitions (claimed by us, and no
        longer fetched) whose owner znode that same transaction sets to the given thread, conditional on the version
        we claimed -- the new owner starts them once it reads itself there, so after this commit (S2, S3).  Only
        partitions we hold a claim on can be handed over; others are left out.  ``releasing``: the partitions a
        consumer-protocol stop ``ack`` gives up: its acknowledgement carries each one's committed offset with the
        version its offset znode is at once this transaction lands (:func:`zkcoord.consumer.carried.carried_out`),
        for the next owner to check instead of reading.
        :raises OffsetCommitFencedError: for partitions we no longer own (the others are committed).
        :raises ZkError: on I/O failure (nothing is committed then).
        """
        with self._lock:
            todo, present = self._to_write(positions, final=final)
            present.update({tp: off for tp, off in (verify or {}).items() if tp in self._claims and tp not in todo})
            fenced: list[TopicPartition] = [tp for tp in positions if tp not in self._claims]
            handing = {tp: thread for tp, thread in (handover or {}).items() if tp in self._claims}
            written: dict[TopicPartition, int] = {}
            # Each owner znode is looked at again at most once per commit.
            rechecked = self._recheck_other_znodes(todo, handing, fenced)
            recreated: set[TopicPartition] = set()
            alone: str | None = None  # an acknowledgement whose znode is gone: written alone, after the commit
            while todo or handing or present:
                # Claims of an ended session are dropped; our registration (and the command, if any) ended with
                # it, so nothing is acknowledged either: the coordinator does not wait for a member that is gone.
                ack, alone = (None, None) if self._drop_other_sessions(todo, handing, present, fenced) else (ack, alone)
                try:
                    self._commit_once(todo, ack, handing, present, releasing)
                except NodeExistsError as e:
                    # Our record said "absent" but the node exists (an earlier commit whose reply was lost):
                    # set it instead of creating it.
                    tp_created = self._offset_of_path(e.path, todo)
                    if tp_created is None:
                        raise
                    self._offset_exists(tp_created, exists=True)
                    continue
                except (BadVersionError, NoNodeError) as e:
                    if ack is not None and e.path in (ack, ack_znode(ack)):
                        # The command is gone: acknowledged already (a reply lost earlier), commit alone.  Or our
                        # ack/<c> is gone (deleted by hand): commit, then acknowledge alone, which creates it.
                        alone, ack = (None if e.path == ack else ack), None
                        continue
                    if isinstance(e, NoNodeError) and self._offset_gone(e.path, todo, present, recreated):
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
                todo, handing, present = {}, {}, {}
            if ack is not None or alone is not None:  # nothing (left) to commit: acknowledge alone
                carried = carried_out(self._claims, releasing, {})
                acknowledge(self.zk, ack or alone or "", offsets=carried)
        if fenced:
            raise OffsetCommitFencedError(self.group, sorted(set(fenced)), written)
        return written

    def _offset_gone(
        self,
        path: str | None,
        todo: dict[TopicPartition, int],
        present: dict[TopicPartition, int],
        recreated: set[TopicPartition],
    ) -> bool:
        """A commit's transaction found the offset znode at ``path`` gone: True if it is to be created (then try
        again).  Lock held.  :raises ZkError: on I/O failure."""
        vanished = self._offset_of_path(path, present)
        if vanished is not None:
            # A final commit's unchanged position whose offset znode is gone (deleted by hand, or with the group's
            # subtree): written again, so the next owner does not fall back to the start policy.  One that exists is
            # left alone: it may hold an operator's fix.
            todo[vanished] = present.pop(vanished)
            self._offset_exists(vanished, exists=False)
            return True
        gone = self._offset_of_path(path, todo)
        if gone is not None and gone not in recreated:
            # The offset znode (or its parents) was deleted under us: create it, parents first.
            recreated.add(gone)
            self._offset_exists(gone, exists=False)
            return True
        return False

    def _drop_other_sessions(
        self,
        todo: dict[TopicPartition, int],
        handing: dict[TopicPartition, str],
        present: dict[TopicPartition, int],
        fenced: list[TopicPartition],
    ) -> bool:
        """A claim holds only in the session it was read in: leave out of this commit (and forget) every claim of
        another session than the one the client holds (:attr:`~zkcoord.zk.ZkClient.held_session`: while
        disconnected, the one it is resuming; 0 once that expired).  After that session expired (our registration
        went with it) the owner znodes may have been deleted and created again for the next owner at the very
        version we claimed, which the transaction's version check would let pass: a commit sent on the new session
        before the consumer handled the loss once landed so, after the next owner had started (S3; a zk-restart
        under load).  Judged again before every attempt of the transaction.  True if any claim was dropped.  Lock
        held."""
        session = self.zk.held_session
        stale = [
            tp for tp in {*todo, *handing, *present} if (c := self._claims.get(tp)) is not None and c.session != session
        ]
        for tp in sorted(stale):
            present.pop(tp, None)
            self._lose(tp, todo, handing, fenced)
        return bool(stale)

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
        self,
        todo: Mapping[TopicPartition, int],
        ack: str | None,
        handover: Mapping[TopicPartition, str],
        present: Mapping[TopicPartition, int] | None = None,
        releasing: Set[TopicPartition] = frozenset(),
    ) -> None:
        """One transaction: check every owner version (setting those handed over), write every offset, check that the
        offset znode of each of ``present`` exists (any version), acknowledge ``ack`` (deleted, and recorded in its
        channel; a consumer-protocol one carrying the committed offsets of ``releasing``); nothing at all when there
        is nothing to do.  Lock held."""
        if not (todo or ack or handover or present):
            return
        txn = self.zk.transaction()
        for tp in sorted(present or {}):
            txn.check(paths.offset(self.group, tp.topic, tp.partition), -1)
        for tp in sorted({*todo, *handover}):
            owner, version = paths.owner(self.group, tp.topic, tp.partition), self._claims[tp].owner_version
            if tp in handover:
                txn.set_data(owner, encode_owner(handover[tp]), version)
            else:
                txn.check(owner, version)
        written: dict[TopicPartition, int] = {}  # the index of each offset's write in the transaction
        for tp in sorted(todo):
            path = paths.offset(self.group, tp.topic, tp.partition)
            written[tp] = len(txn)
            if self._claims[tp].offset_exists:
                txn.set_data(path, encode_int(todo[tp]))
            else:
                txn.create(path, encode_int(todo[tp]))
        if ack is not None:
            # the delete, and the channel's record of it (zkcoord.consumer.acks); a stop's carries its offsets
            carried = carried_out(self._claims, releasing, todo)
            add_acknowledgement(txn, ack, offsets=carried)
        results = txn.commit()
        for tp, off in todo.items():
            c = self._claims[tp]
            self._claims[tp] = dataclasses.replace(
                c, committed=off, offset_exists=True, offset_version=version_of(results, written[tp])
            )
            self._committed[tp] = off

    def _offset_exists(self, tp: TopicPartition, *, exists: bool) -> None:
        """Correct what our claim on ``tp`` knows of its offset znode's existence (absent: its parents are created,
        as it may have been deleted with them).  Lock held.  :raises ZkError: on I/O failure."""
        if not exists:
            self.zk.ensure_path(paths.offsets(self.group, tp.topic))
        c = self._claims[tp]
        # The version known is no longer the znode's (gone, or written by someone else): nothing is carried or
        # checked at it until a write of ours or a read says it again.
        self._claims[tp] = dataclasses.replace(c, offset_exists=exists, offset_version=None)

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
