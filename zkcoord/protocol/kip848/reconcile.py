"""One reconciliation step of one member: Kafka's ``CurrentAssignmentBuilder.build()`` and its
``computeNextAssignment`` (``reference/modern-group-protocols.md`` §1.3).

The coordinator calls :func:`reconcile` for a member whenever it hears from it (its heartbeat, here its
acknowledgement) or the target changes.  Three rules make the protocol safe and need no group-wide barrier:

* **revoke before assign** -- a member that must give partitions up keeps its epoch and is granted nothing until it
  reports that it no longer owns them;
* **no double ownership** -- a partition is granted only when nobody holds it (``partition_epoch`` is -1), counting
  as held both assigned partitions and those pending revocation;
* **per-member progress** -- a member moves to the target epoch as soon as it has nothing left to revoke, and picks
  up the partitions it waited for as their previous owners release them.

Two corrections Kafka made after the snapshot §1.3 was read from are kept, both on the safe side:

* KAFKA-19449 (apache/kafka#20781): a target partition the member itself has pending revocation, which the target
  gives back, is not "unreleased" -- it is the member's own, and it has just reported that it no longer owns it;
* KAFKA-19974 (apache/kafka#21107): a member leaving UNREVOKED_PARTITIONS for UNREVOKED_PARTITIONS again (the
  target moved while it was revoking) keeps its epoch instead of taking ``epoch + 1``, so that no partition is ever
  held by two members at one epoch, and its commits keep the epoch it has.

Left out, as this project has no use for them yet: Kafka's subscription-consistency pass (dropping topics a member
no longer subscribes to before its target says so) and KIP-1251's per-partition assignment epochs.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from collections.abc import Set as AbstractSet

from zkcoord.layout.kip848 import CurrentAssignment, MemberState, check_epoch
from zkcoord.layout.partition_set import PartitionSet
from zkcoord.protocol.kip848.errors import FencedMemberEpochError
from zkcoord.protocol.kip848.states import check_transition

#: ``partition_epoch(topic, partition)``: the epoch of the member holding it (assigned or pending revocation), or
#: -1 when nobody does (:func:`~zkcoord.protocol.kip848.epochs.partition_epochs` builds the index it reads).
PartitionEpoch = Callable[[str, int], int]


def reconcile(
    current: CurrentAssignment,
    target_epoch: int,
    target_partitions: Mapping[str, AbstractSet[int]],
    owned: Mapping[str, AbstractSet[int]] | None,
    partition_epoch: PartitionEpoch,
) -> CurrentAssignment:
    """The member's next current assignment towards ``(target_epoch, target_partitions)``.

    ``owned`` is what the member last reported owning (None: it did not report, which never counts as having
    revoked anything).  ``partition_epoch`` tells whether a partition is free; the member's own partitions (kept,
    or pending revocation and given back by the target) never block it.

    Returns ``current`` itself when nothing changes (a member still revoking, or still waiting on the same
    partitions at the same epoch), so the caller knows there is nothing to write.  Every step it returns has passed
    :func:`~zkcoord.protocol.kip848.states.check_transition`.

    :raises FencedMemberEpochError: the member is in state UNKNOWN (a newer release wrote it) and did not report
        owning nothing: it must abandon its partitions and rejoin.
    :raises ValueError: a target epoch outside ``0..MAX_EPOCH``.
    """
    check_epoch("target_epoch", target_epoch)
    target = PartitionSet.of(target_partitions)
    owned_set = None if owned is None else PartitionSet.of(owned)
    state = current.state
    epoch = current.member_epoch
    if state is MemberState.STABLE and epoch == target_epoch:
        return current
    if state is MemberState.UNREVOKED_PARTITIONS and (
        owned_set is None or not owned_set.isdisjoint(current.pending_revocation)
    ):
        return current  # it has not acknowledged the revocation yet
    if state is MemberState.UNKNOWN:
        if owned_set is None or owned_set:
            raise FencedMemberEpochError(
                "the member is in a state this release does not know: it must abandon all its partitions and rejoin"
            )
        epoch = target_epoch
    # STABLE at another epoch, UNREVOKED_PARTITIONS acknowledged, UNRELEASED_PARTITIONS (re-check what was freed),
    # or UNKNOWN owning nothing: compute the next assignment
    after = _next(current, epoch, target_epoch, target, owned=owned_set, partition_epoch=partition_epoch)
    if after == current:
        return current
    check_transition(current, after, target_epoch, target)
    return after


def _next(
    current: CurrentAssignment,
    epoch: int,
    target_epoch: int,
    target: PartitionSet,
    *,
    owned: PartitionSet | None,
    partition_epoch: PartitionEpoch,
) -> CurrentAssignment:
    """Kafka's ``computeNextAssignment(epoch, assigned)``, topic by topic."""
    keep: dict[str, frozenset[int]] = {}
    revoke: dict[str, frozenset[int]] = {}
    grant: dict[str, frozenset[int]] = {}
    unreleased = False
    for topic in target.keys() | current.assigned.keys():
        wanted = target.get(topic, frozenset())
        held = current.assigned.get(topic, frozenset())
        keep[topic] = held & wanted
        revoke[topic] = held - wanted
        own_pending = current.pending_revocation.get(topic, frozenset())
        missing = wanted - held
        free = frozenset(p for p in missing if p in own_pending or partition_epoch(topic, p) == -1)
        unreleased = unreleased or len(free) < len(missing)
        grant[topic] = free
    kept, revoked, granted = PartitionSet(keep), PartitionSet(revoke), PartitionSet(grant)
    if revoked and (owned is None or not owned.isdisjoint(revoked)):
        # Something to give up that it may still own: it stays at its epoch and is granted nothing until it says
        # it no longer owns those partitions.
        return CurrentAssignment(epoch, current.member_epoch, MemberState.UNREVOKED_PARTITIONS, kept, revoked)
    state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    return CurrentAssignment(target_epoch, current.member_epoch, state, kept | granted, PartitionSet())
