"""KIP-848's member state machine written down as data, the check that refuses a step outside it, and the group's
derived state (``reference/modern-group-protocols.md`` §1.3).

:data:`TRANSITIONS` is the table: every change of :class:`~zkcoord.layout.kip848.MemberState` that Kafka's
``CurrentAssignmentBuilder`` can make, each with the condition under which it makes it.  A step that changes nothing
(a member still waiting) is always legal and is not a row.  :func:`check_transition` refuses a step whose states are
not a row, or that breaks the epoch rules every row shares; :func:`~zkcoord.protocol.kip848.reconcile.reconcile`
runs it on every step it computes, so the table is the contract, not a comment.

:func:`group_state` is Kafka's ``ConsumerGroup.maybeUpdateGroupState``: a group's state is derived from its epochs
and members, never stored.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum

from zkcoord.layout.kip848 import CurrentAssignment, GroupEpochs, MemberState
from zkcoord.layout.partition_set import PartitionSet
from zkcoord.protocol.kip848.errors import IllegalTransitionError

STABLE = MemberState.STABLE
UNREVOKED = MemberState.UNREVOKED_PARTITIONS
UNRELEASED = MemberState.UNRELEASED_PARTITIONS
UNKNOWN = MemberState.UNKNOWN


@dataclass(frozen=True, slots=True)
class Transition:
    """One row of the table: ``source -> target`` happens ``when`` (the reconciliation step's inputs say so)."""

    source: MemberState
    target: MemberState
    when: str


#: Every state change reconciliation makes (Kafka's ``CurrentAssignmentBuilder.build``/``computeNextAssignment``).
#: No row enters UNKNOWN (only a newer release writes it) and none leaves it for UNREVOKED_PARTITIONS (a member in
#: UNKNOWN moves on only once it owns nothing, so it has nothing to revoke).
TRANSITIONS: tuple[Transition, ...] = (
    Transition(STABLE, STABLE, "a new target epoch whose partitions it holds or are all free"),
    Transition(STABLE, UNREVOKED, "a new target without partitions it still owns (or did not report)"),
    Transition(STABLE, UNRELEASED, "a new target with partitions another member still holds, nothing to revoke"),
    Transition(UNREVOKED, STABLE, "it no longer reports any partition pending revocation; the rest is free"),
    Transition(UNREVOKED, UNREVOKED, "it acknowledged, and a newer target takes more partitions it owns"),
    Transition(UNREVOKED, UNRELEASED, "it acknowledged; a target partition is still held by another member"),
    Transition(UNRELEASED, STABLE, "the partitions it waited for were released (or the target no longer has them)"),
    Transition(UNRELEASED, UNRELEASED, "some were released, others are still held; or a new target, still held"),
    Transition(UNRELEASED, UNREVOKED, "a new target without partitions it owns"),
    Transition(UNKNOWN, STABLE, "it reported owning nothing: reconciled from scratch, all free"),
    Transition(UNKNOWN, UNRELEASED, "it reported owning nothing: reconciled from scratch, some still held"),
)

LEGAL: frozenset[tuple[MemberState, MemberState]] = frozenset((t.source, t.target) for t in TRANSITIONS)


def check_transition(
    before: CurrentAssignment, after: CurrentAssignment, target_epoch: int, target: PartitionSet
) -> None:
    """Refuse a reconciliation step that KIP-848 does not allow.

    Legal: ``after == before`` (nothing changes), or a row of :data:`TRANSITIONS` that also keeps the rules every
    row shares -- the previous epoch becomes the epoch before the step; an epoch never goes back; a member entering
    UNREVOKED_PARTITIONS keeps its epoch, is granted nothing, and splits what it had into what it keeps (all in the
    target) and what it must revoke (at least one); a member entering STABLE or UNRELEASED_PARTITIONS moves to the
    target epoch holding only target partitions -- all of them if STABLE, not all if UNRELEASED.

    :raises IllegalTransitionError: with the rule broken.
    """
    if after == before:
        return
    broken = _broken_rule(before, after, target_epoch, target)
    if broken is not None:
        raise IllegalTransitionError(
            f"illegal reconciliation step {before.state.name}@{before.member_epoch} -> "
            f"{after.state.name}@{after.member_epoch} (target epoch {target_epoch}): {broken}"
        )


def _broken_rule(
    before: CurrentAssignment, after: CurrentAssignment, target_epoch: int, target: PartitionSet
) -> str | None:
    if (before.state, after.state) not in LEGAL:
        return "no such transition"
    if after.previous_member_epoch != before.member_epoch:
        return f"previous epoch {after.previous_member_epoch} is not the epoch before the step"
    if after.member_epoch < before.member_epoch:
        return "the member epoch went back"
    if after.state is UNREVOKED:
        if after.member_epoch != before.member_epoch:
            return "a member with partitions to revoke keeps its epoch (revoke before assign)"
        if not after.pending_revocation:
            return "entering UNREVOKED_PARTITIONS with nothing to revoke"
        if (after.assigned | after.pending_revocation) != before.assigned:
            return "entering UNREVOKED_PARTITIONS grants or drops partitions"
        if not after.assigned.issubset(target):
            return "it keeps partitions outside its target"
        return None
    if after.member_epoch != target_epoch:
        return f"a member entering {after.state.name} moves to the target epoch"
    if not after.assigned.issubset(target):
        return "it holds partitions outside its target"
    if after.state is STABLE and after.assigned != target:
        return "STABLE holds all of its target"
    if after.state is UNRELEASED and after.assigned == target:
        return "UNRELEASED_PARTITIONS waits for some target partition"
    return None


class ConsumerGroupState(Enum):
    """A KIP-848 group's derived state (Kafka's ``ConsumerGroup.ConsumerGroupState``; DEAD is the removal itself)."""

    EMPTY = "empty"
    ASSIGNING = "assigning"
    RECONCILING = "reconciling"
    STABLE = "stable"


def group_state(epochs: GroupEpochs, members: Mapping[str, CurrentAssignment]) -> ConsumerGroupState:
    """EMPTY without members; ASSIGNING while the group epoch is ahead of the assignment epoch (a target is due);
    RECONCILING while a member is not STABLE at the assignment epoch; STABLE otherwise."""
    if not members:
        return ConsumerGroupState.EMPTY
    if epochs.group_epoch > epochs.assignment_epoch:
        return ConsumerGroupState.ASSIGNING
    if any(not m.is_reconciled_to(epochs.assignment_epoch) for m in members.values()):
        return ConsumerGroupState.RECONCILING
    return ConsumerGroupState.STABLE
