"""The command thread's state, and the steps every kind of command shares: acknowledge, stop-commit-release, tell
the application.

:class:`HandlerState` is what :mod:`zkcoord.consumer.commands` (the loop), :mod:`zkcoord.consumer.starting` (a
start-fetcher and a hand-over's wait), :mod:`zkcoord.consumer.inbox` (judging a command) and
:mod:`zkcoord.consumer.registration` (repairing our own znodes) act on; none of them needs the others' types, and
none needs the public :class:`zkcoord.consumer.client.Consumer`.

Command thread only, except :attr:`HandlerState.rebalances` and :attr:`HandlerState.last_rebalance` (read by
``metrics()`` on the application's thread: each is replaced whole) and :attr:`HandlerState.commits` (see
:mod:`zkcoord.consumer.commits`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from zkcoord.consumer.acks import acknowledge
from zkcoord.consumer.commits import Commits
from zkcoord.consumer.core import ConsumerCore
from zkcoord.consumer.records import TopicPartition
from zkcoord.consumer.vouch import Admission
from zkcoord.layout.commands import Command

log = logging.getLogger(__name__)

PartitionsCallback = Callable[[list[TopicPartition]], None]


@dataclass(slots=True)
class PendingStart:
    """A hand-over's start-fetcher: applied, but for the partitions it awaits (command thread only)."""

    name: str
    path: str
    command: Command
    #: partition -> our thread, for the partitions whose previous owner has not handed them over yet
    awaiting: dict[TopicPartition, str]
    #: partitions of the command started so far
    claimed: int = 0
    #: ``command.applied`` is journalled (the wait is over; the acknowledgement may still be due)
    journalled: bool = False


@dataclass(frozen=True, slots=True)
class Rebalance:
    """The last completed hand-over as this consumer saw it (stop received -> start applied)."""

    generation: int
    latency_ms: float
    finished_at: float


class HandlerState:
    """The command handler's mutable state (see the module docstring for threads)."""

    def __init__(
        self,
        core: ConsumerCore,
        on_revoked: PartitionsCallback | None,
        on_assigned: PartitionsCallback | None,
    ) -> None:
        self.c = core
        self.on_revoked = on_revoked
        self.on_assigned = on_assigned
        self.admission = Admission(core.config.group, unsafe=core.config.unsafe_no_fencing)
        self.commits = Commits(core)
        self.rebalances = 0
        self.last_rebalance: Rebalance | None = None
        #: when the last eager stop-fetcher arrived (the start that follows it counts a rebalance)
        self.stop_received_at: float | None = None
        #: commands applied (or being awaited), by name; forgotten once gone from the channel
        self.applied: set[str] = set()
        #: applied, acknowledgement not yet known to have landed
        self.unacked: set[str] = set()
        #: commands the group's state could not vouch for yet (journalled once: zkcoord.consumer.inbox)
        self.waiting: set[str] = set()
        #: our session was lost and we are not registered again yet
        self.lost = False
        #: a hand-over's start-fetcher, applied but for the partitions it awaits, or not yet acknowledged
        self.pending: PendingStart | None = None
        #: czxid of the channel whose children we watch (zkcoord.consumer.registration.check_channel), once reported
        self.channel_czxid: int | None = None
        #: our registration ended under a live session and another live session holds our id (another process runs
        #: with it): we are stopped and unregistered until it is gone (zkcoord.consumer.registration)
        self.displaced = False
        #: commands refused (acknowledged without a record: zkcoord.consumer.acks), until they are gone
        self.refused: set[str] = set()

    def ack(self, path: str, name: str) -> None:
        """Acknowledge a command: delete it and, if we applied it (not :meth:`refuse`), record it in its channel, in
        one transaction (:mod:`zkcoord.consumer.acks`).  :raises ZkError: it stays to acknowledge when redelivered."""
        self.applied.add(name)
        self.unacked.add(name)
        acknowledge(self.c.zk, path, record=name not in self.refused)
        self.unacked.discard(name)

    def refuse(self, name: str) -> None:
        """Command ``name`` is refused: its acknowledgement deletes it without recording it."""
        self.refused.add(name)

    def release(self) -> None:
        """Forget our claims; a migrating consumer also deletes its 0.8 owner znodes (after the last commit)."""
        with self.commits.lock:
            self.c.offsets.release()
            if self.c.bridge is not None and not self.lost:
                self.c.bridge.release()

    def release_all(self, revoked: list[TopicPartition]) -> None:
        """After every partition was stopped and committed: forget the claims, tell the application."""
        self.release()
        if revoked and self.on_revoked is not None:
            self.callback(self.on_revoked, revoked)

    def revoke(
        self,
        tps: set[TopicPartition],
        reason: str,
        ack: str | None = None,
        handover: dict[TopicPartition, str] | None = None,
    ) -> tuple[list[TopicPartition], bool]:
        """Stop, commit (S3) and release the partitions of ``tps`` we fetch; return them, and whether the command
        ``ack`` was deleted (acknowledged) in the commit's transaction -- after the commit, never before it.  The
        partitions of ``handover`` get their new owner in that transaction too (after they stopped: S2).

        :raises ZkError: the commit failed (its positions stay in ``commits.unsettled`` for the redelivered stop).
        """
        c = self.c
        stopping = sorted(tp for tp in c.fetcher.assignment() if tp in tps)
        revoked = sorted({*stopping, *self.commits.unsettled})  # with any a failed commit left (this stop, redelivered)
        if not revoked and not handover:
            return [], False
        positions = c.fetcher.revoke_some(stopping, reason) if stopping else {}
        acked = self.commits.stopped(positions, ack, handover, lost=self.lost)
        with self.commits.lock:
            c.offsets.release(revoked)
        if self.on_revoked is not None:
            self.callback(self.on_revoked, revoked)
        return revoked, acked

    def abandon_wait(self) -> None:
        """Our registration ended (session lost, or deleted or replaced under a live session): nothing handed over
        to it is started.  A hand-over's start it awaited is acknowledged, not journalled as applied, once we are
        registered again (:meth:`wait_abandoned`); the coordinator waits for it until then, or until it sees us
        change."""
        if self.pending is not None:
            self.pending.awaiting.clear()
            self.pending.journalled = True

    def wait_abandoned(self) -> None:
        """Registered again: an abandoned wait has only its acknowledgement left
        (:meth:`zkcoord.consumer.starting.Starter.claim_awaited`)."""
        if self.pending is not None:
            self.c.redeliver_later(("owner", None), delay=0.0)

    def journal_applied(self, name: str, command: Command, partitions: int, **extra: object) -> None:
        c = self.c
        c.journal.emit(
            "command.applied",
            group=c.config.group,
            consumer=c.consumer_id,
            name=name,
            option=command.option.value,
            epoch=command.epoch,
            generation=command.generation,
            partitions=partitions,
            **extra,
        )

    def callback(self, callback: PartitionsCallback, partitions: list[TopicPartition]) -> None:
        """Call a rebalance callback of the application; what it raises is logged, never propagated."""
        try:
            callback(partitions)
        except Exception:  # a user callback must not stop command handling
            log.exception("consumer %s: rebalance callback failed", self.c.consumer_id)
