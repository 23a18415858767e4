"""The consumer's command thread: applies channel commands and session changes strictly in order.

Every event a consumer reacts to (a channel listing, a connection-state change, the lease running out, a commit
request from ``poll``, ``close``) goes through one queue to this one thread, so a command is never applied while a
session change is half-handled.

Commands (``docs/protocol.md``) are applied in sequence-number order and deleted to acknowledge them:

* refused, but still acknowledged, when malformed, addressed to another group or to a registration not our current
  one, older than the newest ``(epoch, generation)`` seen (S5, S7), or not written by a coordinator
  (:mod:`zkcoord.consumer.inbox` judges each one) -- the reason is journalled (``command.rejected``);
* ``stop-fetcher``: stop every fetcher (synchronously), then *park* the stop for the application
  (:mod:`zkcoord.consumer.handoff`): its next ``poll()`` commits what the commit policy says and runs
  ``on_partitions_revoked``, and only then (``revoke-done``) is the stop acknowledged, in one transaction with any
  commit left to settle and a hand-over's owner znodes; with a ``revoke`` list (an incremental rebalance) only those
  partitions, the others go on being fetched; no later command is applied while a stop is parked;
* ``start-fetcher``: read each partition's owner version and committed offset, seek, announce the assignment (the
  next ``poll()`` calls ``on_partitions_assigned``), start fetching, then acknowledge; an ``incremental`` one lists
  the whole new assignment, of which only the partitions not fetched already are started (and any fetched but not
  listed are stopped first) (:mod:`zkcoord.consumer.starting`).

A hand-over (one-step incremental rebalance): a ``stop-fetcher`` with ``handover`` also sets each revoked
partition's owner znode to its new thread, in the transaction that acknowledges (after the application's callback); a
``start-fetcher`` with ``awaiting`` starts the other partitions at once and each awaited one when its owner znode
names our thread (a one-shot watch on each brings an ``owner`` event), and is acknowledged when none is left.  A
newer command arriving meanwhile supersedes it: the wait ends and it is acknowledged (the coordinator that sent the
newer one no longer waits for it), then the newer one is applied (the wait: :mod:`zkcoord.consumer.starting`).

Session changes: SUSPENDED pauses fetching (the lease is void until the next acknowledged round trip); a new
session after an expiry (LOST) drops the assignment without committing (the partitions may be someone else's by
now), cancels a parked stop, announces the loss (``on_partitions_lost``), registers again and waits for commands.
A poll interval exceeded (KIP-62, reported by the heartbeat thread) leaves the group the same way, but registers
again only at the application's next ``poll()``.

The pieces depend one way: this loop uses :class:`zkcoord.consumer.starting.Starter`, :mod:`zkcoord.consumer.inbox`
and :mod:`zkcoord.consumer.registration`, which all act on :class:`zkcoord.consumer.handler_state.HandlerState` over
:class:`zkcoord.consumer.core.ConsumerCore`; nothing here knows the public ``Consumer``.
"""

from __future__ import annotations

import logging

from zkcoord.consumer.assignment import AssignmentReader
from zkcoord.consumer.classic import ClassicLeader
from zkcoord.consumer.commits import Closing, Commits, FinalCommit
from zkcoord.consumer.core import ConsumerCore
from zkcoord.consumer.handler_state import HandlerState, Rebalance
from zkcoord.consumer.handoff import Change, ParkedStop
from zkcoord.consumer.inbox import Wait, admit, judge
from zkcoord.consumer.records import TopicPartition
from zkcoord.consumer.registration import check_channel, check_registration, delete_own
from zkcoord.consumer.starting import Starter
from zkcoord.consumer.vouch import Admission
from zkcoord.errors import AccessRefusedError, ConsumerIdInUseError, ZkCoordError, ZkError
from zkcoord.layout import paths
from zkcoord.layout.commands import Command, CommandOption, assignment_zxid, command_sequence
from zkcoord.runtime.shutdown import RELEASE, StopReport
from zkcoord.zk import ConnState

