"""The consumer's commits (S3): fenced by the ownership registry, mirrored to Kafka 0.8's offsets for a migrating
consumer, journalled; the positions of partitions stopped whose commit has not landed yet; and the outcome of a
closing consumer's final commit (:class:`FinalCommit`).

Threads: :meth:`Commits.commit` from any thread (the application's ``commit()``, ``poll()``'s auto-commit through the
command thread, the command thread); the rest on the command thread.  :attr:`Commits.lock` serialises commits with
the releases of claims.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Set
from dataclasses import dataclass, field

from zkcoord.consumer.core import ConsumerCore
from zkcoord.consumer.handoff import Change
from zkcoord.consumer.offsets import OffsetCommitFencedError
from zkcoord.consumer.records import TopicPartition
from zkcoord.consumer.shared import commit_step
from zkcoord.errors import ZkError
from zkcoord.runtime.shutdown import COMMIT, COMMIT_UNKNOWN, Deadline, StopReport

log = logging.getLogger(__name__)


class Commits:
    def __init__(self, core: ConsumerCore) -> None:
        self.c = core
        self.lock = threading.Lock()
        #: positions of partitions stopped whose commit has not succeeded yet (a connection loss under it): the
        #: stop is redelivered and must commit them before it is acknowledged (S3)
        self.unsettled: dict[TopicPartition, int] = {}

    def commit(
        self,
        positions: dict[TopicPartition, int],
        ack: str | None = None,
        handover: dict[TopicPartition, str] | None = None,
        *,
        final: bool = False,
        verify: dict[TopicPartition, int] | None = None,
        releasing: Set[TopicPartition] = frozenset(),
    ) -> dict[TopicPartition, int]:
        """Commit (``final``: the last commit of these partitions, written even if unchanged); with ``ack``, delete
        that command in the same transaction, and with ``handover`` set those partitions' owner znodes; ``verify``:
        positions written only if their offset znode is gone; ``releasing``: a consumer-protocol stop's partitions,
        whose committed offsets its acknowledgement carries (see :meth:`zkcoord.consumer.offsets.OffsetStore.commit`).

        :raises OffsetCommitFencedError: for partitions no longer ours (the others are committed, ``ack`` deleted);
            the command thread stops fetching them (:meth:`stop_fenced`).
        :raises ZkError: nothing was committed.
        """
        c = self.c
        with self.lock:
            sent = c.clock()
            try:
                written = c.offsets.commit(
                    positions, ack=ack, handover=handover, final=final, verify=verify, releasing=releasing
                )
            except ZkError:
                c.stats.commit_failures.inc()
                raise
            except OffsetCommitFencedError as e:
                fenced = e
                c.stats.committed(c.clock() - sent, refused=len(e.partitions))
                self.journal_repairs()
                self._mirror({tp: off for tp, off in positions.items() if tp not in e.partitions})
                self._journal(e.committed)
                for tp in e.partitions:
                    c.journal.emit(
                        "offsets.fenced",
                        group=c.config.group,
                        consumer=c.consumer_id,
                        topic=tp.topic,
                        partition=tp.partition,
                    )
            else:
                c.stats.committed(c.clock() - sent)
                self.journal_repairs()
                self._mirror(positions)
                self._journal(written)
                return written
        self._stop_fenced(fenced.partitions)
        raise fenced

    def _stop_fenced(self, tps: list[TopicPartition]) -> None:
        """The partitions a commit found no longer ours (S2: their owner znode names someone else, and the group's
        state does not give them to us) must stop being fetched: the command thread does it (``fenced`` event), as it
        alone claims and assigns, so a partition a start has given back meanwhile is not stopped."""
        self.c.events.put(("fenced", list(tps)))

    def stop_fenced(self, tps: list[TopicPartition]) -> None:
        """Stop fetching those of ``tps`` we still fetch and hold no claim on.  Command thread."""
        c = self.c
        claimed = c.offsets.claimed()
        stop = [tp for tp in tps if tp in c.fetcher.assignment() and tp not in claimed]
        if stop:
            c.fetcher.revoke_some(stop, "commit fenced")
            c.handoff.announce(Change.LOST, stop)  # someone else's already: the application cannot commit them
            log.warning(
                "consumer %s: stopped fetching %d partitions our commit was fenced on", c.consumer_id, len(stop)
            )

    def journal_repairs(self) -> None:
        """Journal the owner znodes the offset store repaired (a claim's or a commit's: see
        :mod:`zkcoord.consumer.offsets`)."""
        c = self.c
        for r in c.offsets.take_repairs():
            c.journal.emit(
                "owner.repaired",
                group=c.config.group,
                consumer=c.consumer_id,
                topic=r.tp.topic,
                partition=r.tp.partition,
                thread=r.thread,
                reason=r.reason,
            )
            log.warning("consumer %s: repaired the owner znode of %s/%d (%s)", c.consumer_id, *r.tp, r.reason)

    def stopped(
        self,
        positions: dict[TopicPartition, int],
        ack: str | None = None,
        handover: dict[TopicPartition, str] | None = None,
        *,
        lost: bool,
        verify: dict[TopicPartition, int] | None = None,
        releasing: Set[TopicPartition] = frozenset(),
    ) -> bool:
        """Commit the positions of partitions just stopped, and those a failed try left; True if ``ack`` was
        deleted with them.  A ZooKeeper error propagates and keeps them for the redelivered command, which is not
        acknowledged meanwhile (S3).  After a session loss (``lost``) nothing is committed (the partitions may be
        someone else's)."""
        self.unsettled.update(positions)
        if lost:
            self.unsettled.clear()
            return False
        acked = self.quietly(dict(self.unsettled), ack, handover, final=True, verify=verify, releasing=releasing)
        self.unsettled.clear()
        return acked

    def quietly(
        self,
        positions: dict[TopicPartition, int],
        ack: str | None = None,
        handover: dict[TopicPartition, str] | None = None,
        *,
        final: bool = False,
        verify: dict[TopicPartition, int] | None = None,
        releasing: Set[TopicPartition] = frozenset(),
    ) -> bool:
        """Commit, logging a fenced partition; True if ``ack`` was deleted with it.  :raises ZkError: as commit."""
        try:
            self.commit(positions, ack, handover, final=final, verify=verify, releasing=releasing)
        except OffsetCommitFencedError as e:
            log.warning("consumer %s: %s", self.c.consumer_id, e)
        return ack is not None

    def _mirror(self, positions: dict[TopicPartition, int]) -> None:
        """A migrating consumer's commits go to the 0.8 offsets too (lock held)."""
        if self.c.bridge is not None:
            self.c.bridge.commit(positions)

    def _journal(self, written: dict[TopicPartition, int]) -> None:
        # auto_commit says which policy the commit answers to: with it off, nothing the application has not finished
        # may be committed, and the analysis checks that against its records.processed ("S3 at risk")
        for tp, offset in sorted(written.items()):
            self.c.journal.emit(
                "offsets.committed",
                group=self.c.config.group,
                consumer=self.c.consumer_id,
                topic=tp.topic,
                partition=tp.partition,
                offset=offset,
                auto_commit=self.c.config.auto_commit,
            )


class FinalCommit:
    """The final commit of :meth:`consumer.Consumer.close`: whether it ran and how it ended, as the closing thread
    sees it when its wait for the command thread is over (S3).

    The command thread calls :meth:`begin` before sending it and :meth:`end` after; ``close()`` calls :meth:`settle`
    once, which puts into the stop's report exactly what happened -- not run (the command thread was busy with an
    earlier step), landed, failed, or sent and unanswered ("may not have been committed": a paused ZooKeeper that
    resumes applies it).  After :meth:`settle` nothing changes what was reported, and a commit not begun is not sent.
    Thread-safe.
    """

    NOT_RUN = "not run"
    SENT = "sent"
    LANDED = "landed"
    FAILED = "failed"
    UNKNOWN = "unknown"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._settled = False
        self.outcome = self.NOT_RUN
        self.why: object = None
        #: partitions whose consumed position the commit was to write
        self.pending = 0

    def begin(self, pending: int) -> bool:
        """About to send a commit of ``pending`` partitions; False if ``close()`` no longer waits (do not send)."""
        with self._lock:
            if self._settled:
                return False
            self.outcome, self.pending = self.SENT, pending
            return True

    def end(self, outcome: str, why: object = None, *, pending: int | None = None) -> None:
        """How it ended (or why it was not tried: ``FAILED`` with the reason), unless already settled."""
        with self._lock:
            if not self._settled:
                self.outcome, self.why = outcome, why
                if pending is not None:
                    self.pending = pending

    def settle(self, report: StopReport, busy_uncommitted: Callable[[], int]) -> None:
        """Report the outcome known now into ``report`` (``busy_uncommitted``: the partitions left uncommitted when
        the commit never ran).  Closing thread, once."""
        with self._lock:
            self._settled = True
            outcome, why, pending = self.outcome, self.why, self.pending
        if outcome == self.NOT_RUN:
            report.skip(COMMIT, "the command thread was still busy at the deadline", uncommitted=busy_uncommitted())
        elif outcome == self.SENT:
            report.skip(COMMIT_UNKNOWN, "the final commit was not answered by the deadline", uncommitted=pending)
        elif outcome == self.UNKNOWN and pending:
            report.skip(COMMIT_UNKNOWN, why, uncommitted=pending)
        elif outcome == self.FAILED and pending:
            report.skip(COMMIT, why, uncommitted=pending)

    def failed(self, error: ZkError) -> None:
        """The commit raised ``error``: :data:`UNKNOWN` or :data:`FAILED` as
        :func:`zkcoord.consumer.shared.commit_step` says."""
        self.end(self.UNKNOWN if commit_step(error) == COMMIT_UNKNOWN else self.FAILED, error)


@dataclass(frozen=True, slots=True)
class Closing:
    """What ``close()`` hands the command thread: the stop's report (release errors go there), the final commit's
    outcome, and the hand-shake that lets the closing thread run ``on_partitions_revoked`` after fetching stopped
    and before the claims are released (so that a commit inside it still lands)."""

    report: StopReport
    commit: FinalCommit
    #: how long the command thread waits for the closing thread's callback (None: it does not wait)
    session: Deadline | None = None
    #: set by the command thread once fetching stopped; ``positions`` then holds where ``poll()`` left each partition
    stopped: threading.Event = field(default_factory=threading.Event)
    positions: dict[TopicPartition, int] = field(default_factory=dict)
    #: the thread that fetched each of them (``assignment()`` shows them while the closing callback runs)
    threads: dict[TopicPartition, str] = field(default_factory=dict)
    #: set by the closing thread once the application heard (or it gave up waiting): the claims may go
    told: threading.Event = field(default_factory=threading.Event)
