"""The epoch checks around reconciliation: the partition-epoch index (Kafka's ``currentPartitionEpoch``: assigned
and pending revocation both count, a partition held twice is refused), its update across one member's step, the
heartbeat's epoch check with its lost-response tolerance (§1.2 step 2), and the group's derived state.
"""

from __future__ import annotations

import pytest

from tests.unit.kip848_helpers import P, member
from zkcoord.protocol.kip848 import (
    ConsumerGroupState,
    CurrentAssignment,
    DoubleOwnershipError,
    ErrorCode,
    GroupEpochs,
    MemberState,
    PartitionEpochMismatchError,
    PartitionSet,
    check_member_epoch,
    move_partition_epochs,
    partition_epochs,
)
from zkcoord.protocol.kip848 import group_state as derive

STABLE = MemberState.STABLE
UNREVOKED = MemberState.UNREVOKED_PARTITIONS
UNRELEASED = MemberState.UNRELEASED_PARTITIONS

# --- the partition-epoch index -----------------------------------------------------------------------------------


def test_the_index_counts_assigned_and_pending_revocation_at_the_holders_epoch() -> None:
    members = {
        "m1": member(UNREVOKED, 10, 10, P(a=[0]), P(a=[1], b=[0])),
        "m2": member(UNRELEASED, 11, 10, P(a=[2])),
    }
    assert partition_epochs(members) == {("a", 0): 10, ("a", 1): 10, ("b", 0): 10, ("a", 2): 11}


@pytest.mark.parametrize(
    "second",
    [
        member(STABLE, 11, 11, P(a=[1])),  # assigned to both
        member(UNREVOKED, 11, 11, P(), P(a=[1])),  # assigned to one, pending revocation by the other
    ],
)
def test_a_partition_held_twice_is_refused(second: CurrentAssignment) -> None:
    members = {"m1": member(STABLE, 10, 10, P(a=[0, 1])), "m2": second}
    with pytest.raises(DoubleOwnershipError, match=r"a/1 is held by both 'm1' and 'm2'") as info:
        partition_epochs(members)
    assert info.value.members == ("m1", "m2")


def test_the_index_follows_a_step_and_refuses_one_that_would_hold_a_partition_twice_leaving_it_unchanged() -> None:
    m1 = member(STABLE, 10, 10, P(a=[0, 1]))
    m2 = member(STABLE, 10, 10, P(a=[2]))
    index = partition_epochs({"m1": m1, "m2": m2})

    revoking = member(UNREVOKED, 10, 10, P(a=[0]), P(a=[1]))
    move_partition_epochs(index, "m1", m1, revoking)
    assert index == {("a", 0): 10, ("a", 1): 10, ("a", 2): 10}
    done = member(STABLE, 11, 10, P(a=[0]))
    move_partition_epochs(index, "m1", revoking, done)
    assert index == {("a", 0): 11, ("a", 2): 10}

    snapshot = dict(index)
    with pytest.raises(DoubleOwnershipError, match="a/2"):
        move_partition_epochs(index, "m1", done, member(STABLE, 12, 11, P(a=[0, 2])))
    with pytest.raises(PartitionEpochMismatchError, match="a/2 of 'm2' should be recorded at its epoch 9"):
        move_partition_epochs(index, "m2", member(STABLE, 9, 9, P(a=[2])), None)
    assert index == snapshot

    move_partition_epochs(index, "m2", m2, None)  # m2 leaves
    move_partition_epochs(index, "m3", None, member(STABLE, 12, 0, P(a=[1, 2])))  # m3 joins, takes what is free
    assert index == {("a", 0): 11, ("a", 1): 12, ("a", 2): 12}


# --- the heartbeat's epoch ---------------------------------------------------------------------------------------

ASSIGNED = P(a=[0, 1])


@pytest.mark.parametrize(
    ("server", "previous", "received", "owned", "expected"),
    [
        (11, 10, 11, ASSIGNED, ErrorCode.NONE),  # in step
        (11, 10, 12, ASSIGNED, ErrorCode.FENCED_MEMBER_EPOCH),  # ahead of the coordinator
        (11, 10, 9, P(), ErrorCode.FENCED_MEMBER_EPOCH),  # behind, not the previous epoch
        # behind by the one step whose response was lost: accepted if it owns only assigned partitions
        (11, 10, 10, ASSIGNED, ErrorCode.NONE),
        (11, 10, 10, P(a=[0]), ErrorCode.NONE),
        (11, 10, 10, P(), ErrorCode.NONE),
        (11, 10, 10, P(a=[0, 2]), ErrorCode.FENCED_MEMBER_EPOCH),  # it owns one it was not given
        (11, 10, 10, None, ErrorCode.FENCED_MEMBER_EPOCH),  # did not say what it owns: nothing proves it
        (11, 0, 0, P(), ErrorCode.NONE),  # a joiner whose first response was lost
        (None, 0, 0, None, ErrorCode.NONE),  # a join
        (None, 0, 5, P(), ErrorCode.UNKNOWN_MEMBER_ID),
        (11, 10, -1, P(), ErrorCode.INVALID_REQUEST),  # leaving is dispatched before the check
    ],
)
def test_the_heartbeats_epoch_is_accepted_only_in_step_or_one_lost_response_behind(
    server: int | None, previous: int, received: int, owned: PartitionSet | None, expected: ErrorCode
) -> None:
    assert check_member_epoch(server, previous, received, owned, ASSIGNED) is expected


def test_the_error_codes_are_kafkas() -> None:
    assert {c.name: c.value for c in ErrorCode} == {
        "NONE": 0,
        "UNKNOWN_MEMBER_ID": 25,
        "INVALID_REQUEST": 42,
        "GROUP_MAX_SIZE_REACHED": 81,
        "FENCED_INSTANCE_ID": 82,
        "FENCED_MEMBER_EPOCH": 110,
        "UNRELEASED_INSTANCE_ID": 111,
        "UNSUPPORTED_ASSIGNOR": 112,
        "STALE_MEMBER_EPOCH": 113,
    }


# --- the group's derived state -----------------------------------------------------------------------------------


def test_the_group_state_is_derived_from_its_epochs_and_members() -> None:
    stable = member(STABLE, 11, 10, P(a=[0]))
    assert derive(GroupEpochs(11, 11), {}) is ConsumerGroupState.EMPTY
    assert derive(GroupEpochs(12, 11), {"m1": stable}) is ConsumerGroupState.ASSIGNING
    assert derive(GroupEpochs(11, 11), {"m1": stable}) is ConsumerGroupState.STABLE
    for not_there_yet in (member(STABLE, 10, 10), member(UNRELEASED, 11, 10), member(UNREVOKED, 10, 10, P(), P(a=[1]))):
        members = {"m1": stable, "m2": not_there_yet}
        assert derive(GroupEpochs(11, 11), members) is ConsumerGroupState.RECONCILING
