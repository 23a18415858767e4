"""The epoch checks around a reconciliation step: whether a member's heartbeat carries an epoch the coordinator
accepts (§1.2 step 2), and the partition-epoch index that keeps any partition from being granted twice (§1.1).

:func:`partition_epochs` builds the index from every member's current assignment -- Kafka's
``currentPartitionEpoch``, where a partition held as assigned *or* pending revocation maps to its holder's epoch --
and refuses a group in which two members hold one partition.  :func:`move_partition_epochs` keeps an index up to
date across one member's step, as Kafka's ``updateCurrentPartitionEpochs`` does, in time proportional to that
member's partitions rather than the group's.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from collections.abc import Set as AbstractSet

from zkcoord.layout.kip848 import CurrentAssignment
from zkcoord.layout.partition_set import PartitionSet
from zkcoord.protocol.kip848.errors import DoubleOwnershipError, ErrorCode, PartitionEpochMismatchError

#: ``(topic, partition) -> epoch of its holder``; a partition nobody holds is absent.
PartitionEpochs = dict[tuple[str, int], int]


def check_member_epoch(
    server_epoch: int | None,
    previous_epoch: int,
    received_epoch: int,
    owned: Mapping[str, AbstractSet[int]] | None,
    assigned: Mapping[str, AbstractSet[int]],
) -> ErrorCode:
    """Whether the coordinator accepts a heartbeat carrying ``received_epoch`` (Kafka's
    ``throwIfConsumerGroupMemberEpochIsInvalid`` and the unknown-member check before it).

    ``server_epoch`` and ``previous_epoch`` are the member's epochs on record (``server_epoch`` None: no such
    member); ``owned`` what the heartbeat reports owning (None: not reported); ``assigned`` the member's assigned
    partitions on record.

    * no such member: NONE for a join (epoch 0), else UNKNOWN_MEMBER_ID;
    * a received epoch ahead of the coordinator's: FENCED_MEMBER_EPOCH;
    * behind: FENCED_MEMBER_EPOCH, unless it is the member's previous epoch and it reports owning only assigned
      partitions -- the response that moved it on was lost, and nothing it still holds was taken from it;
    * a negative epoch: INVALID_REQUEST (leaving, -1 and -2, is dispatched before this check, as in Kafka).
    """
    if received_epoch < 0:
        return ErrorCode.INVALID_REQUEST
    if server_epoch is None:
        return ErrorCode.NONE if received_epoch == 0 else ErrorCode.UNKNOWN_MEMBER_ID
    if received_epoch > server_epoch:
        return ErrorCode.FENCED_MEMBER_EPOCH
    if received_epoch < server_epoch:
        lost_response = (
            received_epoch == previous_epoch and owned is not None and PartitionSet.of(owned).issubset(assigned)
        )
        if not lost_response:
            return ErrorCode.FENCED_MEMBER_EPOCH
    return ErrorCode.NONE


def partition_epochs(members: Mapping[str, CurrentAssignment]) -> PartitionEpochs:
    """The partition-epoch index of a group: every partition a member holds, assigned or pending revocation, mapped
    to that member's epoch.

    :raises DoubleOwnershipError: two members hold one partition.
    """
    index: PartitionEpochs = {}
    holder: dict[tuple[str, int], str] = {}
    for member, current in members.items():
        for held in (current.assigned, current.pending_revocation):
            for tp in held.pairs():
                first = holder.setdefault(tp, member)
                if first != member:
                    raise DoubleOwnershipError(tp[0], tp[1], first, member)
                index[tp] = current.member_epoch
    return index


def move_partition_epochs(
    index: MutableMapping[tuple[str, int], int],
    member: str,
    before: CurrentAssignment | None,
    after: CurrentAssignment | None,
) -> None:
    """Update ``index`` for one step of ``member`` from ``before`` to ``after`` (None: the member was absent, or is
    gone).  All or nothing: ``index`` is changed only if every check passes.

    :raises PartitionEpochMismatchError: a partition of ``before`` not recorded at ``before``'s epoch.
    :raises DoubleOwnershipError: a partition of ``after`` recorded for someone else (not among ``before``'s).
    """
    gone = _held(before)
    if before is not None:
        for tp in gone:
            recorded = index.get(tp)
            if recorded != before.member_epoch:
                found = "nobody" if recorded is None else f"epoch {recorded}"
                raise PartitionEpochMismatchError(
                    f"partition {tp[0]}/{tp[1]} of {member!r} should be recorded at its epoch "
                    f"{before.member_epoch}, found {found}"
                )
    came = _held(after)
    for tp in came - gone:
        if tp in index:
            raise DoubleOwnershipError(tp[0], tp[1], f"a member at epoch {index[tp]}", member)
    for tp in gone:
        del index[tp]
    if after is not None:
        for tp in came:
            index[tp] = after.member_epoch


def _held(current: CurrentAssignment | None) -> frozenset[tuple[str, int]]:
    if current is None:
        return frozenset()
    return frozenset(current.assigned.pairs()) | frozenset(current.pending_revocation.pairs())
