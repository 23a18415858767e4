"""The uniform assignor with racks (:mod:`zkcoord.protocol.assignors.racks`), checked with Hypothesis.

With racks, every property of ``tests/unit/test_uniform.py`` still holds (valid, balanced, sticky: a join moves only
the joiner's share, a leave only the leaver's partitions, the fewest moves a balanced result allows, a re-run
changes nothing, deterministic), and more: every member gets exactly as many partitions as without racks (in a
heterogeneous group, as many of each topic), so racks only choose *which* partitions move where.  And racks help:
the rack matches are never fewer than the rack-blind result's, the deal of the partitions that move is a maximum
matching of partitions to racks, and on constructed cases (racks split evenly) every partition lands on a member of
its rack.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from itertools import chain, combinations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.unit.test_uniform import (
    MEMBERS,
    Current,
    Subs,
    cases,
    check_balanced,
    check_fully_balanced,
    check_join,
    check_leave,
    check_sticky,
    check_valid,
    owners,
    reshuffled,
    same,
    topic_sets,
    totals,
)
from zkcoord.protocol.assignors import GroupAssignment, uniform
from zkcoord.protocol.assignors.racks import Racks, in_use, max_flow

RACKS = ["a", "b", "c"]
Case = tuple[Subs, dict[str, int], Current]


@st.composite
def racks_for(draw: st.DrawFn, case: Case, members: list[str] | None = None) -> Racks:
    """Racks for every member that may appear (some without one) and for each partition of the case's topics (some
    with none, some with several, some beyond a topic's end left out)."""
    _, partitions, _ = case
    member_racks = {
        m: r for m in [*(members or []), *MEMBERS, "new"] if (r := draw(st.sampled_from([None, *RACKS]))) is not None
    }
    partition_racks = {
        t: tuple(draw(st.frozensets(st.sampled_from(RACKS), max_size=2)) for _ in range(draw(st.integers(0, n))))
        for t, n in partitions.items()
    }
    return Racks(member_racks, partition_racks)


def counts(result: GroupAssignment) -> dict[tuple[str, str], int]:
    """``(member, topic) -> how many``: what racks must not change in a heterogeneous group."""
    return {(m, t): len(ps) for m, h in result.items() for t, ps in h.items()}


def matches(result: GroupAssignment, racks: Racks) -> int:
    return sum(racks.matches(m, t, p) for m, h in result.items() for t, ps in h.items() for p in ps)


# --- the rack-blind properties, with racks --------------------------------------------------------------------------


@given(st.data())
def test_valid_balanced_and_the_same_counts_as_without_racks(data: st.DataObject) -> None:
    subs, partitions, current = case = data.draw(cases())
    racks = data.draw(racks_for(case))
    result = uniform(subs, partitions, current, racks=racks)
    check_valid(subs, partitions, result)
    check_balanced(subs, result)
    blind = uniform(subs, partitions, current)
    assert totals(result) == totals(blind)
    if len(set(subs.values())) == 1:
        check_fully_balanced(result)
    else:
        assert counts(result) == counts(blind)


@given(st.data())
def test_homogeneous_moves_the_fewest_a_balanced_result_allows(data: st.DataObject) -> None:
    subs, partitions, current = case = data.draw(cases(homogeneous=True, any_current=False))
    if subs:
        check_sticky(current, uniform(subs, partitions, current, racks=data.draw(racks_for(case))), partitions)


@given(st.data())
def test_a_join_moves_only_the_joiners_share(data: st.DataObject) -> None:
    subs, partitions, current = case = data.draw(cases(homogeneous=True))
    racks = data.draw(racks_for(case))
    before = uniform(subs, partitions, current, racks=racks)
    joiner = data.draw(st.sampled_from([m for m in [*MEMBERS, "new"] if m not in subs]))
    topics = next(iter(subs.values())) if subs else data.draw(topic_sets)
    check_join(before, uniform({**subs, joiner: topics}, partitions, before, racks=racks), joiner)


@given(st.data())
def test_a_leave_moves_only_the_leavers_partitions(data: st.DataObject) -> None:
    subs, partitions, current = case = data.draw(cases(homogeneous=True))
    if not subs:
        return
    racks = data.draw(racks_for(case))
    before = uniform(subs, partitions, current, racks=racks)
    leaver = data.draw(st.sampled_from(sorted(subs)))
    after = uniform({m: t for m, t in subs.items() if m != leaver}, partitions, before, racks=racks)
    check_leave(before, after, leaver)


