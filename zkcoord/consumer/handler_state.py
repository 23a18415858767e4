"""The command thread's state, and the steps every kind of command shares: acknowledge, stop (park for the
application, then commit-acknowledge-release), announce to the application.

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
from dataclasses import dataclass

from zkcoord.consumer.acks import acknowledge
from zkcoord.consumer.commits import Commits
from zkcoord.consumer.core import ConsumerCore
from zkcoord.consumer.handoff import Change, ParkedStop
from zkcoord.consumer.records import TopicPartition
from zkcoord.consumer.vouch import Admission
from zkcoord.layout.commands import Command
from zkcoord.runtime.faults import fault_point

log = logging.getLogger(__name__)


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

    def __init__(self, core: ConsumerCore) -> None:
        self.c = core
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
        #: the stop-fetcher waiting for the application's next ``poll()`` (zkcoord.consumer.handoff); none is applied
        #: after it until it is finished
        self.parked: ParkedStop | None = None
        #: we left the group for exceeding the poll interval: only the application's next ``poll()`` brings us back
        #: (not a reconnection); ``leaving``: the incarnation whose registration is still to be deleted
        self.left_for_poll = False
        self.leaving: int | None = None
        #: the last write of our assignment znode handled (applied, parked, awaited or refused): not handled again
        self.assignment_done = ""
        #: a channel listing, or our assignment's watch, stopped at a parked stop: looked at again when it is finished
        self.channel_blocked = False
        self.assignment_blocked = False
        #: the start whose acknowledgement landed with its claim's checks (zkcoord.consumer.carried): not written again
        self.landed = ""

    def ack(self, path: str, name: str) -> None:
        """Acknowledge a command: delete it and, if we applied it (not :meth:`refuse`), record it in its channel, in
        one transaction (:mod:`zkcoord.consumer.acks`).  :raises ZkError: it stays to acknowledge when redelivered."""
        self.applied.add(name)
        if name == self.landed:
            return
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

    def release_all(self, revoked: list[TopicPartition], change: Change = Change.REVOKED) -> None:
        """After every partition was stopped (and committed as the policy says): forget the claims, and tell the
        application on its thread (:mod:`zkcoord.consumer.handoff`)."""
        self.release()
        if revoked:
            self.c.handoff.announce(change, revoked)

    def revoke(self, tps: set[TopicPartition], reason: str) -> list[TopicPartition]:
        """Stop the partitions of ``tps`` we fetch outside a stop-fetcher (a start that lists them no more: the
        coordinator revokes first, so only after a lost stop), release them without committing (the application may
        still be working on what ``poll()`` returned, and the partitions may be someone else's: Kafka's "lost") and
        announce them lost; return them."""
        c = self.c
        stopping = sorted(tp for tp in c.fetcher.assignment() if tp in tps)
        if not stopping:
            return []
        c.fetcher.revoke_some(stopping, reason)
        with self.commits.lock:
            c.offsets.release(stopping)
        c.handoff.announce(Change.LOST, stopping)
        return stopping

    def stop(self, name: str, path: str, command: Command, tps: set[TopicPartition] | None) -> bool:
        """Apply stop-fetcher ``name``: stop fetching ``tps`` (None: everything, an eager stop) at once, then park the
        rest for the application's next ``poll()`` (:mod:`zkcoord.consumer.handoff`); return True if it is parked or
        was finished and acknowledged here, False if there was nothing to stop (acknowledge it alone).

        In unsafe mode (the demo's contrast) the stop is finished at once, committing what ``poll()`` returned before
        the application has processed it: the order this replaced.

        :raises ZkError: finishing here failed (kept in ``commits.unsettled`` for the redelivered command).
        """
        c = self.c
        eager = tps is None
        # Under the hand-off's lock, which commit() takes to read the fetcher's positions and the parked stops: a
        # partition taken out of the fetcher here is parked before commit() can look, so it is always in one of them.
        with c.handoff.moving:
            owned = c.fetcher.assignment()
            if eager:
                self.stop_received_at = c.clock()
                stopping = sorted(owned)
                positions = c.fetcher.revoke("stop-fetcher")
            else:
                stopping = sorted(tp for tp in owned if tp in (tps or set()))
                positions = c.fetcher.revoke_some(stopping, "stop-fetcher") if stopping else {}
            revoked = sorted({*stopping, *self.commits.unsettled})  # with what a failed commit left (redelivered)
            handover = {
                TopicPartition(t, p): th for t, parts in (command.handover or {}).items() for p, th in parts.items()
            }
            if not eager and not revoked and not handover:
                return False
            stop = ParkedStop(name, path, command, revoked, positions, handover, eager, c.clock())
            stop.threads.update((tp, owned[tp]) for tp in stopping)
            parks = not (c.config.unsafe_no_fencing or (not eager and not revoked))
            if parks:
                self.parked = stop
                c.handoff.park(stop)
        if not parks:
            self.finish_stop(stop, positions)
            if revoked:
                c.handoff.announce(Change.REVOKED, revoked)
                if not eager:  # an incremental loser's rebalance is complete (see commands._on_revoke_done)
                    c.handoff.announce(Change.ASSIGNED, [])
            if c.config.unsafe_no_fencing:  # where the revoke callback ran before issue 25: the contrast's fault
                fault_point("consumer.after_revoke", c.journal)
            return True
        c.journal.emit(
            "command.parked",
            group=c.config.group,
            consumer=c.consumer_id,
            name=name,
            epoch=command.epoch,
            generation=command.generation,
            partitions=len(revoked),
        )
        return True

    def finish_stop(self, stop: ParkedStop, commit: dict[TopicPartition, int]) -> None:
        """The application has run ``on_partitions_revoked`` for ``stop`` (or there is none to wait for): in one
        transaction commit ``commit`` and whatever an earlier try left unsettled, set a hand-over's owner znodes and
        acknowledge (S3: the acknowledgement never lands without the commit; S2: the new owner is named only now,
        after the old one stopped fetching and its application heard it); then release the partitions and journal the
        command applied.  After a session loss nothing is written (the stop was for the registration that ended).

        :raises ZkError: nothing landed; the commit's positions stay in ``commits.unsettled`` and the stop stays
            parked for another try.
        """
        c = self.c
        if not self.lost:
            # (a consumer-protocol stop's acknowledgement carries the committed offsets of what it gives up)
            releasing = set(stop.partitions)
            self.commits.stopped(commit, stop.path, stop.handover, lost=False, verify=stop.verify, releasing=releasing)
        if stop.eager:
            self.release()
        else:
            with self.commits.lock:
                c.offsets.release(stop.partitions)
        self.parked = None
        self.applied.add(stop.name)
        waited = round((c.clock() - stop.parked_at) * 1000, 3)
        self.journal_applied(stop.name, stop.command, len(stop.partitions), wait_ms=waited)

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
        c.stats.applied(command.option.value)
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
