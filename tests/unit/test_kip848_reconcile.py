"""KIP-848's reconciliation, one transition at a time: each test is a case of Kafka's
``CurrentAssignmentBuilderTest`` (group-coordinator/src/test/java/.../modern/consumer/), named after it in snake case,
with its facts (states, epochs, partitions, what is free) and our own code; then Kafka's worked example
(``GroupMetadataManagerTest.testReconciliationProcess``, reference/modern-group-protocols.md §1.3) driven through
three members to STABLE at epoch 11; then the transition table's own check.

Kafka's cases that test its subscription-consistency pass (``...NoLongerInSubscription``, the regular-expression
ones) have no counterpart: that pass is not part of this core (see ``zkcoord/protocol/kip848/reconcile.py``).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.unit.kip848_helpers import Group, P, member
from zkcoord.protocol.kip848 import (
    LEGAL,
    TRANSITIONS,
    ConsumerGroupState,
    CurrentAssignment,
    FencedMemberEpochError,
    GroupEpochs,
    IllegalTransitionError,
    MemberState,
    PartitionSet,
    TargetAssignment,
    check_transition,
    group_state,
    partition_epochs,
    reconcile,
)

STABLE = MemberState.STABLE
UNREVOKED = MemberState.UNREVOKED_PARTITIONS
UNRELEASED = MemberState.UNRELEASED_PARTITIONS
UNKNOWN = MemberState.UNKNOWN
T1, T2 = "topic1", "topic2"


def every(epoch: int) -> Callable[[str, int], int]:
    """Every partition held at ``epoch`` (-1: every partition free)."""
    return lambda _topic, _partition: epoch


def two(a: list[int], b: list[int]) -> PartitionSet:
    return P({T1: a, T2: b})


# --- from STABLE -------------------------------------------------------------------------------------------------


def test_stable_to_stable() -> None:
    m = member(STABLE, 10, 10, two([1, 2, 3], [4, 5, 6]))
    after = reconcile(m, 11, two([1, 2, 3], [4, 5, 6]), None, every(10))
    assert after == member(STABLE, 11, 10, two([1, 2, 3], [4, 5, 6]))


def test_stable_to_stable_with_new_partitions() -> None:
    m = member(STABLE, 10, 10, two([1, 2, 3], [4, 5, 6]))
    after = reconcile(m, 11, two([1, 2, 3, 4], [4, 5, 6, 7]), None, every(-1))
    assert after == member(STABLE, 11, 10, two([1, 2, 3, 4], [4, 5, 6, 7]))


def test_stable_at_the_target_epoch_is_unchanged() -> None:
    """Not a case of Kafka's test: ``build()`` returns the member itself when it is STABLE at the target epoch."""
    m = member(STABLE, 11, 10, two([1, 2, 3], [4, 5, 6]))
    assert reconcile(m, 11, two([1, 2, 3], [4, 5, 6]), None, every(-1)) is m


def test_stable_to_unrevoked_partitions() -> None:
    m = member(STABLE, 10, 10, two([1, 2, 3], [4, 5, 6]))
    after = reconcile(m, 11, two([2, 3, 4], [5, 6, 7]), None, every(-1))
    assert after == member(UNREVOKED, 10, 10, two([2, 3], [5, 6]), two([1], [4]))


def test_stable_to_unreleased_partitions() -> None:
    m = member(STABLE, 10, 10, two([1, 2, 3], [4, 5, 6]))
    after = reconcile(m, 11, two([1, 2, 3, 4], [4, 5, 6, 7]), None, every(10))
    assert after == member(UNRELEASED, 11, 10, two([1, 2, 3], [4, 5, 6]))


