"""The consumer's command thread: applies channel commands and session changes strictly in order.

Every event a consumer reacts to (a channel listing, a connection-state change, the lease running out, a commit
request from ``poll``, ``close``) goes through one queue to this one thread, so a command is never applied while a
session change is half-handled.

Commands (``docs/protocol.md``) are applied in sequence-number order and deleted to acknowledge them:

* refused, but still acknowledged, when malformed, addressed to another group or to a registration not our current
  one, older than the newest ``(epoch, generation)`` seen (S5, S7), or not written by a coordinator
  (:mod:`zkcoord.consumer.inbox` judges each one) -- the reason is journalled (``command.rejected``);
* ``stop-fetcher``: stop every fetcher (synchronously), commit the consumed positions (S3), call
  ``on_partitions_revoked``, then acknowledge; with a ``revoke`` list (an incremental rebalance) only those
  partitions, the others go on being fetched;
* ``start-fetcher``: read each partition's owner version and committed offset, seek, start fetching, call
  ``on_partitions_assigned``, then acknowledge; an ``incremental`` one lists the whole new assignment, of which
  only the partitions not fetched already are started (and any fetched but not listed are stopped first).

A hand-over (one-step incremental rebalance): a ``stop-fetcher`` with ``handover`` also sets each revoked
partition's owner znode to its new thread, in the transaction that commits the offsets and acknowledges; a
``start-fetcher`` with ``awaiting`` starts the other partitions at once and each awaited one when its owner znode
names our thread (a one-shot watch on each brings an ``owner`` event), and is acknowledged when none is left.  A
newer command arriving meanwhile supersedes it: the wait ends and it is acknowledged (the coordinator that sent the
newer one no longer waits for it), then the newer one is applied.

Session changes: SUSPENDED pauses fetching (the lease is void until the next acknowledged round trip); a new
session after an expiry (LOST) drops the assignment without committing (the partitions may be someone else's by
now), registers again and waits for commands.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from zkcoord.consumer.commits import Closing, Commits, FinalCommit
from zkcoord.consumer.inbox import Wait, admit, reject, sequence_of
from zkcoord.consumer.migration import newer
from zkcoord.consumer.offsets import Claims
from zkcoord.consumer.records import TopicPartition
from zkcoord.consumer.registration import check_channel, check_registration
from zkcoord.consumer.vouch import Admission
from zkcoord.errors import NoNodeError, ZkCoordError, ZkError
from zkcoord.layout import paths
from zkcoord.layout.commands import Command, CommandOption
from zkcoord.runtime.shutdown import RELEASE, StopReport
from zkcoord.zk import ConnState

if TYPE_CHECKING:
    from zkcoord.consumer.client import Consumer

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


class CommandHandler:
    def __init__(
        self,
        consumer: Consumer,
        on_revoked: PartitionsCallback | None,
        on_assigned: PartitionsCallback | None,
    ) -> None:
        self.c = consumer
        self.on_revoked = on_revoked
        self.on_assigned = on_assigned
        self.admission = Admission(consumer.config.group, unsafe=consumer.config.unsafe_no_fencing)
        self.rebalances = 0
        self.last_rebalance: Rebalance | None = None
        self._stop_received_at: float | None = None
        self._applied: set[str] = set()
        self._unacked: set[str] = set()  # applied, acknowledgement not yet known to have landed
        #: commands the group's state could not vouch for yet (journalled once: zkcoord.consumer.inbox)
        self.waiting: set[str] = set()
        self.commits = Commits(consumer)
        self._lost = False
        #: a hand-over's start-fetcher, applied but for the partitions it awaits, or not yet acknowledged
        self._pending: PendingStart | None = None
        #: czxid of the channel whose children we watch (zkcoord.consumer.registration.check_channel), once reported
        self.channel_czxid: int | None = None

    # --- the loop (consumer-cmd thread) ---------------------------------------------------------------------------

    def run(self) -> None:
        while True:
            kind, arg = self.c.next_event()
            if kind == "close":
                self._on_close(arg if isinstance(arg, Closing) else Closing(StopReport(), FinalCommit()))
                return
            try:
                self._handle(kind, arg)
            except ZkError as e:
                # ZooKeeper trouble mid-step.  The children watch does not fire again for an unchanged channel,
                # so the channel is listed again shortly (not this listing replayed: newer ones may have been
                # handled meanwhile): an unacknowledged command is never stranded.
                log.warning("consumer %s: %s", self.c.consumer_id, e)
                if kind == "channel":
                    self.c.redeliver_later(("channel", None))
                elif kind in ("commit", "legacy-claim", "owner", "registration", "channel-node"):
                    self.c.redeliver_later((kind, arg))
                elif self._lost and kind in ("state", "register"):
                    self.c.redeliver_later(("register", None))  # registering again failed: try again
            except ZkCoordError as e:
                # Anything else the project raises (a corrupt partition log, ...): this step is abandoned and
                # said so, and the thread goes on with the next event (S7: bad input never stops a consumer).
                log.warning("consumer %s: %s failed: %s", self.c.consumer_id, kind, e)
                self.c.journal.emit(
                    "input.rejected", what=f"consumer {kind} event", path=self.c.consumer_id, reason=str(e)
                )

    def _handle(self, kind: str, arg: object) -> None:
        if kind == "channel" and isinstance(arg, list):
            self._on_channel(arg)
        elif kind == "channel":  # redelivered after an error: as the channel is now
            self._on_channel(self.c.zk.get_children(paths.channel(self.c.config.group, self.c.consumer_id)))
        elif kind == "state" and isinstance(arg, ConnState):
            self._on_state(arg)
        elif kind == "lease-expired" and isinstance(arg, int):
            self.c.fetcher.pause("lease expired")
            self.c.journal.emit(
                "lease.expired", group=self.c.config.group, consumer=self.c.consumer_id, deadline_ms=arg
            )
        elif kind == "lease-renewed":
            if not self._lost:
                self.c.fetcher.resume()
        elif kind == "commit":
            self.commits.quietly(self.c.fetcher.positions())
        elif kind == "legacy-claim":
            self._claim_pending()
        elif kind == "owner":
            self._claim_awaited(arg if isinstance(arg, str) else None)
        elif kind == "register":
            self._register_again()
        elif kind == "registration":
            check_registration(self)
        elif kind == "channel-node" and (arg is None or isinstance(arg, int)):
            check_channel(self, arg)

    def _on_close(self, closing: Closing) -> None:
        """The command thread's part of ``close``: commit what was consumed (not once the lease is void: the
        partitions may be someone else's), stop, release; the commit's outcome goes into ``closing.commit``, what
        else fails into ``closing.report``; never raises."""
        report, final = closing.report, closing.commit
        positions = {**self.commits.unsettled, **self.c.fetcher.positions()}
        pending = self.c.uncommitted(positions)
        if self._lost:
            final.end(final.FAILED, "session lost", pending=pending)
        elif not self.c.lease.valid():
            final.end(final.FAILED, "lease expired: ZooKeeper unreachable", pending=pending)
        elif final.begin(pending):
            try:
                self.commits.quietly(positions, final=True)
                final.end(final.LANDED)
            except ZkError as e:  # not sent or refused: failed; sent and unanswered: it may land yet
                final.failed(e)
        if final.outcome != final.LANDED and pending:
            log.warning("consumer %s: closing, final commit %s: %s", self.c.consumer_id, final.outcome, final.why)
        revoked = list(self.c.fetcher.assignment())
        self.c.fetcher.revoke("closing")
        try:
            self._release()
        except ZkError as e:
            log.warning("consumer %s: closing: %s", self.c.consumer_id, e)
            report.skip(RELEASE, e)
        if revoked and self.on_revoked is not None:
            self._callback(self.on_revoked, revoked)

    @property
    def lost(self) -> bool:
        """Whether our session was lost and we are not registered again yet."""
        return self._lost

    def release_all(self, revoked: list[TopicPartition]) -> None:
        """After every partition was stopped and committed: forget the claims, tell the application."""
        self._release()
        if revoked and self.on_revoked is not None:
            self._callback(self.on_revoked, revoked)

    def _release(self) -> None:
        """Forget our claims; a migrating consumer also deletes its 0.8 owner znodes (after the last commit)."""
        with self.commits.lock:
            self.c.offsets.release()
            if self.c.bridge is not None and not self._lost:
                self.c.bridge.release()

    def _on_state(self, state: ConnState) -> None:
        c = self.c
        c.journal.emit("zk.state", state=state.value, session=f"{c.zk.session_id:#x}")
        if state is ConnState.SUSPENDED:
            c.lease.invalidate()
            c.fetcher.pause("zookeeper suspended")
        elif state is ConnState.LOST:
            c.lease.invalidate()
            self._lost = True
            c.incarnation = None  # commands for the registration that just ended are refused from now on
            self.abandon_wait()
            # Our member znode is gone and the coordinator may already have given our partitions to others:
            # stop at once and commit nothing.
            revoked = list(c.fetcher.assignment())
            c.fetcher.revoke("session lost")
            self.commits.unsettled.clear()  # commit nothing: the partitions may be someone else's by now
            with self.commits.lock:
                c.offsets.release()
                if c.bridge is not None:
                    c.bridge.session_lost()
            c.journal.emit("consumer.fenced", group=c.config.group, consumer=c.consumer_id, reason="session lost")
            if revoked and self.on_revoked is not None:
                self._callback(self.on_revoked, revoked)
        elif state is ConnState.CONNECTED and self._lost:
            self._register_again()
        elif state is ConnState.CONNECTED:
            pass  # same session: the heartbeat renews the lease and resumes fetching

    def _register_again(self) -> None:
        """After a session loss, once connected: register again (both registries for a migrating consumer, after
        deleting any owner znode a claim created in the new session before the loss was handled).  Until this
        succeeds the consumer counts as lost: it applies no claim and its lease is not renewed.

        :raises ZkError: registration failed (the loop schedules another try).
        """
        c = self.c
        if not self._lost or c.session_state() is not ConnState.CONNECTED:
            return
        if c.bridge is not None:
            with self.commits.lock:
                c.bridge.release_leaked()
        c.register()
        self._lost = False
        self.wait_abandoned()

    def abandon_wait(self) -> None:
        """Our registration ended (session lost, or deleted or replaced under a live session): nothing handed over
        to it is started.  A hand-over's start it awaited is acknowledged, not journalled as applied, once we are
        registered again (:meth:`wait_abandoned`); the coordinator waits for it until then, or until it sees us
        change."""
        if self._pending is not None:
            self._pending.awaiting.clear()
            self._pending.journalled = True

    def wait_abandoned(self) -> None:
        """Registered again: an abandoned wait has only its acknowledgement left (:meth:`_claim_awaited`)."""
        if self._pending is not None:
            self.c.redeliver_later(("owner", None), delay=0.0)

    # --- commands ------------------------------------------------------------------------------------------------

    def _on_channel(self, children: list[str]) -> None:
        c = self.c
        channel = paths.channel(c.config.group, c.consumer_id)
        self._applied &= set(children)  # forget names that are gone
        self.waiting &= set(children)
        self._unacked &= self._applied
        for name in sorted(children, key=sequence_of):
            path = f"{channel}/{name}"
            if name in self._applied:
                if name in self._unacked:  # applied, but the delete was lost with the connection
                    self.ack(path, name)
                continue
            admitted = admit(self, name, path)
            if isinstance(admitted, Wait):
                return  # neither applied nor acknowledged: looked at again shortly
            if admitted is None:
                continue  # gone, or refused and acknowledged
            command = admitted.command
            if self._pending is not None and self._pending.name != name:
                self._supersede(self._pending)  # a newer command, to be applied: the wait is over
            if command.option is CommandOption.STOP_FETCHER:
                if self._stop(path, command):
                    self._applied.add(name)  # acknowledged with the commit, in one transaction
                    continue
            elif not self._start(name, path, command, admitted.vouched):
                self._applied.add(name)  # awaiting partitions: acknowledged once they are all started
                continue
            self.ack(path, name)

    def _stop(self, path: str, command: Command) -> bool:
        """Apply a stop-fetcher; True if it was acknowledged already (with the commit, in one transaction)."""
        c = self.c
        name = path.rpartition("/")[2]
        self.admission.adopt(command)
        if command.revoke is not None and c.bridge is None:
            # Incremental: only the named partitions.  (A migrating consumer's 0.8 claims are released all at
            # once, so it stops everything; the coordinator never sends it a partial stop.)
            wanted = {TopicPartition(t, p) for t, parts in command.revoke.items() for p in parts}
            handover = {
                TopicPartition(t, p): th for t, parts in (command.handover or {}).items() for p, th in parts.items()
            }
            revoked, acked = self._revoke(wanted, "stop-fetcher", ack=path, handover=handover)
            self._journal_applied(name, command, len(revoked))
            return acked
        self._stop_received_at = c.clock()
        revoked = sorted({*c.fetcher.assignment(), *self.commits.unsettled})
        # S3: commit before acknowledging the stop
        self.commits.stopped(c.fetcher.revoke("stop-fetcher"), lost=self._lost)
        self._release()
        if self.on_revoked is not None:
            self._callback(self.on_revoked, revoked)
        self._journal_applied(name, command, len(revoked))
        return False

    def _revoke(
        self,
        tps: set[TopicPartition],
        reason: str,
        ack: str | None = None,
        handover: dict[TopicPartition, str] | None = None,
    ) -> tuple[list[TopicPartition], bool]:
        """Stop, commit (S3) and release the partitions of ``tps`` we fetch; return them, and whether the command
        ``ack`` was deleted (acknowledged) in the commit's transaction -- after the commit, never before it.  The
        partitions of ``handover`` get their new owner in that transaction too (after they stopped: S2)."""
        c = self.c
        stopping = sorted(tp for tp in c.fetcher.assignment() if tp in tps)
        revoked = sorted({*stopping, *self.commits.unsettled})  # with any a failed commit left (this stop, redelivered)
        if not revoked and not handover:
            return [], False
        positions = c.fetcher.revoke_some(stopping, reason) if stopping else {}
        acked = self.commits.stopped(positions, ack, handover, lost=self._lost)
        with self.commits.lock:
            c.offsets.release(revoked)
        if self.on_revoked is not None:
            self._callback(self.on_revoked, revoked)
        return revoked, acked

    def _start(self, name: str, path: str, command: Command, vouched: dict[TopicPartition, str]) -> bool:
        """Apply a start-fetcher; False while partitions it awaits are still to be handed over (then it is
        acknowledged once they are: :meth:`_claim_awaited`).  ``vouched``: the partitions whose owner znodes its
        claims may repair (:class:`zkcoord.consumer.inbox.Admitted`)."""
        c = self.c
        self.admission.adopt(command)
        ownership = {
            TopicPartition(topic, p): thread
            for topic, parts in command.ownership.items()
            for p, thread in parts.items()
        }
        foreign = sorted(t for t in set(ownership.values()) if not t.startswith(f"{c.consumer_id}-"))
        if foreign:
            reject(self.c, name, command, f"ownership names threads of another consumer: {', '.join(foreign[:3])}")
            return True
        incremental = command.incremental and c.bridge is None
        if incremental:
            # Keep what we fetch on the same thread; whatever else we fetch is no longer ours (not expected: the
            # coordinator revokes first), so it is handed over before anything starts.
            held = c.fetcher.assignment()
            self._revoke({tp for tp, thread in held.items() if ownership.get(tp) != thread}, "start-fetcher")
            ownership = {tp: thread for tp, thread in ownership.items() if held.get(tp) != thread}
        elif c.fetcher.assignment():  # a start without a stop before it (only in unsafe mode): hand over first
            self.commits.quietly(c.fetcher.revoke("start-fetcher"))
            self._release()
        awaited = {TopicPartition(t, p) for t, parts in (command.awaiting or {}).items() for p in parts}
        awaiting = {tp: thread for tp, thread in ownership.items() if tp in awaited} if incremental else {}
        now = {tp: thread for tp, thread in ownership.items() if tp not in awaiting}
        claimed = len(self._claim_and_fetch(now, name, incremental=incremental, vouched=vouched).claims)
        if awaiting:
            pending = self._pending = PendingStart(name, path, command, awaiting, claimed)
            self._applied.add(name)  # from here on the wait, not the channel listing, finishes it
            try:
                if self._claim_awaited():
                    return False  # every partition was handed over already: acknowledged
            except ZkError as e:
                log.warning("consumer %s: reading the awaited owner znodes: %s", c.consumer_id, e)
                c.redeliver_later(("owner", None))  # read them again shortly
            if pending.journalled:
                return False  # applied already; only its acknowledgement failed (retried from the owner event)
            c.journal.emit(
                "command.awaiting",
                group=c.config.group,
                consumer=c.consumer_id,
                name=name,
                epoch=command.epoch,
                generation=command.generation,
                partitions=len(pending.awaiting),
                started=pending.claimed,
            )
            return False
        self._finish_start(name, command, claimed)
        return True

    def _claim_and_fetch(
        self,
        ownership: dict[TopicPartition, str],
        name: str,
        *,
        incremental: bool = True,
        awaited: bool = False,
        vouched: dict[TopicPartition, str] | None = None,
    ) -> Claims:
        """Claim ``ownership`` for start-fetcher ``name`` and start fetching what was claimed (beside what is
        fetched already, or instead of it when not ``incremental``).  ``awaited``: partitions handed over by their
        previous owner (see :meth:`OffsetStore.claim`'s ``wait``); ``vouched``: see :meth:`_start`."""
        c = self.c
        repairable = {tp for tp, thread in (vouched or {}).items() if ownership.get(tp) == thread}
        result = c.offsets.claim(
            ownership, add=incremental, wait=c.on_owner_changed if awaited else None, repairable=repairable
        )
        self.commits.journal_repairs()
        for problem in result.problems:
            c.journal.emit("input.rejected", what="partition claim", path=name, reason=problem)
        fetching = {tp: claim.thread for tp, claim in result.claims.items()}
        if c.bridge is not None:
            fetching = c.bridge.claim(
                fetching
            )  # the rest waits for their zk-client owners (zkcoord.consumer.migration)
            self._journal_waiting()
        if incremental:
            c.fetcher.extend(self._positions(fetching))
        else:
            c.fetcher.assign(self._positions(fetching))
        if self.on_assigned is not None and result.claims:
            self._callback(self.on_assigned, sorted(result.claims))
        return result

    def _claim_awaited(self, owner: str | None = None) -> bool:
        """Start the awaited partitions whose owner znode names us now (each read also watches it: the next change
        brings an ``owner`` event for its path); once none is left, journal the start-fetcher applied and
        acknowledge it, and return True.  ``owner``: read only the partition of that owner znode (its watch fired;
        the others' are still set), else every one awaited.  Command thread.

        :raises ZkError: a read or the acknowledgement failed (the event loop tries again shortly; the wait stays
            until the acknowledgement has landed).
        """
        p = self._pending
        if p is None or self._lost:
            return False
        if p.command.incarnation is not None and p.command.incarnation != self.c.incarnation:
            self.abandon_wait()  # meant for a registration of ours that has ended since
        group = self.c.config.group
        todo = {
            tp: thread
            for tp, thread in p.awaiting.items()
            if owner is None or paths.owner(group, tp.topic, tp.partition) == owner
        }
        if todo:
            result = self._claim_and_fetch(todo, p.name, awaited=True)
            p.claimed += len(result.claims)
            for tp in set(todo) - result.pending:
                del p.awaiting[tp]
        if p.awaiting:
            return False
        self._end_wait(p, superseded=False)
        return True

    def _supersede(self, p: PendingStart) -> None:
        """A newer command is to be applied while start-fetcher ``p`` awaits hand-overs: stop waiting, acknowledge
        it (the coordinator that sent the newer command does not wait for it).

        :raises ZkError: the acknowledgement failed (the listing is handled again, and supersedes again).
        """
        if p.awaiting:
            log.info(
                "consumer %s: %s superseded, %d partitions not handed over", self.c.consumer_id, p.name, len(p.awaiting)
            )
        self._end_wait(p, superseded=True)

    def _end_wait(self, p: PendingStart, *, superseded: bool) -> None:
        """Journal ``p`` applied, once (superseded: with what it never started, so nothing reads the group as
        settled on it), then acknowledge it; the wait is over only once the acknowledgement landed.

        :raises ZkError: the acknowledgement failed.
        """
        if not p.journalled:
            p.journalled = True
            self._finish_start(p.name, p.command, p.claimed, not_started=len(p.awaiting) if superseded else None)
        p.awaiting.clear()
        self.ack(p.path, p.name)
        self._pending = None

    def _finish_start(self, name: str, command: Command, claimed: int, *, not_started: int | None = None) -> None:
        """Journal start-fetcher ``name`` applied (``not_started``: superseded, with that many partitions never
        handed over) and count the rebalance."""
        c = self.c
        extra = {} if not_started is None else {"superseded": True, "not_started": not_started}
        self._journal_applied(name, command, claimed, **extra)
        if self._stop_received_at is not None:
            latency = (c.clock() - self._stop_received_at) * 1000
            self.rebalances += 1
            self.last_rebalance = Rebalance(command.generation, latency, c.clock())
            self._stop_received_at = None

    def _positions(self, fetching: dict[TopicPartition, str]) -> dict[TopicPartition, tuple[int, str]]:
        """Start offset and thread of each partition: its committed offset (for a migrating consumer the newer of
        both protocols', read after its owner znode was claimed), else the start policy."""
        c = self.c
        committed = c.offsets.committed()
        if c.bridge is not None:
            legacy, problems = c.bridge.committed(fetching)
            for problem in problems:
                c.journal.emit("input.rejected", what="zk-client offset", path=c.config.group, reason=problem)
            committed = {tp: off for tp in fetching if (off := newer(committed.get(tp), legacy.get(tp))) is not None}
        starts = c.start_positions({tp: committed.get(tp) for tp in fetching})
        return {tp: (starts[tp], thread) for tp, thread in fetching.items()}

    def _claim_pending(self) -> None:
        """Claim again the partitions whose zk-client owners had not let go (migrating consumers only)."""
        c = self.c
        if c.bridge is None or not c.bridge.pending or self._lost:
            return
        got = c.bridge.retry()
        if got:
            c.fetcher.extend(self._positions(got))
            c.journal.emit(
                "migration.claimed",
                group=c.config.group,
                consumer=c.consumer_id,
                partitions=len(got),
                pending=len(c.bridge.pending),
            )

    def _journal_waiting(self) -> None:
        c = self.c
        if c.bridge is None or not c.bridge.pending:
            return
        holders = c.bridge.holders()
        c.journal.emit(
            "migration.waiting",
            group=c.config.group,
            consumer=c.consumer_id,
            partitions=len(holders),
            holders=sorted({h for h in holders.values() if h}),
        )

    def ack(self, path: str, name: str) -> None:
        """Acknowledge (delete) an applied command.  :raises ZkError: it stays to delete when redelivered."""
        self._applied.add(name)
        self._unacked.add(name)
        with contextlib.suppress(NoNodeError):
            self.c.zk.delete(path)
        self._unacked.discard(name)

    def _journal_applied(self, name: str, command: Command, partitions: int, **extra: object) -> None:
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

    # --- commits -------------------------------------------------------------------------------------------------

    def commit(self, positions: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        """Commit ``positions`` (any thread): :meth:`zkcoord.consumer.commits.Commits.commit`."""
        return self.commits.commit(positions)

    def _callback(self, callback: PartitionsCallback, partitions: list[TopicPartition]) -> None:
        try:
            callback(partitions)
        except Exception:  # a user callback must not stop command handling
            log.exception("consumer %s: rebalance callback failed", self.c.consumer_id)