@given(st.data())
def test_a_rerun_changes_nothing(data: st.DataObject) -> None:
    subs, partitions, current = case = data.draw(cases())
    racks = data.draw(racks_for(case))
    once = uniform(subs, partitions, current, racks=racks)
    again = uniform(subs, partitions, once, racks=racks)
    assert same(again, once)
    assert all(again[m] is once[m] for m in once)


@given(st.data(), st.randoms(use_true_random=False))
def test_deterministic(data: st.DataObject, rnd: random.Random) -> None:
    case = data.draw(cases())
    racks = data.draw(racks_for(case))
    shuffled_racks = Racks(dict(reversed(list(racks.members.items()))), dict(reversed(list(racks.partitions.items()))))
    assert same(uniform(*reshuffled(case, rnd), racks=shuffled_racks), uniform(*case, racks=racks))


# --- what racks buy -----------------------------------------------------------------------------------------------


@given(st.data())
def test_never_fewer_rack_matches_than_without_racks(data: st.DataObject) -> None:
    subs, partitions, current = case = data.draw(cases(homogeneous=True))
    racks = data.draw(racks_for(case))
    assert matches(uniform(subs, partitions, current, racks=racks), racks) >= matches(
        uniform(subs, partitions, current), racks
    )


def most_matches(result: GroupAssignment, racks: Racks) -> int:
    """The most rack matches any assignment with ``result``'s counts per member can have, if its partitions were
    all free (the max-flow min-cut bound, by brute force over sets of member racks)."""
    room: dict[str, int] = {}
    for m, h in result.items():
        if m in racks.members:
            room[racks.members[m]] = room.get(racks.members[m], 0) + sum(len(ps) for ps in h.values())
    pairs = list(owners(result))
    subsets = chain.from_iterable(combinations(sorted(room), k) for k in range(len(room) + 1))
    return min(
        sum(room[r] for r in cut) + sum(1 for t, p in pairs if racks.of(t, p) & room.keys() - set(cut))
        for cut in subsets
    )


@given(st.data())
def test_afresh_every_partition_that_can_be_on_its_rack_is(data: st.DataObject) -> None:
    subs, partitions, _ = case = data.draw(cases(homogeneous=True))
    racks = data.draw(racks_for(case))
    result = uniform(subs, partitions, {}, racks=racks)
    if in_use(racks, subs, {t: partitions.get(t, 0) for t in next(iter(subs.values()), ())}) is not None:
        assert matches(result, racks) == most_matches(result, racks)


def test_two_racks_split_evenly_every_partition_on_a_member_of_its_rack() -> None:
    # Two brokers, racks a and b, replicas alternating (TopicAdmin's placement with replication factor 1); four
    # members, two per rack.  Without racks, the round-robin puts half of the partitions on the other rack.
    partitions = {"t": 8, "u": 4}
    racks = Racks(
        {"m1": "a", "m2": "a", "m3": "b", "m4": "b"},
        {t: tuple(frozenset({"ab"[p % 2]}) for p in range(n)) for t, n in partitions.items()},
    )
    subs = dict.fromkeys(["m1", "m2", "m3", "m4"], frozenset(partitions))
    result = uniform(subs, partitions, racks=racks)
    assert matches(result, racks) == 12
    assert matches(uniform(subs, partitions), racks) == 6
    # ... and a join keeps it so (what moves is dealt by rack too).
    more = Racks({**racks.members, "m5": "b"}, racks.partitions)
    joined = uniform({**subs, "m5": frozenset(partitions)}, partitions, result, racks=more)
    assert matches(joined, more) == 12
    leavers = {m: t for m, t in subs.items() if m != "m1"}
    left = uniform(leavers, partitions, result, racks=racks)
    # m1's three partitions of rack a go where there is room: one to m2 (the other member of rack a), one each to
    # m3 and m4 (the balance allows nothing else), so 12 - 2.
    assert matches(left, racks) == 10 and matches(uniform(leavers, partitions, result), racks) <= 10


def test_a_member_over_its_quota_gives_up_what_is_outside_its_rack() -> None:
    # a (rack a) held everything; b (rack b) joins: a keeps its rack's partitions, b gets the others.  Without racks
    # a keeps its lowest two, 0 and 1.
    racks = Racks({"a": "a", "b": "b"}, {"t": (frozenset("a"), frozenset("b"), frozenset("a"), frozenset("b"))})
    before = {"a": {"t": frozenset(range(4))}}
    result = uniform(dict.fromkeys("ab", frozenset({"t"})), {"t": 4}, before, racks=racks)
    assert result == {"a": {"t": frozenset({0, 2})}, "b": {"t": frozenset({1, 3})}}
    assert uniform(dict.fromkeys("ab", frozenset({"t"})), {"t": 4}, before)["a"] == {"t": frozenset({0, 1})}