log = logging.getLogger(__name__)


class CommandHandler:
    """The command thread's loop and the commands and session changes it applies (see the module docstring).
    :meth:`run` is the thread; :meth:`commit` may be called from any thread."""

    def __init__(self, core: ConsumerCore) -> None:
        self.c = core
        self.state = HandlerState(core)
        self.starter = Starter(self.state)
        #: the classic protocol's leader role (seed 001): answers the join records that name this member leader
        self.classic = ClassicLeader(core)
        #: the consumer protocol's assignment znode (zkcoord.consumer.assignment)
        self.assignment = AssignmentReader(core)

    @property
    def admission(self) -> Admission:
        """The newest ``(epoch, generation)`` applied, and the refusals it implies (S5)."""
        return self.state.admission

    @property
    def commits(self) -> Commits:
        return self.state.commits

    @property
    def rebalances(self) -> int:
        """Hand-overs completed (an eager stop followed by its start).  Any thread."""
        return self.state.rebalances

    @property
    def last_rebalance(self) -> Rebalance | None:
        """The last completed hand-over.  Any thread."""
        return self.state.last_rebalance

    @property
    def lost(self) -> bool:
        """Whether our session was lost and we are not registered again yet."""
        return self.state.lost

    # --- the loop (consumer-cmd thread) ---------------------------------------------------------------------------

    def run(self) -> None:
        while True:
            kind, arg = self.c.next_event()
            if kind == "close":
                self._on_close(arg if isinstance(arg, Closing) else Closing(StopReport(), FinalCommit()))
                return
            try:
                self._handle(kind, arg)
            except AccessRefusedError as e:
                # Not redelivered: the same identity is refused again.  Journalled (zk.refused); poll() raises it and
                # the application closes us (docs/security.md).
                log.warning("consumer %s: %s", self.c.consumer_id, e)
            except ZkError as e:
                # ZooKeeper trouble mid-step.  The children watch does not fire again for an unchanged channel,
                # so the channel is listed again shortly (not this listing replayed: newer ones may have been
                # handled meanwhile): an unacknowledged command is never stranded.
                log.warning("consumer %s: %s", self.c.consumer_id, e)
                if kind in ("channel", "assignment"):
                    self.c.redeliver_later((kind, None))
                elif kind == "registration":
                    self.c.redeliver_later((kind, None))  # read it then: what the watch saw may be old by now
                elif kind in (
                    "commit",
                    "legacy-claim",
                    "owner",
                    "channel-node",
                    "revoke-done",
                    "classic-join",
                ):
                    self.c.redeliver_later((kind, arg))
                elif kind == "poll-timeout":  # only the deletion is left to do
                    self.c.redeliver_later((kind, 0.0))
                elif self.state.lost and kind in ("state", "register"):
                    self.c.redeliver_later(("register", None))  # registering again failed: try again
            except ZkCoordError as e:
                # Anything else the project raises (a corrupt partition log, ...): this step is abandoned and
                # said so, and the thread goes on with the next event (S7: bad input never stops a consumer).
                log.warning("consumer %s: %s failed: %s", self.c.consumer_id, kind, e)
                if kind == "revoke-done":  # a parked stop must be finished, or no command is applied after it
                    self.c.redeliver_later((kind, arg), delay=1.0)
                self.c.journal.emit(
                    "input.rejected", what=f"consumer {kind} event", path=self.c.consumer_id, reason=str(e)
                )

    def _handle(self, kind: str, arg: object) -> None:
        if kind in ("registration", "channel-node", "fenced"):
            self._on_own_znodes(kind, arg)
        elif kind in ("assignment", "channel"):
            self._on_command(kind, arg)
        elif kind == "state" and isinstance(arg, ConnState):
            self._on_state(arg)
        elif kind == "lease-expired" and isinstance(arg, int):
            self.c.fetcher.pause("lease expired")
            self.c.journal.emit(
                "lease.expired", group=self.c.config.group, consumer=self.c.consumer_id, deadline_ms=arg
            )
        elif kind == "lease-renewed":
            if not self.state.lost:
                self.c.fetcher.resume()
        elif kind == "commit" and isinstance(arg, dict):  # poll()'s auto-commit: positions as it was entered
            self.state.commits.quietly(self._still_current(arg))
        elif kind in ("revoke-done", "register", "poll-timeout"):
            self._on_application(kind, arg)
        elif kind == "legacy-claim":
            self.starter.claim_pending()
        elif kind == "owner":
            self.starter.claim_awaited(arg if isinstance(arg, str) else None)
        elif kind == "classic-join":
            self.classic.on_join(arg)

    def _on_command(self, kind: str, arg: object) -> None:
        if kind == "assignment":
            self._on_assignment()
        elif isinstance(arg, list):
            self._on_channel(arg)
        else:  # redelivered after an error: as the channel is now
            self._on_channel(self.c.zk.get_children(paths.channel(self.c.config.group, self.c.consumer_id)))

    def _on_application(self, kind: str, arg: object) -> None:
        """What the application's side asks for: finish a parked stop, register again after leaving, leave."""
        if kind == "revoke-done" and isinstance(arg, tuple):
            self._on_revoke_done(*arg)
        elif kind == "register":  # from poll(): back after a poll-interval leave (or retried after an error)
            if self.state.leaving is not None:
                self.c.redeliver_later((kind, None))  # our old registration is to be deleted first
                return
            self.state.left_for_poll = False
            self._register_again()
        elif kind == "poll-timeout" and isinstance(arg, float):
            self._leave_for_poll_interval(arg)

    def _still_current(self, positions: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        """Of an auto-commit queued by ``poll()``, what may still be written: only partitions fetched now.  One stopped
        since was committed further by its stop (in ``poll()`` before its callback, or in the stop's transaction), and
        this older event, handled after it, must not move it back.  (An offset may go back legitimately -- a reset
        of a position beyond the log -- so "never lower" is not the rule.)"""
        fetched = self.c.fetcher.assignment()
        return {tp: off for tp, off in positions.items() if tp in fetched}

    def _on_own_znodes(self, kind: str, arg: object) -> None:
        """Our registration or channel changed, or a commit found partitions no longer ours: repair, or stop."""
        if kind == "registration":
            check_registration(self.state, arg if isinstance(arg, tuple) else None)
        elif kind == "channel-node" and (arg is None or isinstance(arg, int)):
            check_channel(self.state, arg)
        elif kind == "fenced" and isinstance(arg, list):
            self.state.commits.stop_fenced(arg)

    def _on_close(self, closing: Closing) -> None:
        """The command thread's part of ``close``: with auto-commit on, commit what ``poll()`` returned (not once the
        lease is void: the partitions may be someone else's); stop fetching; let the closing thread run
        ``on_partitions_revoked`` while the claims still hold (a commit in it lands); release.  The commit's outcome
        goes into ``closing.commit``, what else fails into ``closing.report``; never raises."""
        report, final = closing.report, closing.commit
        stopped: dict[TopicPartition, int] = {}
        told: set[TopicPartition] = set()
        if self.state.parked is not None:
            # Parked after close() looked (the closing thread tells the application), or taken by it and its finish
            # failed (no session, or the transaction): then its callback ran already, and must not run again.
            untold = self.c.handoff.cancel(self.state.parked)
            stopped = dict(self.state.parked.positions)
            told = set(stopped) - set(untold)
            self.state.parked = None
        positions = {**self.state.commits.unsettled, **stopped, **self.c.fetcher.positions()}
        pending = self.c.uncommitted(positions) if self.c.config.auto_commit else 0
        if not pending:
            final.end(final.LANDED, pending=0)  # nothing the policy commits (with auto-commit off: the application's)
        elif self.state.lost:
            final.end(final.FAILED, "session lost", pending=pending)
        elif not self.c.lease.valid():
            final.end(final.FAILED, "lease expired: ZooKeeper unreachable", pending=pending)
        elif final.begin(pending):
            try:
                self.state.commits.quietly(positions, final=True)
                final.end(final.LANDED)
            except ZkError as e:  # not sent or refused: failed; sent and unanswered: it may land yet
                final.failed(e)
        if final.outcome != final.LANDED and pending:
            log.warning("consumer %s: closing, final commit %s: %s", self.c.consumer_id, final.outcome, final.why)
        closing.positions.update({tp: off for tp, off in stopped.items() if tp not in told})
        closing.threads.update(self.c.fetcher.assignment())
        closing.positions.update(self.c.fetcher.revoke("closing"))
        closing.stopped.set()
        if closing.session is not None and not self.state.lost:
            closing.told.wait(closing.session.remaining())
        try:
            self.state.release()
        except ZkError as e:
            log.warning("consumer %s: closing: %s", self.c.consumer_id, e)
            report.skip(RELEASE, e)

    def _on_state(self, conn: ConnState) -> None:
        c = self.c
        c.journal.emit("zk.state", state=conn.value, session=f"{c.zk.session_id:#x}")
        if conn is ConnState.SUSPENDED:
            c.lease.invalidate()
            c.fetcher.pause("zookeeper suspended")
        elif conn is ConnState.LOST:
            c.lease.invalidate()
            self.state.lost = True
            c.incarnation = None  # commands for the registration that just ended are refused from now on
            self.state.abandon_wait()
            # Our member znode is gone and the coordinator may already have given our partitions to others:
            # stop at once and commit nothing; a parked stop will not be finished (it was for that registration).
            lost = set(c.fetcher.assignment())
            if self.state.parked is not None:
                lost.update(c.handoff.cancel(self.state.parked))
                self.state.parked = None
            c.fetcher.revoke("session lost")
            self.state.commits.unsettled.clear()  # commit nothing: the partitions may be someone else's by now
            with self.state.commits.lock:
                c.offsets.release()
                if c.bridge is not None:
                    c.bridge.session_lost()
            c.journal.emit("consumer.fenced", group=c.config.group, consumer=c.consumer_id, reason="session lost")
            if lost:
                c.handoff.announce(Change.LOST, sorted(lost))
        elif conn is ConnState.CONNECTED and self.state.lost:
            self._register_again()
        # CONNECTED in the same session needs nothing here: the heartbeat renews the lease and resumes fetching.

    def _leave_for_poll_interval(self, away_s: float) -> None:
        """KIP-62: the application has not called ``poll()`` for longer than ``max_poll_interval_s``: it is taken for
        hung.  Leave the group so that its partitions move: stop fetching, commit nothing (the application may be
        stuck in the middle of a batch), release, and count as unregistered -- no claim, no command, no registering
        again, even after a reconnection -- until the application's next ``poll()`` (which announces the loss and asks
        to register again); then delete our registration, so that the coordinator sees us leave.  Everything but the
        deletion is done first, so a ZooKeeper error leaves only the deletion to try again (``away_s`` 0).

        :raises ZkError: the deletion failed (the event is redelivered).
        """
        c = self.c
        if self.state.leaving is None:
            if self.state.lost or c.incarnation is None:
                return
            if away_s and c.handoff.overdue(c.config.max_poll_interval_s) is None:
                return  # the application polled since the heartbeat looked
            lost = set(c.fetcher.assignment())
            if self.state.parked is not None:
                lost.update(c.handoff.cancel(self.state.parked))
                self.state.parked = None
            c.fetcher.revoke("poll interval exceeded")
            self.state.commits.unsettled.clear()
            self.state.abandon_wait()
            self.state.leaving, c.incarnation = c.incarnation, None
            self.state.lost = True  # unregistered: no claim, no command, until the application polls again
            self.state.left_for_poll = True
            with self.state.commits.lock:
                c.offsets.release()
            c.handoff.forget_poll()
            c.handoff.rejoin_due = True
            self._journal_poll_timeout(away_s, len(lost))
            c.handoff.announce(Change.LOST, sorted(lost))
        if c.bridge is not None:
            c.bridge.release()
            c.bridge.deregister()
        delete_own(c, self.state.leaving)
        self.state.leaving = None

    def _journal_poll_timeout(self, away_s: float, partitions: int) -> None:
        c = self.c
        interval = c.config.max_poll_interval_s
        log.warning(
            "consumer %s: poll() not called for %.1f s (max poll interval %g s): left group %s, %d partitions given up",
            c.consumer_id,
            away_s,
            interval,
            c.config.group,
            partitions,
        )
        c.journal.emit(
            "consumer.poll_timeout",
            group=c.config.group,
            consumer=c.consumer_id,
            interval_ms=round(interval * 1000),
            away_ms=round(away_s * 1000),
            partitions=partitions,
        )

    def _register_again(self) -> None:
        """After a session loss, once connected: register again (both registries for a migrating consumer, after
        deleting any owner znode a claim created in the new session before the loss was handled).  Until this
        succeeds the consumer counts as lost: it applies no claim and its lease is not renewed.

        :raises ZkError: registration failed (the loop schedules another try).
        """
        c = self.c
        if not self.state.lost or self.state.left_for_poll or c.session_state() is not ConnState.CONNECTED:
            return  # (left for the poll interval: only the application's next poll() brings us back)
        if c.bridge is not None:
            with self.state.commits.lock:
                c.bridge.release_leaked()
        try:
            c.register()
        except ConsumerIdInUseError as e:
            # Another process registered with our id while we were away: stay lost (stopped, unregistered) and try
            # again shortly (a data watch does not help while lost: zkcoord.consumer.registration).
            if not self.state.displaced:
                self.state.displaced = True
                log.warning("consumer %s: not registered again: %s", c.consumer_id, e)
                c.journal.emit("input.rejected", what="registering again", path=c.consumer_id, reason=str(e))
            c.redeliver_later(("register", None), delay=1.0)
            return
        self.state.displaced = False
        self.state.lost = False
        self.state.wait_abandoned()
        if c.config.rebalance == "consumer":
            c.events.put(("assignment", None))  # the new registration's assignment (and its watch, in this session)

    # --- commands ------------------------------------------------------------------------------------------------

    def _on_channel(self, children: list[str]) -> None:
        c = self.c
        channel = paths.channel(c.config.group, c.consumer_id)
        self.state.applied &= set(children)  # forget names that are gone
        self.state.waiting &= set(children)
        self.state.refused &= set(children)
        self.state.unacked &= self.state.applied
        for name in sorted(children, key=command_sequence):
            path = f"{channel}/{name}"
            if name in self.state.applied:
                if name in self.state.unacked:  # applied, but the delete was lost with the connection
                    self.state.ack(path, name)
                continue
            if self.state.parked is not None:
                self.state.channel_blocked = True
                return  # nothing is applied after a stop the application has not finished (listed again then)
            admitted = admit(self.state, name, path)
            if isinstance(admitted, Wait):
                return  # neither applied nor acknowledged: looked at again shortly
            if admitted is None:
                continue  # gone, or refused and acknowledged
            command = admitted.command
            if self.state.pending is not None and self.state.pending.name != name:
                self.starter.supersede(self.state.pending)  # a newer command, to be applied: the wait is over
            if command.option is CommandOption.STOP_FETCHER:
                if self._stop(path, command):
                    continue  # parked for the application, or acknowledged with the commit in one transaction
            elif not self.starter.start(name, path, command, admitted.vouched):
                self.state.applied.add(name)  # awaiting partitions: acknowledged once they are all started
                continue
            self.state.ack(path, name)

    def _on_assignment(self) -> None:
        """Our assignment znode changed (or is looked at again): judge its newest write and apply it as a channel's
        command, acknowledged by one write (:mod:`zkcoord.consumer.assignment`).  A write handled already is not
        applied again; nothing is applied while a stop is parked (read again when it is finished) or while we are
        not registered (read again once we are).

        :raises ZkError: on I/O failure (the event is redelivered; a write not acknowledged is handled again).
        """
        if self.state.lost or self.c.incarnation is None:
            return
        if self.state.parked is not None:
            self.state.assignment_blocked = True  # read when the stop is finished (_on_revoke_done), not now
            return
        written = self.assignment.read()
        if written is None or written.name == self.state.assignment_done:
            return
        name, path = written.name, written.path
        admitted = judge(self.state, name, path, written.got, written.state, rewritten=True)
        if isinstance(admitted, Wait):
            return  # read again shortly
        if admitted is not None:
            command = admitted.command
            if self.state.pending is not None and self.state.pending.name != name:
                self.starter.supersede(self.state.pending)
            if command.option is CommandOption.STOP_FETCHER:
                if self._stop(path, command):
                    self.state.assignment_done = name  # parked for the application, or acknowledged
                    return
            elif not self.starter.start(name, path, command, admitted.vouched):
                self.state.assignment_done = name  # awaiting partitions: acknowledged once they are all started
                return
            self.state.ack(path, name)
        self.state.assignment_done = name  # (refused: acknowledged as refused by judge)

    def _stop(self, path: str, command: Command) -> bool:
        """Apply a stop-fetcher (:meth:`HandlerState.stop`); True if it is parked for the application or was
        acknowledged already, False if it is to be acknowledged alone."""
        name = path.rpartition("/")[2]
        self.state.admission.adopt(command)
        wanted: set[TopicPartition] | None = None
        if command.revoke is not None and self.c.bridge is None:
            # Incremental: only the named partitions.  (A migrating consumer's 0.8 claims are released all at
            # once, so it stops everything; the coordinator never sends it a partial stop.)
            wanted = {TopicPartition(t, p) for t, parts in command.revoke.items() for p in parts}
        if self.state.stop(name, path, command, wanted):
            return True
        self.state.journal_applied(name, command, 0)
        return False

    def _on_revoke_done(self, stop: ParkedStop, leftover: dict[TopicPartition, int]) -> None:
        """The application ran ``on_partitions_revoked`` for ``stop``; ``leftover``: the auto-commit it made first
        failed (it goes into the stop's transaction).  Finish the stop, then look at the channel again (commands
        behind it waited).  A stop no longer parked (the session ended meanwhile) is left alone.

        :raises ZkError: the stop's transaction failed (the event is redelivered; the stop stays parked).
        """
        if self.state.parked is not stop:
            return
        if self.c.zk.session_id != self.c.registered_session:
            # Not connected in our session right now (a ZooKeeper restart: kazoo reports no session while it
            # reconnects), or it ended (then the loss, handled next, cancels the stop and this finds it gone): look
            # again shortly, never drop it -- a parked stop left unfinished would block every later command.
            self.c.redeliver_later(("revoke-done", (stop, leftover)))
            return
        self.state.finish_stop(stop, leftover)
        if not stop.eager and stop.partitions:
            # An incremental member that lost partitions has completed its rebalance: it hears so with nothing new
            # (a member that also gains hears its start later), as KIP-848's consumer calls onPartitionsAssigned
            # after every reconciliation, even with nothing added.
            self.c.handoff.announce(Change.ASSIGNED, [])
        # Commands behind the stop waited: in the assignment znode, or (a mixed group's) in the channel.
        if assignment_zxid(stop.name) < 0 or self.state.channel_blocked:
            self.state.channel_blocked = False
            self.c.events.put(("channel", None))
        if self.state.assignment_blocked:  # (its watch fired while the stop was parked; else nothing is newer)
            self.state.assignment_blocked = False
            self.c.events.put(("assignment", None))

    # --- commits -------------------------------------------------------------------------------------------------

    def commit(self, positions: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        """Commit ``positions`` (any thread): :meth:`zkcoord.consumer.commits.Commits.commit`."""
        return self.state.commits.commit(positions)
