"""The classic protocol's step of a rebalance attempt: JoinGroup and SyncGroup over ZooKeeper (seed 001).

A group whose members all registered ``"protocol": "classic"`` (:func:`speaks_classic`) is rebalanced by the same
attempts as an eager group, with one step first, :attr:`~zkcoord.coordinator.attempt.Step.SYNCING`:

1. :meth:`ClassicGroups.replan` decides whether a rebalance is needed (membership, subscriptions, partition counts,
   an ownership registry that differs from the group's assignment, a state that is not STABLE, or an assignment no
   leader of the group's generation computed) and chooses the strategy by Kafka's vote
   (:func:`~zkcoord.protocol.classic_group.choose_strategy`).  The plan's target stays empty: the leader computes it.
2. :meth:`ClassicGroups.join` chooses the leader (:func:`~zkcoord.protocol.classic_group.choose_leader`: a leader
   that failed this rebalance is passed over) and writes the join record -- generation, strategy and why, leader,
   every member's metadata, partition counts, the current ownership -- and empties the sync record, in one fenced
   transaction (S1); it watches the sync record and arms the step's timeout (the rebalance timeout).  Members keep
   fetching meanwhile: nothing has been stopped yet.
3. :meth:`ClassicGroups.check` reads the leader's sync record.  One of another generation or leader is stale: refused
   and journalled (``classic.sync_stale``), the wait goes on (the leader's own write is fenced too: it checks the join
   record's version, so a stale leader's write normally never lands).  An assignor error, or an assignment that
   misses a partition, names a partition that does not exist, or gives one to a thread that is not a current
   subscriber's (:func:`~zkcoord.protocol.classic_group.assignment_problems`), is refused
   (``classic.assignment_invalid``) and the attempt retried: the next generation passes that leader over.  A valid
   one becomes the attempt's target and the attempt goes on as an eager one: stop-fetcher to every member, the
   barrier, start-fetcher with the leader's assignment (S2-S5 as for every eager attempt).
4. A leader that dies (its registration vanishes: the attempt is aborted) or stalls past the timeout is replaced the
   same way, by the next generation's join.

Threads: the coordinator's worker only; the sync watch only enqueues (it is the rebalancer's command watch).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping

from zkcoord.coordinator.attempt import Attempt, Step
from zkcoord.coordinator.commands import PhaseWriter
from zkcoord.coordinator.config import CoordinatorConfig
from zkcoord.coordinator.plan import Plan, necessity
from zkcoord.coordinator.sending import Sender
from zkcoord.coordinator.snapshot import ReadResult
from zkcoord.errors import CodecError, FencedError, NoNodeError, ZkError
from zkcoord.layout import paths
from zkcoord.layout.classic import JoinRecord, MemberMetadata, SyncRecord
from zkcoord.protocol.classic_group import Choice, assignment_problems, choose_leader, choose_strategy
from zkcoord.runtime.journal import Journal
from zkcoord.zk import WatchEvent, ZkClient

log = logging.getLogger(__name__)


def speaks_classic(read: ReadResult) -> bool:
    """Whether every member of the group as read speaks the classic protocol (and none is unreadable, and no
    ``zk-client`` member is there): only then does a leader compute its assignment."""
    snapshot = read.snapshot
    return (
        bool(snapshot.members)
        and all(m.registration.classic for m in snapshot.members.values())
        and not snapshot.legacy
        and not snapshot.unreadable
        and not read.migrating
    )


def partition_counts(planned: Plan, topics: Mapping[str, int]) -> dict[str, int]:
    """The partition count of every topic the plan's members subscribe to."""
    return {t: topics[t] for subs in planned.subscriptions.values() for t in subs if t in topics}


def classic_reason(
    read: ReadResult, planned: Plan, join: JoinRecord | None, partitions: Mapping[str, int]
) -> str | None:
    """Why a classic group needs a rebalance, or None (the necessity check, against what its leader computed)."""
    snapshot = read.snapshot
    state = snapshot.state
    target = {t: dict(ps) for t, ps in state.target.items()} if state is not None else {}
    reason = necessity(snapshot, planned.members, target)
    if reason is not None or state is None:
        return reason
    if join is None or join.generation != state.generation or set(join.members) != set(planned.members):
        return "the group's assignment was not computed by a leader of its generation"
    if join.strategy != planned.assignor:
        return f"strategy {join.strategy} -> {planned.assignor}"
    if any(dict(m.subscription) != planned.subscriptions.get(cid, {}) for cid, m in join.members.items()):
        return "subscriptions changed"
    if dict(join.partitions) != dict(partitions):
        return "partition counts changed"
    return None