def test_a_partition_held_outside_its_rack_stays_when_nothing_moves() -> None:
    # The rule here is stickiness before racks (Kafka 3.7 would release b's partitions 0 and 2 to swap them).
    racks = Racks({"a": "a", "b": "b"}, {"t": (frozenset("a"), frozenset("b"), frozenset("a"), frozenset("b"))})
    held = {"a": {"t": frozenset({1, 3})}, "b": {"t": frozenset({0, 2})}}
    assert uniform(dict.fromkeys("ab", frozenset({"t"})), {"t": 4}, held, racks=racks) == held


def test_heterogeneous_free_partitions_dealt_by_rack_and_balancing_moves_prefer_the_takers_rack() -> None:
    racks = Racks({"x": "a", "y": "b"}, {"t": tuple(frozenset("ab"[p % 2]) for p in range(6)), "u": (frozenset("b"),)})
    subs = {"x": frozenset({"t"}), "y": frozenset({"t", "u"})}
    result = uniform(subs, {"t": 6, "u": 1}, racks=racks)
    assert counts(result) == counts(uniform(subs, {"t": 6, "u": 1}))
    assert result == {"x": {"t": frozenset({0, 2, 4})}, "y": {"t": frozenset({1, 3, 5}), "u": frozenset({0})}}
    # y held all of t: the balancing moves give x the partitions of rack a (not y's highest, 3, 4 and 5).
    moved = uniform(subs, {"t": 6, "u": 1}, {"y": {"t": frozenset(range(6)), "u": frozenset({0})}}, racks=racks)
    assert moved["x"] == {"t": frozenset({0, 2, 4})}


def test_racks_not_in_use_give_the_rack_blind_assignment() -> None:
    subs = dict.fromkeys("abc", frozenset({"t"}))
    blind = uniform(subs, {"t": 7})
    same_racks = Racks({"a": "a", "b": "b"}, {"t": (frozenset("ab"),) * 7})  # every partition on every rack
    no_member_racks = Racks({}, {"t": tuple(frozenset("ab"[p % 2]) for p in range(7))})
    elsewhere = Racks({"a": "z"}, {"t": tuple(frozenset("ab"[p % 2]) for p in range(7))})  # no replica in z
    for racks in (same_racks, no_member_racks, elsewhere):
        assert in_use(racks, subs, {"t": 7}) is None
        assert uniform(subs, {"t": 7}, racks=racks) == blind


# --- the flow -----------------------------------------------------------------------------------------------------


@given(
    st.dictionaries(st.frozensets(st.sampled_from(RACKS), min_size=1), st.integers(1, 6), max_size=5),
    st.dictionaries(st.sampled_from(RACKS), st.integers(0, 6), min_size=1),
)
def test_max_flow_is_feasible_and_as_large_as_the_smallest_cut(
    supply: Mapping[frozenset[str], int], room: Mapping[str, int]
) -> None:
    supply = {c: n for c, n in supply.items() if c & room.keys()}
    flow = max_flow(supply, room)
    assert all(n >= 0 and rack in cls for (cls, rack), n in flow.items())
    for cls, n in supply.items():
        assert sum(f for (c, _), f in flow.items() if c == cls) <= n
    for rack, n in room.items():
        assert sum(f for (_, r), f in flow.items() if r == rack) <= n
    cuts = chain.from_iterable(combinations(sorted(room), k) for k in range(len(room) + 1))
    smallest = min(
        sum(room[r] for r in cut) + sum(n for c, n in supply.items() if (c & room.keys()) - set(cut)) for cut in cuts
    )
    assert sum(flow.values()) == smallest


def test_checks_can_fail() -> None:
    racks = Racks({"a": "a", "b": "b"}, {"t": (frozenset("a"), frozenset("b"))})
    crossed: GroupAssignment = {"a": {"t": frozenset({1})}, "b": {"t": frozenset({0})}}
    assert matches(crossed, racks) == 0 < most_matches(crossed, racks) == 2
    with pytest.raises(AssertionError):
        assert counts(crossed) == counts({"a": {"t": frozenset({0, 1})}, "b": {}})
