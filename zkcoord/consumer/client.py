"""The consumer: registers in its group, obeys the coordinator's command channel, fetches, and hands out records.

Usage::

    config = ConsumerConfig(group="billing", subscription=Subscription.static({"orders": 2}),
                            zk="127.0.0.1:2181", data_dir=Path("~/.zkcoord/data").expanduser())
    with Consumer(config) as consumer:
        while running:
            for record in consumer.poll(1.0):
                handle(record)

Threads (nothing starts before :meth:`Consumer.start`):

* the application's thread calls :meth:`poll`, :meth:`commit`, :meth:`close`;
* ``consumer-cmd``: applies channel commands and session changes strictly in order (:mod:`zkcoord.consumer.commands`);
* ``consumer-hb``: one ZooKeeper round trip per heartbeat interval; each acknowledged one renews the lease (S6);
* fetcher threads (:class:`zkcoord.consumer.fetcher.FetchManager`);
* kazoo's threads, whose callbacks only enqueue.

Stopping (:meth:`Consumer.close`) is bounded by ``config.shutdown_timeout_s`` whatever ZooKeeper does
(:mod:`zkcoord.runtime.shutdown`): fetching stops first, then the final commit, the release and the deregistration are
tried within the budget, then the session is closed without waiting past it.

Layers (imports go one way): this facade builds :class:`zkcoord.consumer.core.ConsumerCore` (the state and services
the command thread shares: session, stores, fetcher, registration, event queue) and the command handler
(:mod:`zkcoord.consumer.commands`) over it; nothing below imports this module.

S6: records are handed out only while the lease is valid; the lease is renewed by acknowledged round trips,
measured from when each was *sent*, and lasts half the session timeout, so a paused or cut-off consumer stops
handing out records before the server can have expired its session and let the coordinator reassign its partitions.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping

from zkcoord.consumer import shared
from zkcoord.consumer.commands import CommandHandler
from zkcoord.consumer.commits import Closing, FinalCommit
from zkcoord.consumer.config import ConsumerConfig, new_consumer_id
from zkcoord.consumer.core import ConsumerCore
from zkcoord.consumer.fetcher import FetchManager
from zkcoord.consumer.handler_state import Rebalance
from zkcoord.consumer.lease import Lease, lease_duration, wall_ms_at
from zkcoord.consumer.offsets import OffsetStore
from zkcoord.consumer.polling import AppSide, PartitionsCallback, journal_consumed
from zkcoord.consumer.records import ConsumerRecord, TopicPartition
from zkcoord.consumer.registration import create_channel, delete_own, register_first, watch_own
from zkcoord.consumer.resets import ResetReporter
from zkcoord.consumer.shared import ConsumerMetrics
from zkcoord.errors import ZkError
from zkcoord.layout import paths
from zkcoord.runtime.journal import Journal
from zkcoord.runtime.shutdown import DEREGISTER, SESSION, StopBudget, StopReport
from zkcoord.zk import ConnState, ZkClient, ZkConfig

log = logging.getLogger(__name__)


class Consumer:
    """A group member driven by the coordinator.  Context manager; see the module docstring for threads."""

    def __init__(
        self,
        config: ConsumerConfig,
        *,
        journal: Journal | None = None,
        on_partitions_revoked: PartitionsCallback | None = None,
        on_partitions_assigned: PartitionsCallback | None = None,
        on_partitions_lost: PartitionsCallback | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
        wall_ns: Callable[[], int] = time.time_ns,
    ) -> None:
        self.config = config
        self.consumer_id = config.consumer_id or new_consumer_id(config.group)
        self.journal = journal or Journal(None, "consumer")
        self.clock = clock
        self.wall_ms = wall_ms
        self._wall_ns = wall_ns
        self.zk = ZkClient(
            ZkConfig.from_string(
                config.zk,
                session_timeout_s=config.session_timeout_s,
                auth=config.zk_auth,
                consumer_id=self.consumer_id if config.zk_auth is not None else None,
            ),
            name=self.consumer_id[-8:],
        )
        self.lease = Lease(lease_duration(config.session_timeout_s, config.lease_fraction), clock=clock)
        self.offsets = OffsetStore(self.zk, config.group, paths.member(config.group, self.consumer_id))
        self.resets = ResetReporter(self.journal, config.group, self.consumer_id, self.zk, wall_ms)
        self.fetcher = FetchManager(
            config.data_dir,
            max_poll_records=config.max_poll_records,
            clock=clock,
            on_started=self._fetch_started,
            on_stopped=self._fetch_stopped,
            gate=self._may_deliver,
            offset_reset=config.offset_reset,
            on_reset=self.resets.report,
        )
        self.core = ConsumerCore(
            config,
            self.consumer_id,
            journal=self.journal,
            zk=self.zk,
            lease=self.lease,
            offsets=self.offsets,
            fetcher=self.fetcher,
            clock=clock,
            wall_ms=wall_ms,
        )
        #: Kafka 0.8's registry and owner znodes, for a consumer of a group migrating off zk-client (else None)
        self.bridge = self.core.bridge
        self.stats = self.core.stats  # what the metrics endpoint shows besides metrics() (zkcoord.consumer.metrics)
        self._closing = self.core.closing
        self.handler = CommandHandler(self.core)
        #: the rebalance callbacks, run on the thread that calls poll() or close() (zkcoord.consumer.polling)
        self.app = AppSide(
            self.core,
            self.handler.commits,
            on_revoked=on_partitions_revoked,
            on_assigned=on_partitions_assigned,
            on_lost=on_partitions_lost,
        )
        self._user_wakeup = False
        self._polling = threading.Lock()
        self._poller = 0  # the thread that last entered poll()
        self._paused = False
        #: what a callback raised in a call that returned records: raised by the next call
        self._deferred: BaseException | None = None
        self._threads: list[threading.Thread] = []
        self._started_at = 0.0
        self._delivered = 0
        self._last_commit = 0.0

    @property
    def registrations(self) -> int:
        """How many times we registered (1 after ``start()``; one more after each registration that ended)."""
        return self.core.registrations

    @property
    def incarnation(self) -> int | None:
        """czxid of our current registration (None while not registered): see ``Command.incarnation``."""
        return self.core.incarnation

    # --- lifecycle ----------------------------------------------------------------------------------------------

    def start(self) -> Consumer:
        """Connect, register in the group and start the worker threads.  Blocks until registered.

        :raises ZkUnavailableError: ZooKeeper cannot be reached.
        """
        self._started_at = self.clock()
        sent = self.clock()
        self.zk.start()
        self._fit_lease()
        self.lease.renew(sent)
        self.zk.add_listener(self._on_state)
        create_channel(self.core)
        register_first(self.core)
        self.fetcher.start()
        for name, target in (("consumer-cmd", self.handler.run), ("consumer-hb", self._heartbeat)):
            thread = threading.Thread(target=target, name=f"{name}-{self.consumer_id[-8:]}", daemon=True)
            thread.start()
            self._threads.append(thread)
        self.core.watch_channel()
        if self.config.rebalance == "consumer":
            self.core.events.put(("assignment", None))  # read it, and watch it (zkcoord.consumer.assignment)
        if self.config.rebalance == "classic":
            self.handler.classic.watch()
        self.core.handoff.entered_poll()  # the poll interval runs from here: an application that never polls leaves
        watch_own(self.core)
        return self

    def _fit_lease(self) -> None:
        """The lease is a fraction of the session timeout the server *granted* (it may be shorter than asked for:
        a lease as long as the requested one could outlive the session, S6)."""
        self.lease.resize(lease_duration(self.zk.session_timeout_s, self.config.lease_fraction))

    def _on_state(self, state: ConnState) -> None:
        """kazoo's connection thread: void the lease at once (the command thread may be busy for a while before it
        sees this), then hand the change to the command thread."""
        if state is ConnState.CONNECTED:
            self._fit_lease()  # before any round trip of this session can renew it
        else:
            self.lease.invalidate()
        self.core.events.put(("state", state))

    def close(self, timeout: float | None = None, *, budget: StopBudget | None = None) -> StopReport:
        """Stop within ``timeout`` seconds (default ``config.shutdown_timeout_s``) or ``budget``, whatever ZooKeeper
        does, and return what could not be done (journalled as ``shutdown.incomplete`` too).  Idempotent: a second
        call reports nothing.  Application thread; blocks until ``budget.session`` at most.

        In order: nothing is read or handed out any more (at once); a ``poll()`` running on another thread is woken
        and waited for; a stop parked for the application is finished (its ``on_partitions_revoked`` runs on this
        thread); on the command thread, after the step it is in: with auto-commit on, commit what ``poll`` returned
        (S3; skipped while the lease is void; with it off nothing is committed but what the application commits), stop
        fetching; ``on_partitions_revoked`` on this thread while the claims still hold; release the partitions (a
        migrating consumer's 0.8 owner znodes too); delete the member znode (and the 0.8 registration); close the
        session.  ZooKeeper calls end by ``budget.zookeeper``.  The report says what the
        final commit did (:class:`zkcoord.consumer.commits.FinalCommit`): skipped (``commit``) means those records are
        delivered again to the partitions' next owner; sent but unanswered (``commit-unknown``) that they may be,
        as the commit may still land; a member znode left stays until the
        session expires, and the coordinator gives the partitions away only then (this consumer fetches nothing
        meanwhile: S2).
        """
        report = StopReport()
        if self.app.calling and self._poller == threading.get_ident():
            raise RuntimeError("close() called from inside a rebalance callback")
        if self._closing.is_set():
            return report
        budget = budget or StopBudget.start(self.config.shutdown_timeout_s if timeout is None else timeout)
        self._closing.set()  # the fetcher's gate shuts (_may_deliver): nothing is read or handed out any more
        self.zk.bound(budget.zookeeper)
        self.fetcher.pause("closing")
        # Closed from another thread than the one polling (a PollLoop's owner): make a poll() in progress return,
        # and wait for it, so that no callback runs on two threads at once.
        self.wakeup()
        polled = self._polling.acquire(timeout=max(0.0, budget.zookeeper.remaining()))
        try:
            self._close_steps(report, budget)
        finally:
            if polled:
                self._polling.release()
        return report

    def _close_steps(self, report: StopReport, budget: StopBudget) -> None:
        """:meth:`close` once no ``poll()`` runs (or it would not return within the budget)."""
        self._finish_parked()
        final = FinalCommit()
        closing = Closing(report, final, budget.session)
        self.core.events.put(("close", closing))
        if closing.stopped.wait(budget.zookeeper.remaining()):
            self.app.close(closing.positions, closing.threads)  # the claims still hold: a commit in it lands
        closing.told.set()
        for thread in self._threads:
            # The command thread's calls end by budget.zookeeper; what it does after them (nothing but local work
            # and the revoke callback) gets until the session deadline.
            thread.join(timeout=budget.session.remaining())
        if self._threads and self._threads[0].is_alive():  # the command thread (started first) is still busy
            log.warning("consumer %s: the command thread is still busy at the stop deadline", self.consumer_id)
        # What the final commit did, as known now: not run (the command thread was busy before it), landed, failed,
        # or sent and unanswered -- not whether the command thread happens to be done (a slow revoke callback).
        final.settle(report, self.core.uncommitted)
        self.fetcher.close()
        self.resets.close()
        if self.registrations:
            self._deregister(report)
        had_session = self.core.incarnation is not None
        if not self.zk.stop(timeout=budget.session.remaining()) and had_session:
            report.skip(SESSION, f"session {self.core.registered_session:#x} not closed")
        report.journal(self.journal, budget, group=self.config.group, consumer=self.consumer_id)

    def _finish_parked(self) -> None:
        """``close()``: finish a stop the application has not polled for yet (its callback runs here); what is only
        to be announced is dropped (the consumer is leaving)."""
        self.core.handoff.discard_announcements()
        failure = self.app.run_due()
        if failure is not None:  # the stop goes on
            log.warning("consumer %s: on_partitions_revoked failed while closing: %r", self.consumer_id, failure)

    def _deregister(self, report: StopReport) -> None:
        """Delete our member znode, only our own (:func:`zkcoord.consumer.registration.delete_own`), and a migrating
        consumer's 0.8 registration; absent already is done."""
        try:
            delete_own(self.core)
            if self.bridge is not None:
                self.bridge.deregister()
        except ZkError as e:
            log.info("consumer %s: deregistration skipped: %s", self.consumer_id, e)
            report.skip(DEREGISTER, e)
            return
        self.journal.emit("consumer.deregistered", group=self.config.group, consumer=self.consumer_id)

    def __enter__(self) -> Consumer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- the application's API ----------------------------------------------------------------------------------

    def poll(self, timeout: float = 1.0) -> list[ConsumerRecord]:
        """Return at most ``max_poll_records`` records, round-robin across assigned partitions (KIP-41).

        Blocks up to ``timeout`` seconds.  Returns nothing while the lease is invalid (S6).  First runs what a
        rebalance left for the application, on this thread (:mod:`zkcoord.consumer.polling`): a stop's auto-commit
        and ``on_partitions_revoked`` (the stop is acknowledged only after), ``on_partitions_assigned`` (before any
        record of those partitions), ``on_partitions_lost``; a rebalance that arrives while this call waits for
        records is handled at once.  With auto-commit on, commits, once the interval has passed, the positions
        of what earlier calls returned (a fenced commit is journalled, not raised).

        :raises Exception: what a rebalance callback raised (the rebalance step went on).
        :raises AccessRefusedError: ZooKeeper refused this consumer a write (--zk-auth): close it (docs/security.md).
        """
        if not self._polling.acquire(blocking=False):
            if self.app.calling and self._poller == threading.get_ident():
                raise RuntimeError("poll() called from inside a rebalance callback")
            raise RuntimeError("poll() called from two threads at once (one thread polls a consumer, as in Kafka)")
        self._poller = threading.get_ident()
        try:
            return self._poll(timeout)
        finally:
            self._polling.release()

    def _poll(self, timeout: float) -> list[ConsumerRecord]:
        deadline = self.clock() + max(0.0, timeout)
        self.core.handoff.entered_poll()
        rejoin = self.core.handoff.rejoin_due  # we left for exceeding the poll interval: back now, after on_lost
        self.core.handoff.rejoin_due = False
        try:
            if (failure := self._deferred or self.core.refusals.fatal) is not None:
                self._deferred = None
                raise failure
            if (failure := self.app.run_due()) is not None:
                raise failure
        finally:
            if rejoin:  # KIP-429: the lost partitions' callback has run before the member joins again
                self.core.events.put(("register", None))
        if self.config.auto_commit and self.clock() - self._last_commit >= self.config.auto_commit_interval_s:
            # The positions as this call found them: what the application got from earlier calls, not what this
            # one is about to hand out.
            self.core.events.put(("commit", self.fetcher.positions()))
            self._last_commit = self.clock()
        while True:
            self.core.handoff.waiting(True)
            try:
                records, handed_at = self.fetcher.poll_timed(max(0.0, deadline - self.clock()))
            finally:
                self.core.handoff.waiting(False)
            if records or self._user_wakeup or not self.core.handoff.take_woken():
                break
            if (failure := self.app.run_due()) is not None:  # woken by a rebalance step for the application
                raise failure
            if self.clock() >= deadline:
                break
        self._user_wakeup = False
        if records:
            # an assignment that arrived while the records were taken: announced before they are returned
            failure = self.app.run_due(announcements_only=True)
            if self.app.lost:  # records of partitions just announced lost are someone else's: dropped, as Kafka does
                records = self._without_lost(records)
            self._delivered += len(records)
            journal_consumed(self.core, records, self._wall_ms_at(handed_at, up=False))
            self._deferred = failure  # raised by the next call: these records are the application's already
        return records

    def _without_lost(self, records: list[ConsumerRecord]) -> list[ConsumerRecord]:
        """``records`` less those of partitions announced lost by this call and not fetched again since (nothing of
        theirs is committed: their next owner gets them from the last commit)."""
        gone = self.app.lost - set(self.fetcher.assignment())
        self.app.lost.clear()
        return [r for r in records if TopicPartition(r.topic, r.partition) not in gone]

    def commit(self, offsets: Mapping[TopicPartition, int] | None = None) -> dict[TopicPartition, int]:
        """Commit synchronously: ``offsets`` (each the next offset to consume, as Kafka's ``commitSync(Map)``) or, by
        default, the positions of everything :meth:`poll` has returned -- inside ``on_partitions_revoked``, of the
        partitions being revoked too.  Returns what was written.

        :raises OffsetCommitFencedError: for partitions this consumer no longer owns (others are committed); in
            ``on_partitions_lost`` for all of them.
        :raises ZkError: nothing was committed.
        """
        if offsets is not None:
            positions = dict(offsets)
        else:  # partitions whose stop waits for this thread's next poll() are still ours: theirs too
            with self.core.handoff.moving:
                parked = {tp: off for stop in self.core.handoff.parked() for tp, off in stop.positions.items()}
                positions = {**parked, **self.app.revoking, **self.fetcher.positions()}
        return self.handler.commit(positions)

    def assignment(self) -> dict[TopicPartition, str]:
        """Partition -> the thread that owns it: those fetched, and those of a stop whose ``on_partitions_revoked``
        has not returned yet (still ours: Kafka's ``assignment()`` keeps them until then too).  Any thread."""
        parked = {tp: thread for stop in self.core.handoff.parked() for tp, thread in stop.threads.items()}
        return {**parked, **self.app.revoking_threads, **self.fetcher.assignment()}

    def pause(self) -> None:
        """Stop reading and handing out records (every partition, new ones too) until :meth:`resume`: the fetcher's
        gate shuts, as when the lease runs out, and fetching goes on being started and stopped by rebalances;
        :meth:`poll` still runs the rebalance callbacks and keeps the poll interval, as Kafka's ``pause()`` does.  Any
        thread."""
        self._paused = True

    def resume(self) -> None:
        self._paused = False

    def wakeup(self) -> None:
        """Make a blocked :meth:`poll` return now, with nothing.  Any thread."""
        self._user_wakeup = True
        self.fetcher.wakeup()

    def metrics(self) -> ConsumerMetrics:
        now = self.clock()
        return shared.metrics(
            assigned=len(self.fetcher.assignment()),
            delivered=self._delivered,
            elapsed_s=now - self._started_at,
            rebalances=self.handler.rebalances,
            last=self.handler.last_rebalance,
            now=now,
            lag=shared.lag(self.config.data_dir, self.fetcher.positions()),
            lease_valid=self.lease.valid(),
        )

    def lag(self) -> int | None:
        """Records in the assigned partitions' logs beyond the consumed positions."""
        return sum(shared.lag(self.config.data_dir, self.fetcher.positions()).values())

    # --- internals ----------------------------------------------------------------------------------------------

    def _may_deliver(self) -> bool:
        """The fetcher's gate (S6): ``poll`` checks it under the fetcher's lock right before it takes records, and
        the fetcher threads before each read.  Shut while :meth:`pause` holds, and for good once :meth:`close`
        began."""
        if self._closing.is_set() or self._paused or self.core.refusals.fatal is not None:
            return False
        return self.config.unsafe_no_fencing or self.lease.valid()

    def _wall_ms_at(self, mono: float, *, up: bool) -> int:
        return wall_ms_at(mono, self.clock, self._wall_ns, up=up)

    def _heartbeat(self) -> None:
        """Renew the lease with acknowledged round trips; report its expiry and its recovery to the command thread.

        The lease can also be voided by the command thread (SUSPENDED); whichever way it became invalid, the first
        renewal afterwards reports ``lease-renewed`` so fetching resumes.
        """
        interval = self.lease.duration_s / 4
        expired_reported = False
        probe = self.handler.assignment.probe()  # our registration, or (consumer protocol) our assignment znode
        while not self._closing.wait(interval):
            valid_before = self.lease.valid()
            sent = self.clock()
            try:
                stat = self.zk.exists(probe)
            except ZkError:
                pass  # no acknowledgement: the lease is not renewed and will run out
            else:
                self.handler.assignment.heard(stat, self.handler.state.assignment_done)
                # A round trip in a *new* session says nothing about the one our assignment belongs to: until the
                # command thread has handled the loss and registered again, the lease stays void.
                if self.zk.session_id == self.core.registered_session:
                    self.lease.renew(sent)
            if self.bridge is not None and self.bridge.pending:
                self.core.events.put(("legacy-claim", None))  # the backstop to the owner znodes' watches
            away = self.core.handoff.overdue(self.config.max_poll_interval_s)
            if away is not None and not self.core.handoff.rejoin_due:
                self.core.events.put(("poll-timeout", away))  # KIP-62: the command thread leaves the group
            valid_now = self.lease.valid()
            if not valid_now and not expired_reported:
                expired_reported = True
                self.core.events.put(("lease-expired", self._lease_deadline_ms()))
            elif valid_now and (expired_reported or not valid_before):
                expired_reported = False
                self.core.events.put(("lease-renewed", None))

    def _lease_deadline_ms(self) -> int:
        return self._wall_ms_at(self.lease.deadline, up=True)

    def _fetch_started(self, tp: TopicPartition, offset: int, thread: str) -> None:
        self.journal.emit(
            "fetch.started",
            group=self.config.group,
            consumer=self.consumer_id,
            thread=thread,
            topic=tp.topic,
            partition=tp.partition,
            offset=offset,
            generation=self.handler.admission.generation,
        )

    def _fetch_stopped(self, tp: TopicPartition, offset: int, thread: str, reason: str) -> None:
        fields: dict[str, object] = {}
        if not self.config.unsafe_no_fencing and self.clock() >= self.lease.deadline:
            # Nothing was handed out after the lease's deadline (poll checks it), so that is when fetching ended,
            # however late this process noticed (it may have been paused for seconds).
            fields["at_ms"] = self._lease_deadline_ms()
        self.journal.emit(
            "fetch.stopped",
            group=self.config.group,
            consumer=self.consumer_id,
            thread=thread,
            topic=tp.topic,
            partition=tp.partition,
            offset=offset,
            reason=reason,
            generation=self.handler.admission.generation,
            **fields,
        )


__all__ = ["Consumer", "ConsumerMetrics", "PartitionsCallback", "Rebalance"]
