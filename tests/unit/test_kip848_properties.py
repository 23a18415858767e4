"""KIP-848's reconciliation as properties (hypothesis), on a group in memory (``kip848_helpers.Group``): members
start stable, the target moves once and then again, and heartbeats come in any order, each from a client that may or
may not have applied its last response and may or may not report what it owns.

* (a) no double ownership: a step never grants a partition another member holds, assigned or pending revocation;
  the coordinator's records never hold one partition twice (``partition_epochs`` accepts them after every step);
  and no two clients ever own one partition at once -- the property the others are for;
* (b) revoke before assign: a member that reports owning (or does not report) a partition it is losing keeps its
  epoch and is granted nothing; one in UNREVOKED_PARTITIONS still reporting a pending partition does not move;
* (c) convergence: once every member acknowledges each response, the group reaches the target -- every member
  STABLE at the target epoch holding exactly its target -- within three heartbeats each, in any order (one to learn
  what to revoke, one to acknowledge it, one to take what the others released).
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.kip848_helpers import Group, P
from zkcoord.protocol.kip848 import (
    ConsumerGroupState,
    GroupEpochs,
    MemberState,
    PartitionSet,
    TargetAssignment,
    group_state,
    partition_epochs,
)

PARTITIONS = [(t, p) for t, count in (("a", 4), ("b", 3), ("c", 2)) for p in range(count)]
NAMES = ["m0", "m1", "m2", "m3"]
START, FIRST, SECOND = 5, 6, 7  # the epochs: members stable at START, then targets at FIRST and SECOND


def holdings(members: list[str], owners: list[str | None]) -> dict[str, PartitionSet]:
    """Each partition to the member ``owners`` names for it (None: nobody)."""
    return {m: PartitionSet.from_pairs(tp for tp, o in zip(PARTITIONS, owners, strict=True) if o == m) for m in members}


@st.composite
def assignments(draw: st.DrawFn, members: list[str]) -> dict[str, PartitionSet]:
    owners = st.sampled_from([*members, None])
    return holdings(members, draw(st.lists(owners, min_size=len(PARTITIONS), max_size=len(PARTITIONS))))


#: one heartbeat: (member index, its client applied its last response first, it reports what it owns)
Beat = tuple[int, bool, bool]
beats = st.lists(st.tuples(st.integers(0, 3), st.booleans(), st.booleans()), max_size=20)


@dataclass
class Scenario:
    members: list[str]
    start: dict[str, PartitionSet]
    first: dict[str, PartitionSet]
    second: dict[str, PartitionSet]
    during_first: list[Beat]
    during_second: list[Beat]


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    members = NAMES[: draw(st.integers(1, 4))]
    return Scenario(
        members,
        draw(assignments(members)),
        draw(assignments(members)),
        draw(assignments(members)),
        draw(beats),
        draw(beats),
    )


def run(group: Group, schedule: list[Beat], members: list[str]) -> None:
    """Play ``schedule``, checking (a) and (b) on every step."""
    for index, apply, report in schedule:
        name = members[index % len(members)]
        step_at = len(group.steps)
        group.heartbeat(name, apply=apply, report=report)
        [step] = group.steps[step_at:]
        before, after, owned = step.before, step.after, step.owned
        assert after.member_epoch <= group.target.epoch

        # (a) what the step grants, nobody else holds; nothing is held twice, by records or by clients
        granted = after.assigned - before.assigned - before.pending_revocation
        for other, current in group.current.items():
            if other != name:
                assert granted.isdisjoint(current.assigned), (name, other, granted)
                assert granted.isdisjoint(current.pending_revocation), (name, other, granted)
        partition_epochs(group.current)
        assert not group.truly_owned_twice()

        # (b) revoke before assign
        losing = (before.assigned | before.pending_revocation) - after.assigned
        if losing and (owned is None or not owned.isdisjoint(losing)):
            assert after.member_epoch == before.member_epoch, step
            assert after.assigned.issubset(before.assigned), step
        if before.state is MemberState.UNREVOKED_PARTITIONS and (
            owned is None or not owned.isdisjoint(before.pending_revocation)
        ):
            assert after is before, step


def group_for(scenario: Scenario) -> Group:
    return Group.stable(START, scenario.start, TargetAssignment(FIRST, scenario.first))


@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_no_partition_is_granted_while_held_and_none_is_assigned_before_its_revocation(scenario: Scenario) -> None:
    group = group_for(scenario)
    run(group, scenario.during_first, scenario.members)
    group.target = TargetAssignment(SECOND, scenario.second)  # the target moves again, mid-reconciliation
    run(group, scenario.during_second, scenario.members)


@settings(max_examples=300, deadline=None)
@given(scenarios(), st.data())
def test_a_group_whose_members_acknowledge_reaches_the_target_in_three_heartbeats_each(
    scenario: Scenario, data: st.DataObject
) -> None:
    group = group_for(scenario)
    run(group, scenario.during_first, scenario.members)
    group.target = TargetAssignment(SECOND, scenario.second)
    for _ in range(3):
        order = data.draw(st.permutations(scenario.members))
        run(group, [(scenario.members.index(m), True, True) for m in order], scenario.members)

    target = group.target
    for name, current in group.current.items():
        assert current.is_reconciled_to(SECOND), (name, current)
        assert current.assigned == target.of(name)
    assert group_state(GroupEpochs(SECOND, SECOND), group.current) is ConsumerGroupState.STABLE


def test_three_heartbeats_each_are_needed() -> None:
    """The bound is tight: a partition moving from a member that heartbeats last to one that heartbeats first needs
    the third round (the loser learns, the loser acknowledges, the gainer takes)."""
    group = Group.stable(START, {"m0": P(a=[0]), "m1": P()}, TargetAssignment(FIRST, {"m1": P(a=[0])}))
    for _ in range(2):
        group.heartbeat("m1")
        group.heartbeat("m0")
    assert group.current["m1"].state is MemberState.UNRELEASED_PARTITIONS
    group.heartbeat("m1")
    assert group.current["m1"].is_reconciled_to(FIRST)
    assert group.current["m1"].assigned == P(a=[0])
