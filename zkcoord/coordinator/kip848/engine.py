"""KIP-848's group coordinator over ZooKeeper: epochs, a target, and reconciliation member by member.

A group whose members all registered ``"protocol": "consumer"`` is run here instead of by the attempts of
:mod:`~zkcoord.coordinator.rebalancer`.  There is no group-wide barrier and no generation-wide attempt:

* any change of members, subscriptions or partition counts bumps the **group epoch** and computes a new **target**
  (``uniform``, sticky to the previous target, or ``range``), written with the epochs in one fenced transaction;
* every member then takes its own steps (:func:`~zkcoord.protocol.kip848.reconcile`): one that must give partitions
  up is sent a ``stop-fetcher`` naming them and is granted nothing until it acknowledges; one whose partitions are
  all free is sent an incremental ``start-fetcher`` with its new assignment; a partition is granted only while
  nobody holds it (the partition-epoch index), so the acknowledgement of one member's revocation lets the members
  waiting for its partitions take them at once, whatever the rest of the group is doing;
* each step writes the member's current assignment, its command, the owner znodes of what it is granted and the
  group state (its phase ``reconciling`` until every member is at the assignment epoch, then ``stable``) in one
  fenced transaction (S1) -- so a coordinator that takes over reads back exactly where the last one stopped
  (:mod:`~zkcoord.coordinator.kip848.store`) and carries on;
* a member that does not acknowledge a revocation within the group's rebalance timeout (plus its poll interval) is
  **fenced**: its registration is deleted, which makes it stop, abandon its partitions and join again with epoch 0;
  its partitions stay held until it has registered again or ZooKeeper's longest session could have expired
  (``fence_grace_s``) -- a departure from Kafka, whose brokers refuse the fenced member's fetches at once, which
  ZooKeeper cannot do (``docs/protocol.md``, "KIP-848").

An acknowledgement (the member deleted its command and recorded it in its channel, :mod:`~.acks`' rule) is this
design's heartbeat: the member reports owning what it was assigned, and nothing it was told to give up.

Threads: the coordinator's worker thread; the watches it sets only enqueue.  Any write that fails drops the group's
model, and the group is examined again from what ZooKeeper holds (each transaction landed whole or not at all).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from zkcoord.coordinator.commands import Op, PhaseWriteError, PhaseWriter
from zkcoord.coordinator.config import CoordinatorConfig
from zkcoord.coordinator.kip848 import ops as ops_
from zkcoord.coordinator.kip848 import store
from zkcoord.coordinator.kip848.acks import Acknowledgements
from zkcoord.coordinator.kip848.members import MemberChanges
from zkcoord.coordinator.kip848.model import (
    ASSIGNORS,
    GroupModel,
    InFlight,
    MemberStep,
    basis,
    next_target,
    rack_inputs,
    round_steps,
    state_target,
)
from zkcoord.coordinator.metrics import Metrics
from zkcoord.coordinator.snapshot import KnownRegistry, ReadResult
from zkcoord.errors import ZkError
from zkcoord.layout import paths
from zkcoord.layout.commands import Command, CommandOption
from zkcoord.layout.group_config import GroupConfig
from zkcoord.layout.group_state import GroupPhase, GroupState
from zkcoord.layout.kip848 import GroupEpochs, MemberTarget
from zkcoord.protocol.assignors import PartitionRacks
from zkcoord.protocol.kip848 import Kip848Error
from zkcoord.protocol.subscriptions import resolve
from zkcoord.runtime.faults import fault_point
from zkcoord.runtime.journal import Journal
from zkcoord.zk import WatchEvent, ZkClient

log = logging.getLogger(__name__)

#: timer tokens of this engine start here (the rebalancer's own are small; -1 is its "retry now")
TOKENS = 1_000_000_000


def speaks_consumer(read: ReadResult) -> bool:
    """Whether the group is run by this engine: it has members, all registered the consumer protocol, none is a
    ``zk-client`` member and none is unreadable (what an unreadable one speaks is unknown: the classic path stops
    everyone)."""
    snap = read.snapshot
    return (
        bool(snap.members)
        and not snap.legacy
        and not snap.unreadable
        and all(m.registration.consumer_protocol for m in snap.members.values())
    )


class Reconciler(Acknowledgements, MemberChanges):
    """The consumer-protocol groups of one coordinator term (worker thread only)."""

    def __init__(
        self,
        zk: ZkClient,
        writer: PhaseWriter,
        config: CoordinatorConfig,
        journal: Journal,
        *,
        schedule: Callable[[float, str, int], None],
        topics: Callable[[], Mapping[str, int]],
        partition_racks: Callable[[], PartitionRacks] = dict,
        group_config: Callable[[str], GroupConfig],
        generations: Callable[[str], int] = lambda _group: 0,
        metrics: Metrics | None = None,
        group_state: dict[str, str] | None = None,
        registries: dict[str, KnownRegistry] | None = None,
        ack_watch: Callable[[WatchEvent], None] | None,
        clock: Callable[[], float],
        wall_ms: Callable[[], int],
    ) -> None:
        self.zk = zk
        self.writer = writer
        self.config = config
        self.journal = journal
        self.schedule = schedule
        self.topics, self.partition_racks = topics, partition_racks
        self.group_config = group_config
        #: the highest generation this term gave each group (the classic path's): a rebuild starts above it
        self.generations = generations
        #: the coordinator's counters, shared with the classic path (:mod:`~zkcoord.coordinator.metrics`)
        self.metrics = metrics or Metrics()
        #: each group's state for the metrics (the rebalancer's map, shared): kept current as phases change
        self.group_state = group_state if group_state is not None else {}
        #: the ownership registries this term left behind (the rebalancer's map, shared): a group read again while
        #: its state is at the version a write left needs no owner znode read (the classic path's KnownRegistry)
        self.registries = registries if registries is not None else {}
        self.ack_watch = ack_watch
        self.clock = clock
        self.wall_ms = wall_ms
        self.epoch = writer.fence.term.epoch
        self.models: dict[str, GroupModel] = {}
        #: groups whose records broke KIP-848's rules: rebuilt at their next read, for this reason
        self.distrusted: dict[str, str] = {}
        #: timer token -> (group, member): a revocation's deadline, or a fenced member's grace
        self._timers: dict[int, tuple[str, str, str]] = {}
        self._tokens = TOKENS
        self._dirty: set[str] = set()
        #: when each group's current rebalance (group epoch) was requested, for its latency
        self._requested: dict[str, float] = {}

    # --- entry points ------------------------------------------------------------------------------------------

    def examine(self, group: str, read: ReadResult, trigger: str, requested_at: float) -> None:
        """Bring ``group``'s model up to what was just read (members, subscriptions, topics), bump the group epoch
        if any of it changed, and step every member that can move.

        :raises FencedError: the term is over.  Other failures drop the model and schedule a retry; records that
            break KIP-848's rules (two members holding one partition, a state this release does not know held with
            partitions) make the next read rebuild the group.
        """
        try:
            self._examine(group, read, trigger, requested_at)
        except Kip848Error as e:
            self._distrust(group, e)

    def _distrust(self, group: str, error: Kip848Error) -> None:
        """The group's records (or the model built from them) break KIP-848's rules: drop the model; the next read
        rebuilds the group from the registry, stopping whoever may be fetching (:func:`store.load`)."""
        log.warning("group %s: %s; rebuilding it", group, error)
        self.journal.emit("input.rejected", what="consumer-protocol group", path=group, reason=str(error))
        self.models.pop(group, None)
        self.distrusted[group] = f"the records break KIP-848's rules: {error}"
        self.schedule(1.0, group, -1)  # not at once: a group that cannot be rebuilt must not spin the worker

    def _examine(self, group: str, read: ReadResult, trigger: str, requested_at: float) -> None:
        topics = self.topics()
        threads = {cid: resolve(m.registration, topics)[0] for cid, m in read.snapshot.members.items()}
        model = self.models.get(group)
        if model is None:
            try:
                model, why = store.load(
                    self.zk,
                    group,
                    read,
                    threads,
                    distrust=self.distrusted.pop(group, ""),
                    known_generation=self.generations(group),
                )
            except ZkError as e:
                self._retry(group, f"cannot read the group's records: {e}")
                return
            if why:
                self.journal.emit("kip848.rebuilt", group=group, epoch=self.epoch, reason=why)
            else:
                self.journal.emit("kip848.resumed", group=group, epoch=self.epoch, **self._summary(model))
            self.models[group] = model
            self._arm_loaded(model)
            self._watch_inflight(model)
        ops = self._membership(model, read, threads)
        ops += self._maybe_bump(model, topics, trigger, requested_at)
        self._round(model, ops)

    def _arm_loaded(self, model: GroupModel) -> None:
        """A model read back: the deadlines its previous coordinator had armed start again from now -- each
        revocation in flight, each fenced member's grace."""
        for member, inflight in model.inflight.items():
            if inflight.option is CommandOption.STOP_FETCHER and not inflight.token:
                self._arm(model, member, inflight)
        for member, token in list(model.fenced.items()):
            if not token:
                model.fenced[member] = self._timer(model, member, "grace", self.config.fence_grace_s)

    def keeps(self, group: str, read: ReadResult) -> bool:
        """Whether an empty group is still this engine's: it ran it (in memory, or in records a coordinator taking
        over finds: ``kip848`` exists).  Handing it to the classic path would free what fenced or held members hold,
        and make the next consumer-protocol member rebuild it; a member of another protocol joining does hand it
        over (the group is mixed then)."""
        snap = read.snapshot
        if snap.members or snap.legacy or snap.unreadable:
            return False
        if group in self.models:
            return True  # the engine has run it: its last members leaving do not hand it to the classic path
        try:
            return self.zk.exists(paths.kip848(group)) is not None
        except ZkError:
            return True  # unknown: the engine's read will retry; the classic path would free what may be held

    def flush(self) -> None:
        """Answer the acknowledgements of the worker's last batch of events: one round per group that had some (a
        round may find more, already acknowledged, while it watches its commands: answered too)."""
        for _ in range(8):
            if not self._dirty:
                return
            dirty, self._dirty = sorted(self._dirty), set()
            for group in dirty:
                model = self.models.get(group)
                if model is None:
                    continue
                try:
                    self._round(model, [])
                except Kip848Error as e:
                    self._distrust(group, e)
        if self._dirty:
            self.schedule(0.0, sorted(self._dirty)[0], -2)  # wake the worker again: flushed at its next turn

    def forget(self, group: str) -> None:
        """The group is no longer the consumer protocol's (a member of another joined): the classic path runs it
        from here, and a later return rebuilds the model from ZooKeeper."""
        self.models.pop(group, None)

    def on_ack(self, event: WatchEvent) -> bool:
        """A watch on a member's ``ack/<m>`` fired; False if it is none of this engine's."""
        parsed = paths.member_record_of(event.path, "ack")
        model = self.models.get(parsed[0]) if parsed else None
        if parsed is None or model is None:
            return False
        try:
            self._ack_fired(model, parsed[1])
        except Kip848Error as e:
            self._distrust(model.group, e)
        return True

    def on_timer(self, group: str, token: int) -> None:
        try:
            self._on_timer(group, token)
        except Kip848Error as e:
            self._distrust(group, e)

    def _on_timer(self, group: str, token: int) -> None:
        entry = self._timers.pop(token, None)
        model = self.models.get(group)
        if entry is None or model is None:
            return
        _, member, kind = entry
        if kind == "revoke":
            inflight = model.inflight.get(member)
            if inflight is not None and inflight.token == token:
                self._fence(model, member, f"did not acknowledge its revocation within {inflight.timeout_s:g} s")
        elif kind == "static":
            self._expire(model, member, token)
        elif kind == "grace" and model.fenced.get(member) == token:
            self._release(model, member, "its grace ended: any session it had has expired, so it stopped fetching")

    # --- membership and the group epoch ----------------------------------------------------------------------------

    def _maybe_bump(self, model: GroupModel, topics: Mapping[str, int], trigger: str, requested_at: float) -> list[Op]:
        """A new group epoch and target if what the target is computed from changed.  A model read back from its
        records does not know what its target was computed from: it computes the target again, sticky to the last
        one, and bumps only if that moves something (the uniform assignor gives the same target from the same
        inputs).  A rebuilt model always bumps."""
        config = self.group_config(model.group)
        assignor = config.assignor if config.assignor in ASSIGNORS else "uniform"
        racks = rack_inputs(model.racks, model.threads, self.partition_racks())
        now = basis(model.members, model.threads, topics, instances=model.instances, racks=racks)
        if model.basis is not None and now == model.basis and assignor == model.assignor:
            return []
        previous = {m: t.partitions for m, t in model.targets.items()}
        if not previous:
            # A group new to this protocol (a rolling migration from the classic path ends here, rebuilt from a
            # registry its state vouches for): the first target is sticky to what the members fetch, as Kafka's
            # online upgrade takes the classic group's assignment for its members' targets.
            previous = {m: c.assigned for m, c in model.currents.items() if c.assigned}
        target, model.uniform_cache = next_target(
            model.uniform_cache, assignor, model.threads, topics, previous, racks=racks
        )
        read_back = model.basis is None and bool(model.targets)  # (a rebuilt model has no targets: it always bumps)
        if read_back and assignor == model.assignor and target == {m: previous.get(m) for m in target}:
            model.basis = now  # read back, and nothing changed since the records were written
            return []
        epoch = model.epochs.group_epoch + 1
        if model.phase is GroupPhase.RECONCILING and model.epochs.group_epoch:  # the last epoch was not reached
            self.journal.emit(
                "rebalance.aborted",
                group=model.group,
                generation=model.epochs.group_epoch,
                epoch=self.epoch,
                reason=f"superseded by group epoch {epoch}: members reconcile to the new target from where they are",
            )
        changed = {m: MemberTarget(epoch, p) for m, p in target.items() if m not in model.targets or previous[m] != p}
        removed = set(model.targets) - set(target)
        model.epochs = GroupEpochs(epoch, epoch)
        model.basis, model.assignor = now, assignor
        model.targets = {m: changed.get(m) or model.targets[m] for m in target}
        self._requested[model.group] = requested_at
        self.metrics.rebalances_started += 1
        self.journal.emit(
            "rebalance.started",
            group=model.group,
            generation=epoch,
            epoch=self.epoch,
            attempt=0,
            trigger=trigger,
            reason="members, subscriptions, partitions or racks changed",
            members=sorted(model.members),
            partitions=sum(p.count() for p in target.values()),
            assignor=assignor,
            mode="consumer",
            targets_changed=len(changed),
        )
        return ops_.epoch_ops(model, changed, removed)

    # --- a round: steps, their writes, their commands ---------------------------------------------------------------

    def _round(self, model: GroupModel, ops: list[Op]) -> None:
        """Step every member that can move, and write it all (with ``ops``) in fenced transactions."""
        steps = round_steps(model)
        commands: list[tuple[MemberStep, Command]] = []
        starts: list[tuple[MemberStep, Command, int]] = []
        for step in steps:
            ops += ops_.current_op(model, step.member, step.after)
            ops += ops_.grant_ops(model, step)
            if step.option is not None:
                command = ops_.command(model, step, self.epoch, self.wall_ms())
                ops += ops_.assignment_ops(model, step.member, command)
                commands.append((step, command))
                if step.granted:
                    starts.append((step, command, len(ops) - 1))
                model.inflight[step.member] = InFlight(step.option, None, 0)  # written below
        ops += ops_.cleanup_ops(model)
        ops_.carry_versions(model, ops, starts)
        stable = model.stable()
        phase = GroupPhase.STABLE if stable else GroupPhase.RECONCILING
        self.group_state[model.group] = "reconciling" if not stable else "stable" if model.members else "empty"
        if not ops and phase is model.phase:
            return
        state = GroupState(
            generation=model.epochs.group_epoch,
            phase=phase,
            epoch=self.epoch,
            members=dict(model.members),
            target=state_target(model),
            assignor=model.assignor,
            updated_ms=self.wall_ms(),
        )
        try:
            versions: dict[str, int] = {}
            model.state_version, created = self.writer.write(
                model.group, state, model.state_version, ops, versions=versions
            )
        except PhaseWriteError as e:
            self._retry(model.group, str(e))
            return
        for op in ops:  # owner znodes deleted are no longer known; those set or created are, from the results
            if op.kind == "delete":
                model.owner_versions.pop(op.path, None)
        owners = paths.owners_root(model.group) + "/"
        model.owner_versions.update({p: v for p, v in versions.items() if p.startswith(owners)})
        # Every owner znode change of the group is written with the state (grants, cleanups, fences, renames): at
        # this version of the state the registry is exactly the model's.
        self.registries[model.group] = KnownRegistry(
            model.state_version, {t: dict(ps) for t, ps in model.registry.items() if ps}
        )
        self._sent(model, steps, commands, created)
        if phase is GroupPhase.STABLE and model.phase is not GroupPhase.STABLE:
            self._completed(model)
        model.phase = phase

    def _sent(
        self,
        model: GroupModel,
        steps: list[MemberStep],
        commands: list[tuple[MemberStep, Command]],
        created: list[tuple[str, int]],
    ) -> None:
        now = self.clock()
        for step in steps:
            self.journal.emit(
                "kip848.member_step",
                group=model.group,
                consumer=step.member,
                epoch=self.epoch,
                member_epoch=step.after.member_epoch,
                state=step.after.state.name,
                assigned=step.after.assigned.count(),
                pending_revocation=step.after.pending_revocation.count(),
                granted=step.granted.count(),
            )
        zxids = dict(created)
        for step, command in commands:
            inflight = model.inflight[step.member]
            path = paths.assignment(model.group, step.member)
            inflight.path, inflight.zxid, inflight.sent_at = path, zxids[path], now
            inflight.generation = command.generation
            partitions = sum(len(p) for p in command.ownership.values()) or sum(
                len(p) for p in (command.revoke or {}).values()
            )
            self.metrics.commands_sent[command.option.value] += 1
            self.journal.emit(
                "command.sent",
                group=model.group,
                consumer=step.member,
                option=command.option.value,
                epoch=self.epoch,
                generation=command.generation,
                partitions=partitions,
            )
            if command.option is CommandOption.STOP_FETCHER:
                self._arm(model, step.member, inflight)
        if any(command.option is CommandOption.STOP_FETCHER for _, command in commands):
            fault_point("coordinator.mid_reconcile", self.journal)  # revocations written, none acknowledged
        self._watch(model, [step.member for step, _ in commands])

    def _arm(self, model: GroupModel, member: str, inflight: InFlight) -> None:
        """The revocation's deadline: the group's rebalance timeout plus the poll interval the member publishes (its
        application finishes its batch and runs its revoke callback first)."""
        base = self.group_config(model.group).rebalance_timeout_s(self.config.rebalance_timeout_s)
        interval = model.poll_interval_ms.get(member, 0)
        inflight.timeout_s = base + interval / 1000
        inflight.token = self._timer(model, member, "revoke", inflight.timeout_s)

    # --- endings ---------------------------------------------------------------------------------------------------

    def _completed(self, model: GroupModel) -> None:
        requested = self._requested.pop(model.group, None)
        if requested is not None:
            self.metrics.completed((self.clock() - requested) * 1000)
        else:  # (read back already reconciling: its request was another coordinator's)
            self.metrics.rebalances_completed += 1
        self.journal.emit(
            "rebalance.completed",
            group=model.group,
            generation=model.epochs.group_epoch,
            epoch=self.epoch,
            attempts=1,
            latency_ms=round((self.clock() - requested) * 1000, 2) if requested is not None else None,
            members=len(model.members),
            partitions=sum(t.partitions.count() for t in model.targets.values()),
        )

    def _retry(self, group: str, reason: str) -> None:
        """Drop the group's model and examine it again shortly, from what ZooKeeper holds."""
        log.warning("group %s: %s; reading it again", group, reason)
        self.models.pop(group, None)
        self.metrics.attempts_retried += 1
        self.journal.emit("rebalance.retrying", group=group, epoch=self.epoch, reason=reason, backoff_s=0.2)
        self.schedule(0.2, group, -1)

    @staticmethod
    def _summary(model: GroupModel) -> dict[str, object]:
        return {
            "group_epoch": model.epochs.group_epoch,
            "members": len(model.members),
            "in_flight": len(model.inflight),
            "stable": model.stable(),
        }
