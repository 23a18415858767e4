"""The rebalance planner: subscription resolution and the necessity check (seed D 3.1–3.5), on plain values."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zkcoord.coordinator.plan import GroupSnapshot, Member, moves, plan, still_held, unreadable_holders
from zkcoord.errors import ConfigurationError
from zkcoord.layout.group_state import GroupPhase, GroupState
from zkcoord.layout.registrations import MemberRegistration, Pattern
from zkcoord.protocol.subscriptions import resolve
from zkcoord.runtime.faults import parse

TOPICS = {"orders": 2, "ordinals": 1, "clicks": 3}


def reg(subscription: dict[str, int], pattern: Pattern = Pattern.STATIC) -> MemberRegistration:
    return MemberRegistration(pattern, subscription, 0)


def snapshot(
    members: dict[str, MemberRegistration], state: GroupState | None, owners: dict[str, dict[int, str]]
) -> GroupSnapshot:
    return GroupSnapshot(
        "g", {cid: Member(cid, r, 100 + i) for i, (cid, r) in enumerate(sorted(members.items()))}, state, owners
    )


def test_static_subscriptions_skip_missing_topics() -> None:
    assert resolve(reg({"orders": 2, "nope": 1}), TOPICS) == ({"orders": 2}, ["nope"])


def test_white_and_black_lists_match_whole_names() -> None:
    assert resolve(reg({"ord.*": 1}, Pattern.WHITE_LIST), TOPICS) == ({"ordinals": 1, "orders": 1}, [])
    assert resolve(reg({"ord": 1}, Pattern.WHITE_LIST), TOPICS) == ({}, [])  # Java's matches(): the whole name
    assert resolve(reg({"ord.*": 3}, Pattern.BLACK_LIST), TOPICS) == ({"clicks": 3}, [])


def stable_for(snap: GroupSnapshot) -> GroupSnapshot:
    first = plan(snap, TOPICS, "range")
    state = GroupState(5, GroupPhase.STABLE, 1, first.members, first.target)
    return GroupSnapshot(snap.group, snap.members, state, first.target)


def test_a_group_matching_its_registry_needs_nothing() -> None:
    snap = stable_for(snapshot({"a": reg({"orders": 1}), "b": reg({"orders": 1})}, None, {}))
    result = plan(snap, TOPICS, "range")
    assert not result.necessary and result.reason == "assignment unchanged"


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ("no-state", "no persisted state"),
        ("interrupted", "left the group stopping"),
        ("new-member", "membership changed"),
        ("reincarnated", "membership changed"),
        ("unowned", "unowned partitions"),
        ("vanished-partition", "no longer assigned"),
        ("other-owner", "ownership differs"),
        ("empty-registry", "no ownership registered"),
    ],
)
def test_each_reason_for_a_rebalance(change: str, reason: str) -> None:
    base = stable_for(snapshot({"a": reg({"orders": 1}), "b": reg({"orders": 1})}, None, {}))
    assert base.state is not None
    members, state, owners = dict(base.members), base.state, {t: dict(p) for t, p in base.owners.items()}
    if change == "no-state":
        state = None  # type: ignore[assignment]
    elif change == "interrupted":
        state = GroupState(5, GroupPhase.STOPPING, 1, state.members, state.target)
    elif change == "new-member":
        members["c"] = Member("c", reg({"orders": 1}), 999)
    elif change == "reincarnated":
        members["a"] = Member("a", members["a"].registration, 12345)
    elif change == "unowned":
        del owners["orders"][1]
    elif change == "vanished-partition":
        owners["orders"][7] = "a-0"
    elif change == "other-owner":
        owners["orders"][0], owners["orders"][1] = owners["orders"][1], owners["orders"][0]
    elif change == "empty-registry":
        owners = {}
    result = plan(GroupSnapshot("g", members, state, owners), TOPICS, "range")
    assert result.necessary and reason in result.reason


def test_roundrobin_with_unequal_subscriptions_falls_back_to_range_and_says_so() -> None:
    snap = snapshot({"a": reg({"orders": 1}), "b": reg({"clicks": 1})}, None, {})
    result = plan(snap, TOPICS, "roundrobin")
    assert result.assignor == "range"
    assert any("falling back to range" in reason for _, reason in result.notes)
    assert result.target == {"clicks": {0: "b-0", 1: "b-0", 2: "b-0"}, "orders": {0: "a-0", 1: "a-0"}}


def test_fault_specs_are_validated() -> None:
    assert parse("coordinator.before_start=pause@2")["coordinator.before_start"].hit == 2
    for bad in ("nowhere=pause", "coordinator.before_start=explode", "coordinator.before_start=pause@0"):
        with pytest.raises(ConfigurationError):
            parse(bad)


def test_a_migrating_group_is_planned_over_both_protocols_and_commands_only_its_own_share() -> None:
    migrating = MemberRegistration(Pattern.STATIC, {"clicks": 1}, 0, migrating=True)
    old = Member("g_old-1-00000001", MemberRegistration(Pattern.STATIC, {"clicks": 1}, 0), 7)
    snap = GroupSnapshot(
        "g", {"g_new-1-00000002": Member("g_new-1-00000002", migrating, 8)}, None, {}, legacy={old.consumer_id: old}
    )
    planned = plan(snap, TOPICS, "range")
    assert planned.target == {"clicks": {0: "g_new-1-00000002-0", 1: "g_new-1-00000002-0"}}
    assert planned.legacy == {"g_old-1-00000001": 7} and planned.legacy_partitions == 1
    # The state remembers the zk-client members: one leaving is a reason to rebalance.
    state = GroupState(3, GroupPhase.STABLE, 1, planned.members, planned.target, legacy=planned.legacy)
    settled = GroupSnapshot("g", snap.members, state, planned.target, legacy=snap.legacy)
    assert not plan(settled, TOPICS, "range").necessary
    gone = GroupSnapshot("g", snap.members, state, planned.target)
    assert plan(gone, TOPICS, "range").reason == "zk-client membership changed"


def test_a_member_without_migrating_gets_nothing_while_zk_client_members_remain() -> None:
    old = Member("g_old-1-00000001", MemberRegistration(Pattern.STATIC, {"clicks": 1}, 0), 7)
    naive = Member("g_new-1-00000002", MemberRegistration(Pattern.STATIC, {"clicks": 1}, 0), 8)
    planned = plan(
        GroupSnapshot("g", {naive.consumer_id: naive}, None, {}, legacy={old.consumer_id: old}), TOPICS, "range"
    )
    assert planned.target == {}
    assert planned.members == {naive.consumer_id: 8}  # still commanded: stopped, and started with nothing
    assert any("not --migrating" in reason for _, reason in planned.notes)


# --- incremental groups: the uniform target and what moves ------------------------------------------------------


def inc(subscription: dict[str, int]) -> MemberRegistration:
    return MemberRegistration(Pattern.STATIC, subscription, 0, incremental=True)


def settled(members: dict[str, MemberRegistration], incarnations: dict[str, int] | None = None) -> GroupSnapshot:
    """A STABLE group whose registry is its own uniform target (incarnations: override some, as re-registered)."""
    first = plan(snapshot(members, None, {}), TOPICS, "range")
    state = GroupState(5, GroupPhase.STABLE, 1, first.members, first.target)
    live = {
        cid: Member(cid, m.registration, (incarnations or {}).get(cid, m.incarnation))
        for cid, m in snapshot(members, None, {}).members.items()
    }
    return GroupSnapshot("g", live, state, first.target)


def test_a_group_is_incremental_only_when_every_member_says_so() -> None:
    assert plan(snapshot({"a": inc({"clicks": 1}), "b": inc({"clicks": 1})}, None, {}), TOPICS, "range").incremental
    mixed = plan(snapshot({"a": inc({"clicks": 1}), "b": reg({"clicks": 1})}, None, {}), TOPICS, "range")
    assert not mixed.incremental and mixed.assignor == "range"
    migrating = MemberRegistration(Pattern.STATIC, {"clicks": 1}, 0, migrating=True, incremental=True)
    assert not plan(snapshot({"a": inc({"clicks": 1}), "b": migrating}, None, {}), TOPICS, "range").incremental


def test_a_join_revokes_only_from_members_over_their_new_quota() -> None:
    members = {c: inc({"clicks": 1}) for c in ("a", "b")}
    before = settled(members)
    assert not plan(before, TOPICS, "range").necessary  # the uniform target of a settled group is its registry
    joined = snapshot({**members, "c": inc({"clicks": 1})}, before.state, before.owners)
    planned = plan(joined, TOPICS, "range")
    assert planned.assignor == "uniform" and planned.necessary
    m = moves(joined, planned.target)
    # 3 partitions over a, b (2 + 1) -> a, b, c (1 each): only a gives one up, only c gains.
    assert m.moved == 1 and set(m.revoke) == {"a"} and m.gain == {"c"}
    assert sum(len(ps) for ps in m.revoke["a"].values()) == 1
    kept = {p for p, t in before.owners["clicks"].items() if planned.target["clicks"][p] == t}
    assert len(kept) == 2


def test_a_member_that_left_or_came_back_owns_nothing_and_is_not_asked_to_stop() -> None:
    members = {c: inc({"clicks": 1}) for c in ("a", "b", "c")}
    before = settled(members)
    left = GroupSnapshot("g", {c: before.members[c] for c in ("a", "b")}, before.state, before.owners)
    m = moves(left, plan(left, TOPICS, "range").target)
    assert m.revoke == {} and m.gain and m.moved == 1
    back = settled(members, incarnations={"c": 999})  # same id, new session
    planned = plan(back, TOPICS, "range")
    assert planned.necessary and planned.reason == "membership changed"
    m = moves(back, planned.target)
    assert "c" not in m.revoke and "c" in m.gain


# --- members whose registration cannot be read ------------------------------------------------------------------


def test_an_unreadable_member_is_planned_as_present_stopped_and_given_nothing() -> None:
    members = {c: reg({"orders": 1}) for c in ("a", "b")}
    before = stable_for(snapshot(members, None, {}))
    assert before.state is not None
    # b's registration turns to garbage (its session lives): b is still a member, in its recorded incarnation.
    a_only = {"a": before.members["a"]}
    garbled = GroupSnapshot("g", a_only, before.state, before.owners, unreadable={"b": before.members["b"].incarnation})
    planned = plan(garbled, TOPICS, "range")
    assert planned.members == dict(before.state.members)  # the rebalance's members, so its stop goes to b
    assert planned.target == {"orders": {0: "a-0", 1: "a-0"}}  # b gets nothing while unreadable
    assert planned.necessary  # b's partition moves: a rebalance (eager, b stopped first) is needed
    # Planned as left (before the fix) b would have been dropped from the members, and its partition given away
    # without a stop.
    assert "b" in planned.members


def test_a_group_with_an_unreadable_member_is_never_incremental_and_its_holdings_count() -> None:
    members = {c: inc({"clicks": 1}) for c in ("a", "b")}
    before = settled(members)
    assert before.state is not None
    garbled = GroupSnapshot(
        "g", {"a": before.members["a"]}, before.state, before.owners, unreadable={"b": before.members["b"].incarnation}
    )
    planned = plan(garbled, TOPICS, "range")
    assert not planned.incremental  # what b asked for is unknown: everyone is stopped
    assert still_held(garbled) == before.owners  # b's partitions are still held by b, not free


def test_an_unreadable_registration_that_holds_nothing_is_left_out_and_blocks_nothing() -> None:
    before = stable_for(snapshot({"a": reg({"orders": 1})}, None, {}))
    stranger = GroupSnapshot("g", before.members, before.state, before.owners, unreadable={"z": 77})
    planned = plan(stranger, TOPICS, "range")
    assert unreadable_holders(stranger) == {}
    assert "z" not in planned.members and not planned.necessary  # no stop it could never acknowledge
    # Named by the registry (the state lost, say), it may be fetching: a member again.
    named = GroupSnapshot("g", before.members, None, {"orders": {0: "z-0", 1: "a-0"}}, unreadable={"z": 77})
    assert plan(named, TOPICS, "range").members == {"a": 100, "z": 77}


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["a", "b", "c", "d", "e"]),
        st.tuples(st.dictionaries(st.sampled_from(sorted(TOPICS)), st.integers(1, 3), min_size=1), st.booleans()),
        min_size=1,
    ),
    st.sampled_from(["range", "roundrobin", "uniform", "sticky"]),
)
def test_unreadable_members_that_may_fetch_are_members_that_are_given_nothing(
    spec: dict[str, tuple[dict[str, int], bool]], assignor: str
) -> None:
    """Property: from a settled group some of whose registrations become unreadable, every unreadable member the
    registry names is a member of the plan with its incarnation, no unreadable member's thread is in the target,
    and the readable members get every partition of the topics they subscribe to."""
    everyone = {cid: Member(cid, reg(subs), i) for i, (cid, (subs, _)) in enumerate(sorted(spec.items()))}
    settled_group = stable_for(GroupSnapshot("g", everyone, None, {}))
    readable = {cid: m for cid, m in everyone.items() if spec[cid][1]}
    unreadable = {cid: m.incarnation for cid, m in everyone.items() if not spec[cid][1]}
    snap = GroupSnapshot("g", readable, settled_group.state, settled_group.owners, unreadable=unreadable)
    planned = plan(snap, TOPICS, assignor)
    holders = {t.rsplit("-", 1)[0] for parts in settled_group.owners.values() for t in parts.values()}
    expected = {c: m.incarnation for c, m in readable.items()} | {c: unreadable[c] for c in holders & set(unreadable)}
    assert planned.members == expected
    owners = {t.rsplit("-", 1)[0] for parts in planned.target.values() for t in parts.values()}
    assert not owners & set(unreadable)
    wanted = {t for m in readable.values() for t in m.registration.subscription}
    assert {t: set(p) for t, p in planned.target.items()} == {t: set(range(TOPICS[t])) for t in wanted}
    if holders & set(unreadable):
        assert not planned.incremental and planned.necessary


# --- joiners hear their assignment, an empty one included ---------------------------------------------------------


def test_a_joiner_given_nothing_still_gets_a_start() -> None:
    members = {c: inc({"clicks": 1}) for c in ("a", "b", "c")}  # clicks has 3 partitions: one each
    before = settled(members)
    joined = snapshot({**members, "d": inc({"clicks": 1})}, before.state, before.owners)
    planned = plan(joined, TOPICS, "range")
    assert planned.necessary and planned.target == before.owners  # d gets nothing, nothing moves
    m = moves(joined, planned.target)
    assert m.revoke == {} and m.moved == 0
    assert m.gain == {"d"}  # told so with a start carrying no partition; a, b and c hear nothing


@settings(max_examples=300, deadline=None)
@given(
    first=st.dictionaries(st.sampled_from("abcde"), st.sampled_from([("clicks",), ("orders",), ("clicks", "orders")])),
    second=st.dictionaries(st.sampled_from("abcdef"), st.booleans(), min_size=1),
)
def test_every_joiner_and_only_joiners_or_gainers_get_a_start(
    first: dict[str, tuple[str, ...]], second: dict[str, bool]
) -> None:
    """Property: from a settled incremental group, after members joined, left and registered again, the members sent
    a start are exactly the joiners (new ids and new incarnations) and those given a partition they do not hold; no
    joiner is told to stop anything."""
    subs = {cid: inc(dict.fromkeys(first.get(cid, ("clicks", "orders")), 1)) for cid in set(first) | set(second)}
    before = settled({cid: subs[cid] for cid in first}) if first else GroupSnapshot("g", {}, None, {})
    # second: the members now, each True when it registered again (a new incarnation) -- meaningless for newcomers
    now = {
        cid: Member(cid, subs[cid], 500 + i if again or cid not in first else before.members[cid].incarnation)
        for i, (cid, again) in enumerate(sorted(second.items()))
    }
    snap = GroupSnapshot("g", now, before.state, before.owners)
    target = plan(snap, TOPICS, "range").target
    m = moves(snap, target)
    joined = {cid for cid, again in second.items() if again or cid not in first}
    held = still_held(snap)
    given_new = {
        thread.rsplit("-", 1)[0]
        for topic, parts in target.items()
        for p, thread in parts.items()
        if held.get(topic, {}).get(p) != thread
    }
    assert m.gain == joined | given_new
    assert not joined & set(m.revoke)
