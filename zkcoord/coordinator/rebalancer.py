"""Rebalancing groups: the per-group attempt state machine (seed section D), driven by the coordinator's worker.

A rebalance of group ``g`` is a sequence of *attempts*; each attempt has a new generation and goes::

    (read, plan) --not necessary--> done (stays STABLE)
        |
        +--> STOPPING: stop-fetcher to every member, wait until all are deleted (acknowledged)
                |  all acknowledged: the barrier that makes S2 hold
                v
             STARTING: ownership registry + start-fetcher to every member, wait until all acknowledged
                |
                v
             STABLE (state written, journalled)

    STOPPING/STARTING --member of the attempt vanished--> aborted: the next attempt starts at once
    STOPPING/STARTING --timeout or write failure--> retried after a backoff (doubled each time), up to
        ``max_rebalance_retries``; then FAILED is persisted and reported, and the group waits for its next trigger.
        A step's timeout is ``rebalance_timeout_s``, plus, for a step that stops members, the longest poll interval
        they publish (:func:`~zkcoord.coordinator.attempt.phase_timeout_s`): their applications finish first.

No start-fetcher of generation ``n`` is written before every member of generation ``n`` acknowledged its
stop-fetcher (S2, coordinator side).

*Incremental* attempts (every member registered ``incremental``, the group STABLE, the first attempt of the
rebalance: :attr:`Mode.INCREMENTAL`) take the same steps with fewer recipients, per
:func:`~zkcoord.coordinator.plan.moves`: the stop-fetcher goes only to members that lose partitions and names them,
the start-fetcher only to members that gain some; the others keep fetching, undisturbed.  The barrier is then per
partition: a moved partition's new owner is written and told to start only after its old owner acknowledged the
stop.  With nothing to revoke, the stop step is skipped.  When every revoked partition has a new owner and no member
both gives and receives, the attempt is one step instead (:attr:`Step.HANDOVER`): the stops, each naming the thread
its partitions go to, and the starts, each naming the partitions it awaits, are written together; an old owner
writes the new thread into a partition's owner znode in the transaction that commits its offset, after it stopped
fetching, and the new owner starts the partition once its owner znode names it.  The coordinator is then out of
the hand-over's path and waits only for the acknowledgements to mark the group STABLE.  Any attempt that does not
complete leaves a non-STABLE state behind, so the next one is eager: what the members fetch is then known again
from scratch, and its start step reads the owner znodes again (an old owner may have handed over after the attempt
read them).  *Classic* attempts (every member ``"protocol": "classic"``, seed 001) begin with :attr:`Step.SYNCING`
(strategy, leader, the leader's target validated: :mod:`zkcoord.coordinator.classic.engine`), then go on as eager.

Every write goes through the term's fence (S1).  Every command carries the coordinator epoch and the generation,
which only grow, so consumers can refuse stale ones (S5).

The rebalancer decides what comes next; its helpers, on the same thread, carry it out: :class:`~.sending.Sender`
writes each step, :class:`~.acks.Acks` follows its acknowledgements.

Threads: every method runs on the coordinator's worker thread; nothing here blocks on anything but ZooKeeper.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Mapping

from zkcoord.coordinator.acks import Acks
from zkcoord.coordinator.attempt import Attempt, Begun, Mode, Step
from zkcoord.coordinator.classic.engine import ClassicGroups, speaks_classic
from zkcoord.coordinator.commands import PhaseWriter
from zkcoord.coordinator.config import CoordinatorConfig
from zkcoord.coordinator.kip848.engine import TOKENS, Reconciler, speaks_consumer
from zkcoord.coordinator.metrics import Metrics
from zkcoord.coordinator.plan import Plan, moves, plan, registry_vouched
from zkcoord.coordinator.sending import Sender
from zkcoord.coordinator.snapshot import KnownMembers, KnownRegistry, ReadResult, read_group
from zkcoord.coordinator.unreadable import report_input, watch_unreadable
from zkcoord.errors import FencedError, ZkError
from zkcoord.layout import paths
from zkcoord.layout.group_config import GroupConfig
from zkcoord.layout.group_state import GroupPhase
from zkcoord.layout.registrations import MemberRegistration
from zkcoord.protocol.assignors import PartitionRacks, moved_partitions
from zkcoord.runtime.faults import fault_point
from zkcoord.runtime.journal import Journal
from zkcoord.zk import WatchEvent, ZkClient

log = logging.getLogger(__name__)


Schedule = Callable[[float, str, int], None]
"""``schedule(delay_s, group, token)``: ask the worker to call :meth:`Rebalancer.on_timer` later."""


class Rebalancer:
    """Runs the attempts of every group of one coordinator term."""

    def __init__(
        self,
        zk: ZkClient,
        writer: PhaseWriter,
        config: CoordinatorConfig,
        journal: Journal,
        *,
        schedule: Schedule,
        topics: Callable[[], Mapping[str, int]],
        partition_racks: Callable[[], PartitionRacks] = dict,
        group_config: Callable[[str], GroupConfig] = lambda _group: GroupConfig(),
        ack_watch: Callable[[WatchEvent], None] | None = None,
        member_watch: Callable[[WatchEvent], None] | None = None,
        metrics: Metrics | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
    ) -> None:
        self.zk = zk
        self.writer = writer
        self.config = config
        self.journal = journal
        self.schedule = schedule
        self.topics = topics
        #: the racks of the topics' partitions (``topic -> racks of each partition``: the watchers' view)
        self.partition_racks = partition_racks
        #: each group's dynamic config as last read (``/config/groups/<g>``: :mod:`~.group_configs`)
        self.group_config = group_config
        #: by group, the members beyond its ``max.size`` last journalled (``group.max_size_reached`` once per change)
        self.excluded: dict[str, tuple[str, ...]] = {}
        #: the one-shot watch set on a registration that cannot be decoded (the members watch: it only enqueues)
        self.member_watch = member_watch
        self.clock = clock
        self.wall_ms = wall_ms
        self.epoch = writer.fence.term.epoch
        self.active: dict[str, Attempt] = {}
        self.retries: dict[str, int] = {}
        #: groups ZooKeeper refused a znode of this term: not retried until the group changes (Coordinator.request)
        self.refused: set[str] = set()
        self.group_state: dict[str, str] = {}
        self.generations: dict[str, int] = {}  # the last one given each group: it only grows, whatever the state (S5)
        #: each group's member registrations as last read (the coordinator routes topic changes with them)
        self.registrations: dict[str, list[MemberRegistration]] = {}
        #: groups migrating from the zk-client protocol as last read (the coordinator watches their zk-client ids)
        self.migrating: set[str] = set()
        #: the ownership registries this term left behind, by group (see KnownRegistry: they save re-reading them)
        self.registries: dict[str, KnownRegistry] = {}
        #: the member registrations this term read last, by group (see KnownMembers: they save re-reading them)
        self.members: dict[str, KnownMembers] = {}
        #: by group, the members whose channel znode this term knows to exist (listed when one is not known)
        self.channels: dict[str, set[str]] = {}
        #: the coordinator's counters (they outlive the term: :mod:`~zkcoord.coordinator.metrics`)
        self.metrics = metrics or Metrics()
        self.acks = Acks(
            zk,
            journal,
            self.active,
            epoch=self.epoch,
            metrics=self.metrics,
            watch=ack_watch,
            clock=clock,
            advance=self._advance,
            retry=self._retry,
            forget_channels=self._forget_channels,
        )
        #: the consumer-protocol (KIP-848) groups: reconciled member by member, no attempts
        self.kip848 = Reconciler(
            zk,
            writer,
            config,
            journal,
            schedule=schedule,
            topics=topics,
            partition_racks=partition_racks,
            group_config=group_config,
            generations=lambda group: self.generations.get(group, 0),
            metrics=self.metrics,
            group_state=self.group_state,
            registries=self.registries,
            ack_watch=ack_watch,
            clock=clock,
            wall_ms=wall_ms,
        )
        #: writes each step (the stops, the hand-over, the starts, with the state)
        self.sending = sending = Sender(
            zk,
            writer,
            config,
            journal,
            active=self.active,
            channels=self.channels,
            members=self.members,
            member_watch=member_watch,
            acks=self.acks,
            metrics=self.metrics,
            schedule=schedule,
            advance=self._advance,
            retry=self._retry,
            clock=clock,
            wall_ms=wall_ms,
        )
        #: the classic protocol's groups: their join, the leader's sync, its validation
        self.classic = ClassicGroups(
            zk, writer, config, journal, active=self.active, sending=sending, schedule=schedule, retry=self._retry,
            sync_watch=ack_watch, clock=clock,
        )  # fmt: skip

    # --- entry points (worker thread) ------------------------------------------------------------------------------

    def begin(
        self,
        group: str,
        trigger: str,
        requested_at: float,
        read: ReadResult | ZkError | None = None,
        *,
        room: bool = True,
    ) -> Begun:
        """Examine ``group`` and start a rebalance attempt if one is needed (seed D).

        :param read: the group as already read (:func:`~zkcoord.coordinator.snapshot.read_groups`, pipelined with
            other groups), or the error that read failed with; ``None`` reads it here.
        :param room: whether an attempt may start now.  If not and one is needed, nothing is journalled or changed
            and :attr:`Begun.DEFERRED` is returned: the caller queues the group again.
        :raises FencedError: the term is over.  Other ZooKeeper errors are handled as a failed attempt.
        """
        read = self._read(group, read)
        if isinstance(read, ZkError):
            self._failed_attempt(group, trigger, requested_at, f"cannot read the group: {read}", generation=None)
            return Begun.SKIPPED
        if (speaks_consumer(read) or self.kip848.keeps(group, read)) and not self.writer.fence.unsafe:
            self.registrations[group] = [m.registration for m in read.snapshot.members.values()]
            self.kip848.examine(group, read, trigger, requested_at)  # keeps group_state[group] current
            return Begun.SKIPPED
        self.kip848.forget(group)
        if self.writer.fence.unsafe and read.migrating:
            # Fences off (the demo's contrast): a coordinator that knows nothing of a migration, as one written
            # without it would be -- it plans over its own members only, beside the zk-client members.
            read = dataclasses.replace(read, snapshot=dataclasses.replace(read.snapshot, legacy={}), migrating=False)
        planned, classic = self._plan(group, read)
        wanted = planned.necessary or self.retries.get(group, 0) != 0
        if wanted and (planned.members or read.snapshot.state is not None) and not room:
            return Begun.DEFERRED
        self.registrations[group] = [m.registration for m in read.snapshot.members.values()]
        if read.migrating:
            self.migrating.add(group)
        else:
            self.migrating.discard(group)
        report_input(self.journal, read, planned, self.excluded)
        if not wanted:
            self.metrics.rebalances_skipped += 1
            self.group_state[group] = "stable" if planned.members else "empty"
            self.journal.emit("rebalance.skipped", group=group, reason=planned.reason, trigger=trigger)
            return Begun.SKIPPED
        if not planned.members and read.snapshot.state is None:
            self.metrics.rebalances_skipped += 1
            self.group_state[group] = "empty"
            self.journal.emit("rebalance.skipped", group=group, reason="no members", trigger=trigger)
            return Begun.SKIPPED
        state = read.snapshot.state
        generation = self.generations[group] = max(state.generation if state else 0, self.generations.get(group, 0)) + 1
        attempt = Attempt(group, generation, self.retries.get(group, 0), planned, read, trigger, requested_at)
        if classic:
            attempt.mode, attempt.step = Mode.CLASSIC, Step.SYNCING
        elif self._incremental(attempt):
            attempt.mode = Mode.INCREMENTAL
            attempt.moves = moves(read.snapshot, planned.target, planned.members)
            # With ACLs only the coordinator writes owner znodes, so no member can hand one over (docs/security.md).
            if attempt.moves.revoke and attempt.moves.one_step and self.zk.role is None:
                attempt.step = Step.HANDOVER
        # The version the stop phase writes over (a resume in which no batch landed starts from it again).
        attempt.state_version = read.state_version
        migration = {"legacy": sorted(planned.legacy), "legacy_partitions": planned.legacy_partitions}
        if attempt.number == 0:
            self.metrics.rebalances_started += 1
        self.active[group] = attempt
        self.group_state[group] = "rebalancing"
        self.journal.emit(
            "rebalance.started",
            group=group,
            generation=generation,
            epoch=self.epoch,
            attempt=attempt.number,
            trigger=trigger,
            reason=planned.reason,
            members=sorted(planned.members),
            partitions=sum(len(p) for p in planned.target.values()),
            assignor=planned.assignor,
            mode=attempt.mode.value,
            **({"steps": 1} if attempt.step is Step.HANDOVER else {}),
            **(attempt.moves.journal_fields() if attempt.moves is not None else {}),
            **(migration if read.migrating else {}),
        )
        fault_point("coordinator.before_stop", self.journal)
        self._first_step(attempt)
        return Begun.STARTED if group in self.active else Begun.SKIPPED

    def _plan(self, group: str, read: ReadResult) -> tuple[Plan, bool]:
        """The group's plan, and whether its leader computes the target (a classic group, seed 001)."""
        planned = plan(
            read.snapshot, self.topics(), self.config.assignor, self.group_config(group), self.partition_racks()
        )
        if not speaks_classic(read) or self.writer.fence.unsafe:
            return planned, False
        replanned = self.classic.replan(read, planned, self.topics())
        self.generations[group] = max(self.generations.get(group, 0), self.classic.last_generation(group))
        if replanned is None:
            note = ("classic group", "no strategy every member supports: the coordinator assigns")
            return dataclasses.replace(planned, notes=[*planned.notes, note]), False
        return replanned, True

    def _read(self, group: str, read: ReadResult | ZkError | None) -> ReadResult | ZkError:
        """The group as read (by the caller, or now), its unreadable members watched; or the read's error."""
        try:
            if read is None:
                read = read_group(self.zk, group, self.registries.get(group), self.members, self.member_watch)
            if isinstance(read, ZkError):
                return read
            return watch_unreadable(self.zk, read, self.member_watch, self.members)
        except ZkError as e:
            return e

    def _incremental(self, attempt: Attempt) -> bool:
        """Whether ``attempt`` may move only what changes: every member asked for it, and what each fetches is
        known -- the group is STABLE (so no earlier attempt stopped anything it did not restart), this is not a
        retry, every owner znode could be read, and the registry agrees with the state's target over the live
        members (:func:`~zkcoord.coordinator.plan.registry_vouched`: an owner znode deleted by hand does not make
        its partition free)."""
        state = attempt.read.snapshot.state
        return (
            attempt.plan.incremental
            and state is not None
            and state.phase is GroupPhase.STABLE
            and attempt.number == 0
            and not attempt.read.unreadable_owners
            and registry_vouched(attempt.read.snapshot)
            and not self.writer.fence.unsafe
        )

    def on_ack(self, event: WatchEvent) -> None:
        """The watch on a command fired (:meth:`Acks.on_ack <zkcoord.coordinator.acks.Acks.on_ack>`, or the
        consumer-protocol engine's)."""
        if not self.kip848.on_ack(event) and not self.classic.on_sync(event):
            self.acks.on_ack(event)

    @property
    def unwatched(self) -> set[str]:
        """Groups whose commands could not be watched (a connection loss): listed again on reconnecting."""
        return self.acks.unwatched

    def on_members(self, group: str, children: list[str]) -> bool:
        """The group's ids changed: an attempt whose member vanished is aborted (True: request the next one)."""
        attempt = self.active.get(group)
        if attempt is None:
            return False
        gone = sorted(set(attempt.plan.members) - set(children))
        if gone:
            # A watch event may predate the snapshot the attempt was planned from (events queue up while the
            # worker is busy): confirm against ZooKeeper before aborting.
            gone = sorted(set(attempt.plan.members) - set(self.zk.get_children(paths.group_ids(group))))
        if gone:
            self._abort(attempt, f"member(s) left mid-rebalance: {', '.join(gone)}")
            return True
        return False

    def flush(self) -> None:
        """The end of a worker turn: the consumer-protocol groups answer the acknowledgements it brought."""
        self.kip848.flush()

    def on_timer(self, group: str, token: int) -> None:
        if token >= TOKENS:
            self.kip848.on_timer(group, token)
            return
        if token == -2:
            return  # only a wake-up: the turn ends with a flush
        attempt = self.active.get(group)
        if attempt is None or attempt.token != token:
            return
        waiting = sorted(attempt.outstanding)
        self._retry(
            attempt,
            f"timed out in {attempt.step.value} waiting for {', '.join(waiting[:5])} "
            f"(the step's timeout: {attempt.timeout_s:g} s)",
        )

    def on_reconnected(self) -> None:
        """Resume every phase write whose outcome the connection loss left unknown, and look again at the commands
        that could not be watched."""
        # Taken first: a group that fails again while being looked at is added back, for the next reconnect.
        todo, self.acks.unwatched = self.acks.unwatched, set()
        for attempt in list(self.active.values()):
            if attempt.uncertain:
                self.sending.resume(attempt)
            elif attempt.step is Step.SYNCING:
                self.classic.check(attempt)
            elif attempt.group in todo:
                self.acks.recheck(attempt)

    def idle(self, group: str) -> bool:
        return group not in self.active

    # --- phases --------------------------------------------------------------------------------------------------

    def _forget_channels(self, group: str) -> None:
        """What this term knows of ``group``'s channels may be wrong (one was deleted by hand): list them again."""
        self.channels.pop(group, None)

    def _first_step(self, attempt: Attempt) -> None:
        if attempt.step is Step.SYNCING:
            self.classic.join(attempt, self.topics())
        elif attempt.step is Step.HANDOVER and attempt.moves is not None:
            self.sending.handover(attempt, attempt.moves)
        else:
            self.sending.stop(attempt)

    def _advance(self, attempt: Attempt) -> None:
        if attempt.step is Step.STOPPING:
            attempt.stop_ms = (self.clock() - attempt.step_started) * 1000
            self.journal.emit(
                "rebalance.barrier",
                group=attempt.group,
                generation=attempt.generation,
                epoch=self.epoch,
                stop_ms=round(attempt.stop_ms, 2),
            )
            fault_point("coordinator.before_start", self.journal)
            self.sending.start(attempt)
            return
        fault_point("coordinator.before_stable", self.journal)
        txn = self.writer.fence.transaction()
        txn.set_data(
            paths.group_state(attempt.group),
            self.sending.state(attempt, GroupPhase.STABLE).encode(),
            -1 if self.writer.fence.unsafe else attempt.state_version,
        )
        try:
            self.writer.fence.commit(txn)
        except FencedError:
            raise
        except ZkError as e:
            self._retry(attempt, f"cannot mark the group stable: {e}")
            return
        if not self.writer.fence.unsafe:
            # set_data bumps the version by exactly one: the state (and so the registry) as we left it.
            self.registries[attempt.group] = KnownRegistry(attempt.state_version + 1, attempt.plan.target)
        now = self.clock()
        latency = (now - attempt.requested_at) * 1000
        self.metrics.completed(latency)
        self.retries.pop(attempt.group, None)
        del self.active[attempt.group]
        self.group_state[attempt.group] = "stable" if attempt.plan.members else "empty"
        self.journal.emit(
            "rebalance.completed",
            group=attempt.group,
            generation=attempt.generation,
            epoch=self.epoch,
            attempts=attempt.number + 1,
            latency_ms=round(latency, 2),
            stop_ms=round(attempt.stop_ms, 2),
            start_ms=round((now - attempt.stop_done_at) * 1000, 2),
            members=len(attempt.plan.members),
            partitions=sum(len(p) for p in attempt.plan.target.values()),
            moved=moved_partitions(attempt.read.snapshot.owners, attempt.plan.target),
        )

    # --- failure handling ------------------------------------------------------------------------------------------

    def _abort(self, attempt: Attempt, reason: str) -> None:
        """A member of the attempt left: drop the attempt; the caller re-requests the group at once."""
        self.metrics.attempts_aborted += 1
        del self.active[attempt.group]
        self.journal.emit(
            "rebalance.aborted", group=attempt.group, generation=attempt.generation, epoch=self.epoch, reason=reason
        )

    def _retry(self, attempt: Attempt, reason: str) -> None:
        if attempt.step is Step.SYNCING:
            self.classic.leader_failed(attempt)
        self.active.pop(attempt.group, None)
        self._failed_attempt(attempt.group, attempt.trigger, attempt.requested_at, reason, attempt.generation)

    def _failed_attempt(
        self, group: str, trigger: str, requested_at: float, reason: str, generation: int | None
    ) -> None:
        retries = self.retries.get(group, 0) + 1
        log.warning("group %s: rebalance attempt %d failed: %s", group, retries, reason)
        if retries > self.config.max_rebalance_retries or group in self.refused:  # (a refusal: retrying cannot help)
            self.retries.pop(group, None)
            self.metrics.rebalances_failed += 1
            self.group_state[group] = "failed"
            self.writer.persist_failure(group, generation, reason, self.wall_ms())
            self.journal.emit(
                "rebalance.failed",
                group=group,
                generation=generation,
                epoch=self.epoch,
                retries=retries - 1,
                reason=reason,
            )
            log.error("group %s: rebalance failed after %d retries: %s", group, retries - 1, reason)
            return
        self.retries[group] = retries
        self.metrics.attempts_retried += 1
        backoff = self.config.rebalance_backoff_s * (2 ** (retries - 1))
        self.journal.emit(
            "rebalance.retrying",
            group=group,
            generation=generation,
            epoch=self.epoch,
            retry=retries,
            backoff_s=round(backoff, 3),
            reason=reason,
        )
        self.schedule(backoff, group, -1)  # token -1: "retry now" (see Coordinator.schedule_group)
