"""KIP-848's error codes (Kafka's numbers) and the typed errors of its rules.

:class:`ErrorCode` holds the codes a ``ConsumerGroupHeartbeat`` response and an offset commit can carry
(``clients/.../common/protocol/Errors.java``; ``reference/modern-group-protocols.md`` §1.5), so that what a member is
told, journalled and counted here, reads as it would in Kafka.  The errors derive from
:class:`~zkcoord.errors.ZkCoordError`; each that a member is told carries its :class:`ErrorCode`.

Pure.  Imports only :mod:`zkcoord.errors`.
"""

from __future__ import annotations

from enum import IntEnum

from zkcoord.errors import ZkCoordError


class ErrorCode(IntEnum):
    """Kafka's error codes for KIP-848's heartbeat and commits, with Kafka's numbers."""

    NONE = 0
    UNKNOWN_MEMBER_ID = 25
    INVALID_REQUEST = 42
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    #: "the member must abandon all its partitions and rejoin" (with epoch 0)
    FENCED_MEMBER_EPOCH = 110
    #: "instance ID still used by another member ... must leave first"
    UNRELEASED_INSTANCE_ID = 111
    UNSUPPORTED_ASSIGNOR = 112
    #: an offset commit or fetch with a member epoch other than the member's
    STALE_MEMBER_EPOCH = 113


class Kip848Error(ZkCoordError):
    """Root of the errors KIP-848's rules raise."""


class FencedMemberEpochError(Kip848Error):
    """The member must abandon all its partitions and rejoin with epoch 0 (``FENCED_MEMBER_EPOCH``)."""

    code = ErrorCode.FENCED_MEMBER_EPOCH


class DoubleOwnershipError(Kip848Error):
    """Two members' current assignments hold one partition (Kafka's ``addPartitionEpochs`` throws
    ``IllegalStateException``): the group's persisted state breaks the invariant that prevents double ownership,
    and no reconciliation step may be computed from it."""

    def __init__(self, topic: str, partition: int, first: str, second: str) -> None:
        self.topic = topic
        self.partition = partition
        self.members = (first, second)
        super().__init__(
            f"partition {topic}/{partition} is held by both {first!r} and {second!r} "
            "(assigned or pending revocation): the group's current assignments are inconsistent"
        )


class PartitionEpochMismatchError(Kip848Error):
    """Removing a member's partitions from the partition-epoch index found another epoch (or none) recorded for
    one of them (Kafka's ``removePartitionEpochs`` throws ``IllegalStateException``): the index and the member's
    record disagree."""


class IllegalTransitionError(Kip848Error):
    """A step of a member's current assignment that KIP-848's state machine does not allow
    (:data:`~zkcoord.protocol.kip848.states.TRANSITIONS` and the epoch rules of
    :func:`~zkcoord.protocol.kip848.states.check_transition`)."""
