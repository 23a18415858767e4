"""A broker's seat in the coordinator election: taking the role, handing it back, judging the coordinator znode.

The election (:mod:`zkcoord.coordinator.election`) can only create ``/consumers/coordinator``; ZooKeeper removes it
when its holder's session ends.  A znode that outlives its term while the session lives on, or that no session will
ever remove, would stop every election for good.  The rules (``docs/protocol.md``, "Bad state"):

* **Our own, while we hold no term: delete it.**  It is left from a term of ours that ended with the session alive
  -- fenced because a znode was changed by hand, or a lost reply resolved as not won -- and no one else could remove
  it short of ending our session.  Deleting it hands the election back; we may win again, under a higher epoch.
  Only our session's node: its ``ephemeralOwner`` proves whose it is.
* **Persistent (``ephemeralOwner`` 0): delete it**, whoever finds it.  No election creates one (the election's node
  is ephemeral) and no session's end would remove it.  One with children is not deleted: only a person can say what
  they are (reported once; the election waits for the node or its children to change).
* Either delete goes in a transaction with a check of the epoch znode's version read *before* the node: the only
  legitimate way for the path to be re-created is an election, which bumps that version, so a node elected
  meanwhile is never deleted by a stale decision (for our own node: a session that expired between the read and
  the delete, the transaction then sent on a new session after another broker won).
* **Another session's ephemeral: never touched.**  Its holder ends its own term by the same rules; a node its data
  does not explain is reported (``input.rejected``).  A non-broker session holding it keeps the election waiting
  until that session ends: only a person can decide who that is.
* **Our own node changed while we hold its term**, or replaced by a persistent one: our term is over (the first
  would fail our fence at the next write; the second would *pass* it -- it too is at version 0 -- so it must be
  caught here): resign, then hand back as above.  A node deleted, or replaced by an election, needs nothing here:
  the fence fails at the next write (``check`` of the coordinator node, of the epoch version, of the term node).

States only a person can fix (a node the election must delete has children; the largest epoch) are said once and
waited out on a watch (:meth:`Seat.attempt`); the rest of the broker keeps running.

Used from the coordinator's worker thread only.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from enum import Enum

from zkcoord.coordinator.election import MAX_EPOCH, Term, ensure_epoch_znode, try_elect
from zkcoord.errors import (
    AccessRefusedError,
    BadVersionError,
    CodecError,
    EpochExhaustedError,
    NoNodeError,
    NotEmptyError,
    ZkError,
)
from zkcoord.layout import paths
from zkcoord.layout.registrations import CoordinatorInfo
from zkcoord.runtime.journal import Journal
from zkcoord.zk import Stat, WatchEvent, ZkClient
from zkcoord.zk.types import OneShot

log = logging.getLogger(__name__)


class Verdict(Enum):
    """What a change of the coordinator znode asks of this broker."""

    NOTHING = "nothing"
    ELECT = "elect"  #: no live holder (absent, left over, persistent): try the election
    RESIGN = "resign"  #: our term's node was changed or replaced by hand: resign, then try the election


#: After a ZooKeeper error, the next election attempt (the connection states drive recovery meanwhile).
RETRY_S = 0.5
#: While the election is blocked by a state only a person can fix: a quiet attempt this often, besides the watches.
BLOCKED_RETRY_S = 10.0


class Seat:
    """This broker's part in the election.  ``known`` is the highest epoch it has seen (its own terms, nodes it
    watched that an election created), which the next election must exceed even if the epoch znode was lowered.

    ``wake`` is a one-shot watch callback (kazoo's thread: it must only enqueue an election attempt for the worker),
    set on the znode that blocks the election while only a person can fix it.  ``blocked`` says whether the last
    attempt that finished met such a state; ``attempts`` counts attempts (a retry timer armed before a later attempt
    is moot)."""

    def __init__(
        self, zk: ZkClient, broker_id: int, journal: Journal, wake: Callable[[WatchEvent], None] | None = None
    ) -> None:
        self.zk = zk
        self.broker_id = broker_id
        self.journal = journal
        self.known = 0
        self.blocked = False
        self.attempts = 0
        self._wake = wake
        self._blocked_by: tuple[str, str] | None = None  # (path, reason) last reported
        self._reported: tuple[int, int] | None = None  # (czxid, version) of the last foreign node reported
        self._czxid = 0  # of our last term's node (0: unknown), to tell a stale watch snapshot from a change

    def attempt(self, now_ms: int) -> tuple[Term | None, float | None]:
        """Try the election once (worker): the won term or None, and after how many seconds to try again by itself
        (None: a watch calls, the coordinator znode's data watch or ``wake``).  Never raises.

        A ZooKeeper error is retried after :data:`RETRY_S`.  A state only a person can fix -- the highest epoch on
        record is :data:`MAX_EPOCH`, or a znode the election must delete has children -- is reported once
        (``input.rejected``), then waited out: ``wake`` is armed on that znode (the epoch znode's data; the other's
        children) and a quiet attempt made every :data:`BLOCKED_RETRY_S` (a group state may hold the epoch).  Nothing
        else of the broker stops meanwhile.
        """
        self.attempts += 1
        try:
            term = self.take(now_ms)
        except EpochExhaustedError as e:
            return None, self._block(paths.COORDINATOR_EPOCH, "coordinator epoch", str(e), children=False)
        except NotEmptyError as e:
            path = e.path or paths.COORDINATOR
            reason = f"{path} has children, so the election cannot delete it; it waits until a person removes them"
            return None, self._block(path, "coordinator znode", reason, children=True)
        except AccessRefusedError as e:  # not retried: the broker journals it and stops (docs/security.md)
            log.warning("broker %d: election refused: %s", self.broker_id, e)
            return None, None
        except (ZkError, CodecError) as e:
            log.warning("broker %d: election attempt failed: %s; retrying", self.broker_id, e)
            return None, RETRY_S
        self.blocked, self._blocked_by = False, None
        if term is None:  # another broker coordinates; the data watch calls us when its node goes
            self.journal.emit("coordinator.standby", broker=self.broker_id)
        return term, None

    def _block(self, path: str, what: str, reason: str, *, children: bool) -> float:
        self.blocked = True
        if self._blocked_by != (path, reason):
            self._blocked_by = (path, reason)
            self.journal.emit("input.rejected", what=what, path=path, reason=reason)
            log.error("broker %d: no election possible: %s", self.broker_id, reason)
        if self._wake is not None:
            try:
                if children:
                    self.zk.get_children(path, watch=OneShot(self._wake, path))
                else:
                    self.zk.exists(path, watch=OneShot(self._wake, path))
            except ZkError:  # (gone meanwhile, or no connection: soon again)
                return RETRY_S
        return BLOCKED_RETRY_S

    def take(self, now_ms: int) -> Term | None:
        """Try to become coordinator; a left-over node (ours, persistent) is deleted and the election tried again.

        Returns the won term, or None while another session holds the node.  Blocks for a few round trips.
        :raises ZkError: (the caller retries later); :raises EpochExhaustedError: (from ``try_elect``).
        """
        for _ in range(3):  # each round deleted a left-over node; a third one in a row is someone's loop
            if not self._clear_left_over():
                return None
            term = try_elect(self.zk, self.broker_id, self.journal, now_ms, self.known)
            if term is not None:
                self.known = max(self.known, term.epoch)
                self._czxid = 0
                with contextlib.suppress(ZkError):  # unknown: judge() then leaves a changed node to the fence
                    stat = self.zk.exists(paths.COORDINATOR)
                    if stat is not None and stat.ephemeralOwner == term.session_id:
                        self._czxid = stat.czxid
                return term
        return None

    def judge(self, term: Term | None, data: bytes | None, stat: Stat | None) -> Verdict:
        """What the coordinator znode's new ``data``/``stat`` (from the data watch; ``None`` if absent) means while
        holding ``term`` (None: following).  A stale snapshot is harmless: the watch delivers the latest state after
        it, and every deletion is re-checked against ZooKeeper when made."""
        if term is not None:
            if stat is None:
                return Verdict.NOTHING
            ours_changed = stat.ephemeralOwner == term.session_id and stat.czxid == self._czxid and stat.version
            replaced = stat.ephemeralOwner == 0 and stat.czxid > self._czxid  # (not a snapshot from before our term)
            return Verdict.RESIGN if ours_changed or replaced else Verdict.NOTHING
        if stat is not None and stat.ephemeralOwner not in (0, self.zk.session_id):
            self._observe(data or b"", stat)
            return Verdict.NOTHING
        return Verdict.ELECT

    def hand_back(self) -> None:
        """Delete our own coordinator znode now that we hold no term (the first rule above), so that a standby's
        watch elects it at once rather than after our retry.  A ZooKeeper failure is left to our next election
        attempt, which applies the same rule.  Call only after the term ended."""
        with contextlib.suppress(ZkError):
            self._clear_left_over()

    def _clear_left_over(self) -> bool:
        """Read the coordinator znode as a broker holding no term and delete it if it is left over.  True if the
        election may be tried now (the node is gone, or changed meanwhile).

        The epoch znode's version is read before the node is read (again) and checked in the delete's transaction:
        the only legitimate way for the path to be re-created is an election, which bumps that version, so a
        decision taken on a node that an election replaced meanwhile never deletes the new one.  For our own node
        this covers a session that expires between the read and the commit, the transaction then being sent on a
        new session after another broker won.  :raises ZkError: (NotEmptyError: a persistent node with children)
        """
        try:
            data, stat = self.zk.get(paths.COORDINATOR)
        except NoNodeError:
            return True
        if stat.ephemeralOwner not in (0, self.zk.session_id):
            self._observe(data, stat)
            return False
        ensure_epoch_znode(self.zk)
        epoch_stat = self.zk.exists(paths.COORDINATOR_EPOCH)
        try:
            data, again = self.zk.get(paths.COORDINATOR)
        except NoNodeError:
            return True
        if again.czxid != stat.czxid or again.ephemeralOwner != stat.ephemeralOwner or epoch_stat is None:
            return True
        stat = again
        kind = "own" if stat.ephemeralOwner else "persistent"
        txn = self.zk.transaction()
        txn.check(paths.COORDINATOR_EPOCH, epoch_stat.version)
        txn.delete(paths.COORDINATOR, stat.version)
        try:
            txn.commit()
        except (NoNodeError, BadVersionError):
            return True  # changed meanwhile: the next round reads it again
        self.journal.emit(
            "coordinator.node_removed",
            broker=self.broker_id,
            kind=kind,
            owner=f"{stat.ephemeralOwner:#x}",
            version=stat.version,
            data=data[:80].decode("utf-8", "replace"),
        )
        log.warning("broker %d deleted the coordinator znode (%s, version %d)", self.broker_id, kind, stat.version)
        return True

    def _observe(self, data: bytes, stat: Stat) -> None:
        """Another session holds the node: remember its epoch if the last election created it (in the transaction
        of the epoch znode's last change, so its ``czxid`` is that znode's ``mzxid``, and untouched since); else
        say once that the election waits for that session (its holder resigns by these rules if it is a broker)."""
        epoch_stat = self.zk.exists(paths.COORDINATOR_EPOCH)
        elected = stat.version == 0 and epoch_stat is not None and epoch_stat.mzxid == stat.czxid
        try:
            info = CoordinatorInfo.decode(data, paths.COORDINATOR)
        except CodecError as e:
            self._report(stat, e.reason)
            return
        if not elected:
            self._report(stat, f"held by session {stat.ephemeralOwner:#x} but not as the last election left it")
        elif info.epoch <= MAX_EPOCH:
            self.known = max(self.known, info.epoch)

    def _report(self, stat: Stat, reason: str) -> None:
        if self._reported != (stat.czxid, stat.version):
            self._reported = (stat.czxid, stat.version)
            why = f"{reason}; the election waits until its holder resigns or its session ends"
            self.journal.emit("input.rejected", what="coordinator znode", path=paths.COORDINATOR, reason=why)