def test_stable_to_unreleased_partitions_with_owned_partitions_not_having_revoked_partitions() -> None:
    m = member(STABLE, 10, 10, two([1, 2, 3], [4, 5, 6]))
    after = reconcile(m, 11, two([1, 2, 3], [4, 5, 7]), P(), lambda t, _p: 10 if t == T2 else -1)
    # topic2/6 is dropped without a revocation: the member reports that it no longer owns it
    assert after == member(UNRELEASED, 11, 10, two([1, 2, 3], [4, 5]))


# --- from UNREVOKED_PARTITIONS -----------------------------------------------------------------------------------

REVOKING = member(UNREVOKED, 10, 10, two([2, 3], [5, 6]), two([1], [4]))


def test_unrevoked_partitions_to_stable() -> None:
    after = reconcile(REVOKING, 11, two([2, 3], [5, 6]), two([2, 3], [5, 6]), every(-1))
    assert after == member(STABLE, 11, 10, two([2, 3], [5, 6]))


def test_remains_in_unrevoked_partitions() -> None:
    target = two([3], [6])
    for owned in (None, two([1, 2, 3], [5, 6]), two([2, 3], [4, 5, 6])):
        assert reconcile(REVOKING, 12, target, owned, every(-1)) is REVOKING, owned


def test_unrevoked_partitions_to_unrevoked_partitions() -> None:
    after = reconcile(REVOKING, 12, two([3], [6]), two([2, 3], [5, 6]), every(-1))
    # KAFKA-19974: the epoch stays 10 (not 11) while it revokes again
    assert after == member(UNREVOKED, 10, 10, two([3], [6]), two([2], [5]))


def test_unrevoked_partitions_to_unreleased_partitions() -> None:
    m = member(UNREVOKED, 11, 10, two([2, 3], [5, 6]))
    after = reconcile(m, 11, two([2, 3, 4], [5, 6, 7]), two([2, 3], [5, 6]), every(10))
    assert after == member(UNRELEASED, 11, 11, two([2, 3], [5, 6]))


def test_unrevoked_partitions_to_stable_with_returned_partitions_pending_revocation() -> None:
    """KAFKA-19449: topic1/4 is pending revocation by this very member and back in its target: not unreleased."""
    m = member(UNREVOKED, 10, 10, two([2, 3], [5, 6]), P({T1: [4]}))

    def epoch_of(topic: str, partition: int) -> int:
        held = {T1: {2, 3, 4}, T2: {5, 6}}
        return 10 if partition in held[topic] else -1

    after = reconcile(m, 12, two([2, 3, 4], [5, 6, 7]), two([2, 3], [5, 6]), epoch_of)
    assert after == member(STABLE, 12, 10, two([2, 3, 4], [5, 6, 7]))


# --- from UNRELEASED_PARTITIONS ----------------------------------------------------------------------------------

WAITING = member(UNRELEASED, 11, 11, two([2, 3], [5, 6]))


def test_unreleased_partitions_to_stable() -> None:
    after = reconcile(WAITING, 12, two([2, 3], [5, 6]), None, every(10))
    assert after == member(STABLE, 12, 11, two([2, 3], [5, 6]))


def test_unreleased_partitions_to_stable_with_new_partitions() -> None:
    after = reconcile(WAITING, 11, two([2, 3, 4], [5, 6, 7]), None, every(-1))
    assert after == member(STABLE, 11, 11, two([2, 3, 4], [5, 6, 7]))


def test_unreleased_partitions_to_unreleased_partitions() -> None:
    assert reconcile(WAITING, 11, two([2, 3, 4], [5, 6, 7]), None, every(10)) is WAITING


def test_unreleased_partitions_to_unrevoked_partitions() -> None:
    after = reconcile(WAITING, 12, two([3], [6]), None, every(10))
    assert after == member(UNREVOKED, 11, 11, two([3], [6]), two([2], [5]))


# --- from UNKNOWN ------------------------------------------------------------------------------------------------

FROM_THE_FUTURE = member(UNKNOWN, 11, 11, two([3], [6]), two([2], [5]))