class ClassicGroups:
    """The classic groups of one coordinator term (worker thread).

    ``retry(attempt, reason)`` fails the attempt (the rebalancer's retry, with backoff, up to
    ``max_rebalance_retries``); ``schedule(delay_s, group, token)`` arms the sync's timeout; ``sync_watch`` is the
    one-shot watch set on each sync record (it only enqueues; the worker calls :meth:`on_sync`).
    """

    def __init__(
        self,
        zk: ZkClient,
        writer: PhaseWriter,
        config: CoordinatorConfig,
        journal: Journal,
        *,
        active: dict[str, Attempt],
        sending: Sender,
        schedule: Callable[[float, str, int], None],
        retry: Callable[[Attempt, str], None],
        sync_watch: Callable[[WatchEvent], None] | None,
        clock: Callable[[], float],
    ) -> None:
        self.zk = zk
        self.writer = writer
        self.config = config
        self.journal = journal
        self.epoch = writer.fence.term.epoch
        self.active = active
        self.sending = sending
        self.schedule = schedule
        self.retry = retry
        self.sync_watch = sync_watch
        self.clock = clock
        #: by group, its join record as this term last read or wrote it (None: there is none)
        self.joins: dict[str, JoinRecord | None] = {}
        #: by group, the strategy chosen for its next join, and why
        self.choices: dict[str, Choice] = {}
        #: by group, the leaders that failed during the current rebalance (passed over until it completes)
        self.failed: dict[str, set[str]] = {}
        #: by group, the ``mzxid`` of the last sync record judged (each write is judged, and journalled, once)
        self.judged: dict[str, int] = {}

    # --- planning --------------------------------------------------------------------------------------------------

    def _join_record(self, group: str) -> JoinRecord | None:
        if group in self.joins:
            return self.joins[group]
        path = paths.classic_join(group)
        try:
            record: JoinRecord | None = JoinRecord.decode(self.zk.get(path)[0], path)
        except NoNodeError:
            record = None
        except CodecError as e:
            self.journal.emit("input.rejected", what="classic join record", path=path, reason=str(e))
            record = None
        self.joins[group] = record
        return record

    def last_generation(self, group: str) -> int:
        """The generation of the group's last join record (generations only grow, S5: the next is above it)."""
        record = self._join_record(group)
        return record.generation if record is not None else 0

    def replan(self, read: ReadResult, planned: Plan, topics: Mapping[str, int]) -> Plan | None:
        """``planned`` (the coordinator's plan of a classic group) with the classic necessity and the generation's
        strategy, its target left to the leader; None when no strategy is common to every member (the coordinator's
        own path then runs the group, with a note saying why).

        :raises ZkError: the join record cannot be read.
        """
        group = planned.group
        members = read.snapshot.members
        choice = choose_strategy({cid: members[cid].registration.assignors for cid in planned.members})
        if choice is None:
            self.choices.pop(group, None)
            return None
        self.choices[group] = choice
        classic = dataclasses.replace(planned, target={}, assignor=choice.strategy)
        reason = classic_reason(read, classic, self._join_record(group), partition_counts(planned, topics))
        return dataclasses.replace(classic, necessary=reason is not None, reason=reason or "assignment unchanged")

    # --- the join (worker) -----------------------------------------------------------------------------------------

    def join(self, attempt: Attempt, topics: Mapping[str, int]) -> None:
        """Choose the leader of ``attempt``'s generation, write its join record (fenced) and wait for its sync.

        :raises FencedError: the term is over.
        """
        g, planned = attempt.group, attempt.plan
        if attempt.number == 0:
            self.failed.pop(g, None)
        failed = frozenset(self.failed.get(g, ()))
        previous = self.joins.get(g)
        leader = choose_leader(planned.members, previous.leader if previous is not None else None, failed)
        members = attempt.read.snapshot.members
        choice = self.choices.get(g) or Choice(planned.assignor, "")
        partitions = partition_counts(planned, topics)
        timeout_s = planned.config.rebalance_timeout_s(self.config.rebalance_timeout_s)
        record = JoinRecord(
            generation=attempt.generation,
            epoch=self.epoch,
            leader=leader,
            strategy=choice.strategy,
            reason=choice.reason,
            members={
                cid: MemberMetadata(inc, planned.subscriptions.get(cid, {}), members[cid].registration.assignors)
                for cid, inc in planned.members.items()
            },
            partitions=partitions,
            # Only real partitions: an owner znode written by hand past the codec's limit would make every member
            # refuse the record (no leader would ever answer), and a sticky assignor has nothing to keep there.
            current={
                t: {p: th for p, th in owned.items() if p < partitions[t]}
                for t, owned in attempt.read.snapshot.owners.items()
                if t in partitions
            },
            rebalance_timeout_ms=max(1, round(timeout_s * 1000)),
        )
        try:
            fence = self.writer.fence
            fence.ensure(paths.classic_join(g))
            fence.ensure(paths.classic_sync(g))
            txn = fence.transaction()
            txn.set_data(paths.classic_join(g), record.encode())
            txn.set_data(paths.classic_sync(g), b"")
            fence.commit(txn)
        except FencedError:
            raise
        except ZkError as e:
            self.joins.pop(g, None)  # what landed is unknown: read it again
            self.retry(attempt, f"cannot write the join record: {e}")
            return
        self.joins[g] = record
        attempt.step = Step.SYNCING
        attempt.recipients, attempt.outstanding = frozenset({leader}), {leader}
        attempt.step_started = self.clock()
        attempt.token = self.sending.next_token()
        attempt.timeout_s = timeout_s
        self.journal.emit(
            "classic.joined",
            group=g,
            generation=attempt.generation,
            epoch=self.epoch,
            leader=leader,
            strategy=record.strategy,
            reason=record.reason,
            members=len(record.members),
            passed_over=sorted(failed & set(planned.members) - {leader}),
        )
        self.schedule(attempt.timeout_s, g, attempt.token)
        self.check(attempt)

    # --- the sync (worker) -----------------------------------------------------------------------------------------

    def on_sync(self, event: WatchEvent) -> bool:
        """A watch fired: True if it was a sync record's (then handled)."""
        group = paths.group_of_classic_sync(event.path)
        if group is None:
            return False
        attempt = self.active.get(group)
        if attempt is not None and attempt.step is Step.SYNCING:
            self.check(attempt)
        return True

    def check(self, attempt: Attempt) -> None:
        """Read the sync record of ``attempt``'s group (watching it again) and act on what the leader wrote."""
        g = attempt.group
        path = paths.classic_sync(g)
        try:
            [got] = self.zk.get_many([path], watch=self.sync_watch)
        except ZkError as e:
            log.warning("group %s: cannot read the sync record: %s (read again after reconnecting)", g, e)
            return
        if got is None:
            self.retry(attempt, "the sync record was deleted")
            return
        data, stat = got
        if not data or self.judged.get(g) == stat.mzxid:
            return  # not written yet, or this write was judged already (a watch and a re-read both bring it)
        self.judged[g] = stat.mzxid
        record = self.joins.get(g)
        leader = record.leader if record is not None else ""
        try:
            sync = SyncRecord.decode(data, path)
        except CodecError as e:
            self._invalid(attempt, leader, str(e))
            return
        if sync.generation != attempt.generation or sync.leader != leader:
            self.journal.emit(
                "classic.sync_stale",
                group=g,
                generation=sync.generation,
                leader=sync.leader,
                expected_generation=attempt.generation,
                expected_leader=leader,
            )
            return
        if sync.error:
            self._invalid(attempt, leader, f"the leader's assignor failed: {sync.error}")
            return
        partitions = dict(record.partitions) if record is not None else {}
        problems = assignment_problems(sync.assignment, attempt.plan.subscriptions, partitions)
        if problems:
            self._invalid(attempt, leader, "; ".join(problems))
            return
        assignment = {t: dict(ps) for t, ps in sync.assignment.items() if ps}
        self.journal.emit(
            "classic.synced",
            group=g,
            generation=attempt.generation,
            epoch=self.epoch,
            leader=leader,
            strategy=sync.strategy,
            compute_ms=sync.compute_ms,
            wait_ms=round((self.clock() - attempt.step_started) * 1000, 2),
            partitions=sum(len(p) for p in assignment.values()),
        )
        attempt.plan = dataclasses.replace(attempt.plan, target=assignment)
        attempt._shares = None
        self.sending.stop(attempt)

    def _invalid(self, attempt: Attempt, leader: str, reason: str) -> None:
        self.journal.emit(
            "classic.assignment_invalid",
            group=attempt.group,
            generation=attempt.generation,
            epoch=self.epoch,
            leader=leader,
            reason=reason[:500],
        )
        self.retry(attempt, f"leader {leader}'s assignment refused: {reason[:200]}")

    def leader_failed(self, attempt: Attempt) -> None:
        """``attempt`` fails in its sync step: its leader is passed over until the rebalance completes."""
        record = self.joins.get(attempt.group)
        if record is not None and record.generation == attempt.generation:
            self.failed.setdefault(attempt.group, set()).add(record.leader)
