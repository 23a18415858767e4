"""How members come and go in a consumer-protocol group: joins and leaves, static members held and replaced, members
fenced and released.  A base of :class:`~zkcoord.coordinator.kip848.engine.Reconciler`, which supplies the writes
(``_round``), the group epoch (``_maybe_bump``) and the timers; split off to keep each part readable in one sitting.

Threads: the coordinator's worker thread.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping

from zkcoord.coordinator.commands import Op
from zkcoord.coordinator.config import CoordinatorConfig
from zkcoord.coordinator.kip848 import ops as ops_
from zkcoord.coordinator.kip848.model import GroupModel
from zkcoord.coordinator.snapshot import ReadResult
from zkcoord.layout import paths
from zkcoord.layout.kip848 import CurrentAssignment, MemberState
from zkcoord.layout.partition_set import PartitionSet
from zkcoord.runtime.journal import Journal
from zkcoord.zk import ZkClient


class MemberChanges(ABC):
    """Membership of the consumer-protocol groups (worker thread only)."""

    zk: ZkClient
    config: CoordinatorConfig
    journal: Journal
    epoch: int
    clock: Callable[[], float]
    schedule: Callable[[float, str, int], None]
    topics: Callable[[], Mapping[str, int]]
    _timers: dict[int, tuple[str, str, str]]
    _tokens: int

    @abstractmethod
    def _round(self, model: GroupModel, ops: list[Op]) -> None:
        """Step the group's members and write it all with ``ops`` (the engine's)."""

    @abstractmethod
    def _retry(self, group: str, reason: str) -> None:
        """Drop the group's model and read it again shortly (the engine's)."""

    @abstractmethod
    def _maybe_bump(self, model: GroupModel, topics: Mapping[str, int], trigger: str, requested_at: float) -> list[Op]:
        """A new group epoch and target if their inputs changed: its operations (the engine's)."""

    def _timer(self, model: GroupModel, member: str, kind: str, delay: float) -> int:
        """Arm a timer of ``kind`` for ``member``; its token."""
        self._tokens += 1
        self._timers[self._tokens] = (model.group, member, kind)
        self.schedule(delay, model.group, self._tokens)
        return self._tokens

    def _membership(self, model: GroupModel, read: ReadResult, threads: Mapping[str, Mapping[str, int]]) -> list[Op]:
        """Members gone (or back in a new session) lose their records; newcomers start at epoch 0.  A static member
        that leaves is held (:meth:`_hold`); one that comes back with its instance id takes its place
        (:meth:`_replace`)."""
        live = {cid: m.incarnation for cid, m in read.snapshot.members.items()}
        instances = {
            cid: m.registration.instance_id
            for cid, m in read.snapshot.members.items()
            if m.registration.instance_id is not None
        }
        ops: list[Op] = []
        for member in sorted(model.members):
            if live.get(member) == model.members[member] or member in model.absent:
                continue
            model.inflight.pop(member, None)
            model.must_stop.discard(member)
            if member in model.instances and member not in live and member not in model.fenced:
                self._hold(model, member)
                continue
            del model.members[member]
            if member in model.fenced and member not in live:
                continue  # fenced by us: its partitions stay held until its grace ends or it registers again
            model.fenced.pop(member, None)
            model.currents.pop(member, None)
            model.instances.pop(member, None)
            ops += ops_.drop_current_op(model, member)
            self.journal.emit("kip848.member_left", group=model.group, consumer=member, epoch=self.epoch)
        for member in sorted(set(model.fenced) & set(live)):
            self._release(model, member, "it registered again", write=False)
            ops += ops_.drop_current_op(model, member)
        held = {model.instances[m]: m for m in model.absent if m in model.instances}
        for member, incarnation in sorted(live.items()):
            if member in model.absent and model.members.get(member) != incarnation:
                # A held static member back under its own consumer id, in a new session: it takes its own place.
                held.pop(model.instances.get(member, ""), None)
                own = instances.get(member) or model.instances.get(member, "")
                ops += self._replace(model, member, member, own, threads.get(member, {}))
                model.members[member] = incarnation
                continue
            if member in model.members:
                continue
            model.members[member] = incarnation
            instance = instances.get(member)
            if instance is not None and instance in held:  # another consumer id with a held instance id
                ops += self._replace(model, held.pop(instance), member, instance, threads.get(member, {}))
                continue
            self.journal.emit("kip848.member_joined", group=model.group, consumer=member, epoch=self.epoch)
        model.instances.update(instances)  # every live member's, those already members when the model was read too
        kept = {m: model.threads[m] for m in model.absent if m in model.threads}
        model.threads = {**kept, **{m: dict(t) for m, t in threads.items()}}
        regs = {cid: m.registration for cid, m in read.snapshot.members.items()}
        model.poll_interval_ms = {cid: r.max_poll_interval_ms or 0 for cid, r in regs.items()}
        kept_racks = {m: model.racks[m] for m in model.absent if m in model.racks}  # a held member keeps its rack
        model.racks = {**kept_racks, **{cid: r.rack for cid, r in regs.items() if r.rack is not None}}
        return ops

    def _hold(self, model: GroupModel, member: str) -> None:
        """A static member left: its assignment is held for its instance id (Kafka's leave with epoch -2) for
        ``static_hold_s``; its partitions are fetched by nobody meanwhile, and nothing is rebalanced."""
        current = model.currents.get(member)
        if current is not None and current.pending_revocation:
            # It stopped before its registration went (or its session expired: S6): what it was giving up is free.
            model.currents[member] = dataclasses.replace(
                current, state=MemberState.STABLE, pending_revocation=PartitionSet()
            )
        self.journal.emit(
            "kip848.member_held",
            group=model.group,
            consumer=member,
            instance_id=model.instances[member],
            epoch=self.epoch,
            hold_s=self.config.static_hold_s,
        )
        model.absent[member] = self._timer(model, member, "static", self.config.static_hold_s)

    def _replace(self, model: GroupModel, old: str, new: str, instance: str, threads: Mapping[str, int]) -> list[Op]:
        """A static member came back (``new``, with ``old``'s instance id) within its hold: it takes ``old``'s target
        and assignment (its epoch starts at 0 again, as Kafka's ``replaceMember``), the owner znodes name its threads,
        and nobody else is disturbed: the group epoch does not move.  ``new`` may be ``old`` (back under its own
        consumer id, in a new session).  The caller records ``new``'s incarnation."""
        model.members.pop(old, None)
        model.absent.pop(old, None)
        model.instances.pop(old, None)
        model.instances[new] = instance
        before = model.currents.pop(old, None)
        assigned = before.assigned if before is not None else PartitionSet()
        model.currents[new] = CurrentAssignment(0, 0, MemberState.STABLE, assigned=assigned)
        target = model.targets.pop(old, None)
        ops = ops_.drop_current_op(model, old) + ops_.rename_target_ops(model, old, new, target)
        ops += ops_.rename_owner_ops(model, old, new, assigned, threads)
        self.journal.emit(
            "kip848.member_replaced",
            group=model.group,
            consumer=new,
            previous=old,
            instance_id=instance,
            epoch=self.epoch,
            partitions=assigned.count(),
        )
        return ops

    def _expire(self, model: GroupModel, member: str, token: int) -> None:
        """A held static member did not come back in time: it leaves for good, and the group rebalances.  ``token``:
        the timer's (a timer of an earlier hold of the same member is moot)."""
        if model.absent.get(member) != token:
            return
        del model.absent[member]
        model.members.pop(member, None)
        model.instances.pop(member, None)
        model.threads.pop(member, None)
        model.currents.pop(member, None)
        self.journal.emit("kip848.member_left", group=model.group, consumer=member, epoch=self.epoch)
        ops = ops_.drop_current_op(model, member)
        ops += self._maybe_bump(model, self.topics(), "a static member's hold ended", self.clock())
        self._round(model, ops)

    # --- fencing -------------------------------------------------------------------------------------------------

    def _fence(self, model: GroupModel, member: str, reason: str) -> None:
        """Remove a member that does not revoke in time, in one fenced transaction with the group state that no longer
        lists it: its registration deleted (it stops, gives everything up and joins again with epoch 0), and the
        owner znodes of what it holds rewritten as they are, which moves their versions, so that a commit it makes
        late is refused (KIP-848's FENCED_MEMBER_EPOCH, by the claim's version).  Its ``current`` record stays: its
        partitions are held, assigned and pending alike, until it registered again or its grace ended, and a
        coordinator that takes over reads a record of a member the state does not list as a fenced member's."""
        current = model.currents.get(member)
        self.journal.emit(
            "kip848.member_fenced",
            group=model.group,
            consumer=member,
            epoch=self.epoch,
            reason=reason,
            member_epoch=current.member_epoch if current else None,
        )
        model.inflight.pop(member, None)
        model.members.pop(member, None)
        model.must_stop.discard(member)
        model.resend.pop(member, None)
        model.fenced[member] = self._timer(model, member, "grace", self.config.fence_grace_s)
        ops = [Op("delete", paths.member(model.group, member))]
        if current is not None:
            ops += ops_.touch_owner_ops(model, current.assigned | current.pending_revocation)
        self._round(model, ops)

    def _release(self, model: GroupModel, member: str, why: str, *, write: bool = True) -> None:
        """A fenced member's partitions are free: it registered again (so it stopped first) or its grace ended."""
        model.fenced.pop(member, None)
        model.currents.pop(member, None)
        model.must_stop.discard(member)
        model.resend.pop(member, None)
        self.journal.emit("kip848.member_released", group=model.group, consumer=member, epoch=self.epoch, reason=why)
        if write:
            self._round(model, ops_.drop_current_op(model, member))
