"""The planner with a group's dynamic config (``/config/groups/<g>``): its assignor replaces the coordinator's choice,
its ``max.size`` gives the last registered members nothing, and neither touches a migrating group.  Plain values."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from zkcoord.coordinator.plan import GroupSnapshot, Member, moves, plan
from zkcoord.layout.group_config import GroupConfig
from zkcoord.layout.group_state import GroupPhase, GroupState
from zkcoord.layout.registrations import MemberRegistration, Pattern
from zkcoord.protocol.assignors import shares

TEN = {f"t{i}": 1 for i in range(10)}  # ten one-partition topics: range puts them all on one member


def reg(subscription: dict[str, int], **kw: Any) -> MemberRegistration:
    return MemberRegistration(Pattern.STATIC, subscription, 0, **kw)


def group(members: dict[str, MemberRegistration]) -> GroupSnapshot:
    """Members registered in id order (``a`` first: the lowest czxid)."""
    live = {cid: Member(cid, r, 100 + i) for i, (cid, r) in enumerate(sorted(members.items()))}
    return GroupSnapshot("g", live, None, {})


def totals(target: Mapping[str, Mapping[int, str]]) -> dict[str, int]:
    return {cid: sum(len(ps) for ps in topics.values()) for cid, topics in shares(target).items()}


def settle(snap: GroupSnapshot, config: GroupConfig) -> GroupSnapshot:
    """``snap`` after its rebalance with ``config`` completed: state STABLE, registry = target."""
    done = plan(snap, TEN, "range", config)
    return GroupSnapshot("g", snap.members, GroupState(3, GroupPhase.STABLE, 1, done.members, done.target), done.target)


def test_the_configs_assignor_replaces_the_coordinators_for_an_eager_group() -> None:
    snap = group({c: reg(dict.fromkeys(TEN, 1)) for c in "abc"})
    assert plan(snap, TEN, "range").assignor == "range"
    assert sorted(totals(plan(snap, TEN, "range").target).values()) == [10]  # range: all ten on "a"
    uniform = plan(snap, TEN, "range", GroupConfig(assignor="uniform"))
    assert uniform.assignor == "uniform" and sorted(totals(uniform.target).values()) == [3, 3, 4]
    assert plan(snap, TEN, "uniform", GroupConfig(assignor="range")).assignor == "range"


def test_the_configs_assignor_replaces_uniform_for_an_incremental_group() -> None:
    snap = group({c: reg(dict.fromkeys(TEN, 1), incremental=True) for c in "abc"})
    assert plan(snap, TEN, "range").assignor == "uniform"
    ranged = plan(snap, TEN, "range", GroupConfig(assignor="range"))
    assert ranged.assignor == "range" and ranged.incremental and sorted(totals(ranged.target).values()) == [10]


def test_a_migrating_group_keeps_the_coordinators_assignor_and_size() -> None:
    snap = group({"a": reg({"t0": 1}, migrating=True), "b": reg({"t0": 1}, migrating=True)})
    legacy = {"z": Member("z", reg({"t0": 1}), 50)}
    migrating = GroupSnapshot("g", snap.members, None, {}, legacy=legacy)
    planned = plan(migrating, TEN, "range", GroupConfig(assignor="uniform", max_size=1))
    assert planned.assignor == "range" and planned.excluded == () and set(planned.members) == {"a", "b"}
    assert ("group config", "not applied while zk-client members compute the assignment too") in planned.notes


def test_max_size_gives_the_last_registered_members_nothing_and_the_rest_everything() -> None:
    snap = group({c: reg({"t0": 1, "t1": 1, "t2": 1}, incremental=True) for c in "abcd"})
    planned = plan(snap, TEN, "range", GroupConfig(max_size=2))
    assert planned.excluded == ("c", "d")
    assert set(totals(planned.target)) == {"a", "b"} and sum(totals(planned.target).values()) == 3
    # A first rebalance (no state, nothing held): the excluded hold nothing, so they are left out of it.
    assert set(planned.members) == {"a", "b"}


def test_a_member_excluded_while_it_holds_partitions_is_stopped_with_everyone_and_given_nothing() -> None:
    before = settle(group({c: reg(dict.fromkeys(TEN, 1)) for c in "abc"}), GroupConfig(assignor="uniform"))
    assert set(totals(before.owners)) == {"a", "b", "c"}
    planned = plan(before, TEN, "range", GroupConfig(assignor="uniform", max_size=2))
    assert planned.necessary and planned.excluded == ("c",)
    assert set(planned.members) == {"a", "b", "c"}  # c is a member of the rebalance: stopped before it moves
    assert sorted(totals(planned.target).values()) == [5, 5] and "c" not in totals(planned.target)
    # Once that rebalance is done, c stays in the plan (recorded in the state, given nothing): nothing to do.
    after = settle(before, GroupConfig(assignor="uniform", max_size=2))
    again = plan(after, TEN, "range", GroupConfig(assignor="uniform", max_size=2))
    assert not again.necessary and set(again.members) == {"a", "b", "c"}


def test_a_join_beyond_max_size_starts_no_rebalance_and_hears_nothing() -> None:
    members = {c: reg(dict.fromkeys(TEN, 1), incremental=True) for c in "ab"}
    config = GroupConfig(max_size=2)
    before = settle(group(members), config)
    joined = GroupSnapshot(
        "g", {**before.members, "c": Member("c", reg(dict.fromkeys(TEN, 1), incremental=True), 999)}, before.state,
        before.owners,
    )  # fmt: skip
    planned = plan(joined, TEN, "range", config)
    assert planned.excluded == ("c",) and "c" not in planned.members and not planned.necessary
    # Another change (a new partition) rebalances the group: c still hears nothing.
    grown = plan(joined, {**TEN, "t0": 2}, "range", config)
    assert grown.necessary and "c" not in moves(joined, grown.target, grown.members).gain
    # A place frees up (b leaves): c is let in, a membership change.
    left = GroupSnapshot("g", {k: v for k, v in joined.members.items() if k != "b"}, before.state, before.owners)
    admitted = plan(left, TEN, "range", config)
    assert admitted.necessary and admitted.excluded == () and "c" in totals(admitted.target)