def test_unknown_state() -> None:
    for owned in (None, two([3], [6])):
        with pytest.raises(FencedMemberEpochError) as info:
            reconcile(FROM_THE_FUTURE, 12, two([3], [6]), owned, every(10))
        assert info.value.code == 110
    # rejoined owning nothing: reconciled from scratch
    after = reconcile(FROM_THE_FUTURE, 12, two([3], [6]), P(), every(11))
    assert after == member(STABLE, 12, 11, two([3], [6]))


def test_unknown_state_to_unreleased_partitions() -> None:
    """Not a case of Kafka's test: owning nothing, but a target partition (topic2/7) is still another's."""
    after = reconcile(FROM_THE_FUTURE, 12, two([3], [6, 7]), P(), lambda t, p: 10 if (t, p) == (T2, 7) else -1)
    assert after == member(UNRELEASED, 12, 11, two([3], [6]))


# --- Kafka's worked example --------------------------------------------------------------------------------------


def test_reconciliation_process() -> None:
    """M1 and M2 stable at epoch 10; M3 joins; the target at epoch 11 moves foo/2 M1 -> M2, bar/1 M1 -> M3 and
    foo/4, foo/5 M2 -> M3.  Each member moves on its own: the revokers first, each gainer as its partitions are
    released, and the group is STABLE at 11 after seven heartbeats."""
    target = TargetAssignment(
        11,
        {"M1": P(foo=[0, 1], bar=[0]), "M2": P(foo=[2, 3], bar=[2]), "M3": P(foo=[4, 5], bar=[1])},
    )
    group = Group.stable(10, {"M1": P(foo=[0, 1, 2], bar=[0, 1]), "M2": P(foo=[3, 4, 5], bar=[2])}, target)
    group.current["M3"] = CurrentAssignment(0, 0, STABLE)  # the joiner, as Kafka creates it
    group.owned["M3"] = P()
    epochs = GroupEpochs(11, 11)
    assert group_state(epochs, group.current) is ConsumerGroupState.RECONCILING

    # the joiner first: everything it is to get is still held
    assert group.heartbeat("M3") == member(UNRELEASED, 11, 0)
    # the two losers are told to revoke, and keep epoch 10
    assert group.heartbeat("M1") == member(UNREVOKED, 10, 10, P(foo=[0, 1], bar=[0]), P(foo=[2], bar=[1]))
    assert group.heartbeat("M2") == member(UNREVOKED, 10, 10, P(foo=[3], bar=[2]), P(foo=[4, 5]))
    # M1 acknowledges (reports only what it keeps): it reaches the target
    assert group.heartbeat("M1") == member(STABLE, 11, 10, P(foo=[0, 1], bar=[0]))
    # M3 gets bar/1, released by M1; foo/4 and foo/5 are still M2's
    assert group.heartbeat("M3") == member(UNRELEASED, 11, 11, P(bar=[1]))
    # M2 acknowledges and gets foo/2, released by M1, in the same step
    assert group.heartbeat("M2") == member(STABLE, 11, 10, P(foo=[2, 3], bar=[2]))
    assert group.heartbeat("M3") == member(STABLE, 11, 11, P(foo=[4, 5], bar=[1]))

    assert group_state(epochs, group.current) is ConsumerGroupState.STABLE
    assert {m: c.assigned for m, c in group.current.items()} == target.members
    # and at no step did two members hold one partition, on the coordinator's side or on the clients'
    for step in group.steps:
        assert step.after.member_epoch <= 11
    partition_epochs(group.current)
    assert not group.truly_owned_twice()


# --- the table ---------------------------------------------------------------------------------------------------

