"""KIP-848's consumer group protocol, its pure core: reconciliation member by member
(``reference/modern-group-protocols.md`` §1.1-§1.5).  No I/O; the coordinator and the consumer drive it.

* :mod:`~zkcoord.protocol.kip848.reconcile` -- :func:`reconcile`, one member's step towards its target (Kafka's
  ``CurrentAssignmentBuilder``);
* :mod:`~zkcoord.protocol.kip848.states` -- the member state machine as a table (:data:`TRANSITIONS`),
  :func:`check_transition`, and the group's derived state (:func:`group_state`);
* :mod:`~zkcoord.protocol.kip848.epochs` -- :func:`check_member_epoch` (a heartbeat's epoch accepted or fenced) and
  the partition-epoch index (:func:`partition_epochs`, :func:`move_partition_epochs`);
* :mod:`~zkcoord.protocol.kip848.errors` -- Kafka's error codes (:class:`ErrorCode`) and the typed errors.

The persisted records (:class:`CurrentAssignment`, :class:`GroupEpochs`, :class:`MemberTarget`,
:class:`TargetAssignment`, :class:`MemberState`) and their codecs are the layout's (:mod:`zkcoord.layout.kip848`),
as is :class:`PartitionSet`, the one shape of a set of partitions everywhere here; they are re-exported.

May import :mod:`zkcoord.errors`, :mod:`zkcoord.layout` and the rest of :mod:`zkcoord.protocol`; nothing above.
"""

from __future__ import annotations

from zkcoord.layout.kip848 import (
    MAX_EPOCH,
    CurrentAssignment,
    GroupEpochs,
    MemberState,
    MemberTarget,
    TargetAssignment,
)
from zkcoord.layout.partition_set import NO_PARTITIONS, PartitionSet
from zkcoord.protocol.kip848.epochs import (
    PartitionEpochs,
    check_member_epoch,
    move_partition_epochs,
    partition_epochs,
)
from zkcoord.protocol.kip848.errors import (
    DoubleOwnershipError,
    ErrorCode,
    FencedMemberEpochError,
    IllegalTransitionError,
    Kip848Error,
    PartitionEpochMismatchError,
)
from zkcoord.protocol.kip848.reconcile import PartitionEpoch, reconcile
from zkcoord.protocol.kip848.states import (
    LEGAL,
    TRANSITIONS,
    ConsumerGroupState,
    Transition,
    check_transition,
    group_state,
)

__all__ = [
    "LEGAL",
    "MAX_EPOCH",
    "NO_PARTITIONS",
    "TRANSITIONS",
    "ConsumerGroupState",
    "CurrentAssignment",
    "DoubleOwnershipError",
    "ErrorCode",
    "FencedMemberEpochError",
    "GroupEpochs",
    "IllegalTransitionError",
    "Kip848Error",
    "MemberState",
    "MemberTarget",
    "PartitionEpoch",
    "PartitionEpochMismatchError",
    "PartitionEpochs",
    "PartitionSet",
    "TargetAssignment",
    "Transition",
    "check_member_epoch",
    "check_transition",
    "group_state",
    "move_partition_epochs",
    "partition_epochs",
    "reconcile",
]