#: which test shows each row of the table
COVERED_BY = {
    (STABLE, STABLE): [test_stable_to_stable, test_stable_to_stable_with_new_partitions],
    (STABLE, UNREVOKED): [test_stable_to_unrevoked_partitions],
    (STABLE, UNRELEASED): [
        test_stable_to_unreleased_partitions,
        test_stable_to_unreleased_partitions_with_owned_partitions_not_having_revoked_partitions,
    ],
    (UNREVOKED, STABLE): [
        test_unrevoked_partitions_to_stable,
        test_unrevoked_partitions_to_stable_with_returned_partitions_pending_revocation,
    ],
    (UNREVOKED, UNREVOKED): [test_unrevoked_partitions_to_unrevoked_partitions],
    (UNREVOKED, UNRELEASED): [test_unrevoked_partitions_to_unreleased_partitions],
    (UNRELEASED, STABLE): [
        test_unreleased_partitions_to_stable,
        test_unreleased_partitions_to_stable_with_new_partitions,
    ],
    (UNRELEASED, UNRELEASED): [test_unreleased_partitions_to_unreleased_partitions],
    (UNRELEASED, UNREVOKED): [test_unreleased_partitions_to_unrevoked_partitions],
    (UNKNOWN, STABLE): [test_unknown_state],
    (UNKNOWN, UNRELEASED): [test_unknown_state_to_unreleased_partitions],
}


def test_every_row_of_the_table_has_its_test_and_no_other_transition_is_legal() -> None:
    assert set(COVERED_BY) == LEGAL
    assert len(TRANSITIONS) == len(LEGAL), "a row twice"
    assert (UNKNOWN, UNREVOKED) not in LEGAL
    assert not any(to is UNKNOWN for _, to in LEGAL)


@pytest.mark.parametrize(
    ("before", "after", "rule"),
    [
        # a pair that is not a row
        (FROM_THE_FUTURE, member(UNREVOKED, 11, 11, two([3], []), two([], [6])), "no such transition"),
        (REVOKING, member(UNKNOWN, 10, 10), "no such transition"),
        # revoke before assign: an UNREVOKED step that advances the epoch, or grants a partition
        (
            member(STABLE, 10, 10, two([1, 2], [])),
            member(UNREVOKED, 11, 10, two([2], []), two([1], [])),
            "keeps its epoch",
        ),
        (
            member(STABLE, 10, 10, two([1, 2], [])),
            member(UNREVOKED, 10, 10, two([2, 3], []), two([1], [])),
            "grants or drops",
        ),
        (member(STABLE, 10, 10, two([1, 2], [])), member(UNREVOKED, 10, 10, two([1, 2], [])), "nothing to revoke"),
        # the previous epoch is the epoch before the step; epochs never go back
        (member(STABLE, 10, 9, two([2], [])), member(STABLE, 12, 9, two([2], [])), "previous epoch"),
        (member(UNRELEASED, 12, 11, two([2], [])), member(STABLE, 11, 12, two([2, 3], [])), "went back"),
        (member(STABLE, 10, 10, two([2], [])), member(STABLE, 11, 10, two([2, 3], [])), "moves to the target epoch"),
        # STABLE holds all its target, UNRELEASED not all; nobody holds what is not in its target
        (member(STABLE, 10, 10, two([2], [])), member(STABLE, 12, 10, two([2], [])), "all of its target"),
        (member(STABLE, 10, 10, two([2], [])), member(UNRELEASED, 12, 10, two([2, 3], [])), "waits for some"),
        (member(STABLE, 10, 10, two([2], [])), member(UNRELEASED, 12, 10, two([9], [])), "outside its target"),
    ],
)
def test_check_transition_refuses_a_step_outside_the_rules(
    before: CurrentAssignment, after: CurrentAssignment, rule: str
) -> None:
    with pytest.raises(IllegalTransitionError, match=rule):
        check_transition(before, after, 12, two([2, 3], []))


def test_check_transition_accepts_every_step_of_the_worked_example_and_a_step_that_changes_nothing() -> None:
    check_transition(REVOKING, REVOKING, 12, two([3], [6]))
    check_transition(member(STABLE, 10, 10, two([2], [])), member(STABLE, 12, 10, two([2, 3], [])), 12, two([2, 3], []))
