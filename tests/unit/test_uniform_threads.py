"""The uniform assignor on threads (``uniform_assign``, what the coordinator's incremental rebalances run): worked
examples, and its contract checked with Hypothesis against arbitrary inputs.

This file was ``test_sticky.py``: the per-topic ``sticky`` assignor it tested was replaced by the uniform one, which
balances per *member* over all its topics, then spreads each member's partitions over its threads.  The properties
hold for any subscriptions (multi-thread members, members on different topics) and any ``previous``, including
garbage: threads that do not exist or are not subscribed to the topic, and partitions out of range.  Minimal movement
is checked against a closed form of the optimum (``optimal_kept``), not a copy of the algorithm.  The member-level
properties (heterogeneous balance, incremental equality, ...) are in ``test_uniform.py``.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Mapping

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.unit.test_assignors import (
    CONSUMERS,
    TOPICS,
    Subscriptions,
    any_partitions,
    any_subscriptions,
    as_items,
    check_validity,
    shuffled,
    uniform_subscriptions,
)
from zkcoord.errors import ConfigurationError
from zkcoord.protocol.assignors import (
    ASSIGNORS,
    Assignment,
    consumer_of,
    consumers_per_topic,
    get_assignor,
    moved_partitions,
    range_assign,
    thread_id,
    threads_of,
    uniform_assign,
)

Previous = dict[str, dict[int, str]]
#: ``(subscriptions, partitions, previous)``.
Case = tuple[Subscriptions, dict[str, int], Previous]


def topics_of(subscriptions: Subscriptions, partitions: Mapping[str, int]) -> dict[str, frozenset[str]]:
    """Each member's topics that count: at least one thread, at least one partition."""
    return {
        m: frozenset(t for t, n in topics.items() if n > 0 and partitions.get(t, 0) > 0)
        for m, topics in subscriptions.items()
    }


def member_held(
    subscriptions: Subscriptions, partitions: Mapping[str, int], previous: Previous
) -> dict[str, set[tuple[str, int]]]:
    """What each member holds of ``previous`` that it may keep: its own threads' partitions (any thread number) of
    a topic it has threads on, within range."""
    held: dict[str, set[tuple[str, int]]] = {m: set() for m in subscriptions}
    for topic, owners in previous.items():
        for partition, thread in owners.items():
            member = consumer_of(thread)
            if member in held and subscriptions[member].get(topic, 0) > 0 and 0 <= partition < partitions.get(topic, 0):
                held[member].add((topic, partition))
    return held


def by_member(assignment: Assignment) -> dict[str, set[tuple[str, int]]]:
    out: dict[str, set[tuple[str, int]]] = {}
    for topic, owners in assignment.items():
        for partition, thread in owners.items():
            member = consumer_of(thread)
            assert member is not None
            out.setdefault(member, set()).add((topic, partition))
    return out


def check_balance_per_member(subscriptions: Subscriptions, partitions: dict[str, int], assignment: Assignment) -> None:
    """Homogeneous: totals differ by at most one.  Otherwise Kafka's criterion: two members whose totals differ by
    two or more share no topic the more loaded one holds and the other subscribes to."""
    topics = topics_of(subscriptions, partitions)
    owned = by_member(assignment)
    totals = {m: len(owned.get(m, ())) for m in subscriptions}
    if len(set(topics.values())) <= 1:
        assert not totals or max(totals.values()) - min(totals.values()) <= 1, totals
        return
    for more in subscriptions:
        for less in subscriptions:
            if totals[more] - totals[less] >= 2:
                assert not {t for t, _ in owned.get(more, ())} & topics[less], (more, less, totals)


def check_threads_even(subscriptions: Subscriptions, assignment: Assignment) -> None:
    """Within each member and topic, the counts per thread (zero included) differ by at most one."""
    for topic, owners in assignment.items():
        per_member: dict[str, Counter[str]] = {}
        for thread in owners.values():
            member = consumer_of(thread)
            assert member is not None
            per_member.setdefault(member, Counter())[thread] += 1
        for member, counts in per_member.items():
            everyone = [counts.get(thread_id(member, n), 0) for n in range(subscriptions[member][topic])]
            assert max(everyone) - min(everyone) <= 1, (topic, member, counts)


def optimal_kept(held: Mapping[str, set[tuple[str, int]]], total: int) -> int:
    """The most partitions any member-balanced assignment can leave with their holders (homogeneous group).

    Every member gets ``base`` or ``base + 1`` (exactly ``extra`` of them the latter), so a member keeps at most
    ``min(held, base)``, plus one for each member given ``base + 1`` that holds more than ``base`` -- at most
    ``extra`` of those.
    """
    base, extra = divmod(total, len(held))
    return sum(min(len(h), base) for h in held.values()) + min(extra, sum(1 for h in held.values() if len(h) > base))


# --- strategies ---------------------------------------------------------------------------------------------------

# Every thread id a previous assignment can name: threads of any member of CONSUMERS (whether or not it is in the
# subscriptions, with thread numbers beyond any count drawn), and strings that are no thread id at all.
ANY_THREAD = st.one_of(
    st.builds(thread_id, st.sampled_from(CONSUMERS), st.integers(0, 14)),
    st.sampled_from(["garbage", "a", "-0", "a-01"]),
)


@st.composite
def any_previous(draw: st.DrawFn, subscriptions: Subscriptions, partitions: dict[str, int]) -> Previous:
    """An arbitrary previous ownership, as garbage as it gets or close to a real registry.

    ``garbage``: any threads, any partitions.  ``unbalanced``: mostly threads really subscribed to the topic,
    holding any number of partitions (some beyond the topic's end).  ``other input``: the range assignment of other
    (or the same) subscriptions and partition counts; ``mixed``: that with garbage written over it.
    """
    kind = draw(st.sampled_from(["garbage", "unbalanced", "other input", "mixed", "none"]))
    if kind == "none":
        return {}
    if kind == "unbalanced":
        previous: Previous = {}
        for topic, threads in consumers_per_topic(subscriptions).items():
            count = partitions.get(topic, 0)
            owner = st.sampled_from(threads) | ANY_THREAD if threads else ANY_THREAD
            previous[topic] = draw(st.dictionaries(st.integers(-1, count + 2), owner, max_size=count + 3))
        return previous
    garbage = draw(
        st.dictionaries(
            st.sampled_from([*TOPICS, "other"]),
            st.dictionaries(st.integers(-3, 45), ANY_THREAD, max_size=40),
            max_size=6,
        )
    )
    if kind == "garbage":
        return garbage
    other = range_assign(
        subscriptions if draw(st.booleans()) else draw(any_subscriptions),
        partitions if draw(st.booleans()) else draw(any_partitions),
    )
    if kind == "mixed":
        for topic, owners in garbage.items():
            other.setdefault(topic, {}).update(owners)
    return other


@st.composite
def inputs(draw: st.DrawFn, homogeneous: bool = False) -> Case:
    subscriptions = draw(uniform_subscriptions() if homogeneous else any_subscriptions)
    partitions = draw(any_partitions)
    return subscriptions, partitions, draw(any_previous(subscriptions, partitions))


# Member ids for the join/leave properties: enough for groups of 30, with numeric-vs-string order traps.
MEMBER_IDS = [*CONSUMERS, *(f"g_h-{i}-0a1b2c3d" for i in range(30))]


@st.composite
def balanced_group(draw: st.DrawFn) -> tuple[list[str], int, Previous]:
    """Single-thread members on topic ``t`` with ``n`` partitions, and any balanced assignment of them to those."""
    members = draw(st.lists(st.sampled_from(MEMBER_IDS), min_size=1, max_size=25, unique=True))
    count = draw(st.integers(0, 80))
    base, extra = divmod(count, len(members))
    order = draw(st.permutations(range(count)))
    sizes = [base + 1] * extra + [base] * (len(members) - extra)
    owners: dict[int, str] = {}
    start = 0
    for member, size in zip(draw(st.permutations(members)), sizes, strict=True):
        owners.update((p, thread_id(member, 0)) for p in order[start : start + size])
        start += size
    return members, count, ({"t": owners} if owners else {})


def single_thread(members: list[str]) -> Subscriptions:
    return {member: {"t": 1} for member in members}


# --- worked examples ----------------------------------------------------------------------------------------------

BIG = [f"g_h-{1000 + i}-0a1b2c3d" for i in range(50)]


def test_three_members_on_ten_single_partition_topics_get_four_three_three() -> None:
    # Issue 16: the per-topic sticky gave all ten to one member (each topic on its own: its one partition to the
    # first thread).  Member-level balance over all topics gives 4/3/3, as Kafka's uniform and sticky assignors do.
    subs = {m: {f"t{i}": 1 for i in range(10)} for m in ("a", "b", "c")}
    partitions = {f"t{i}": 1 for i in range(10)}
    for previous in ({}, range_assign(subs, partitions)):
        totals = Counter(
            consumer_of(t) for owners in uniform_assign(subs, partitions, previous).values() for t in owners.values()
        )
        assert sorted(totals.values()) == [3, 3, 4]
    per_topic = Counter(consumer_of(t) for owners in range_assign(subs, partitions).values() for t in owners.values())
    assert per_topic == {"a": 10}  # what the per-topic rule (range, and sticky without previous) gives


def test_one_joins_fifty_members_with_ten_each() -> None:
    before = range_assign(single_thread(BIG), {"t": 500})
    assert Counter(before["t"].values()) == Counter({thread_id(m, 0): 10 for m in BIG})
    newcomer = "g_h-0999-ffffffff"  # sorts first: it still gets no "extra" partition, as it holds nothing
    after = uniform_assign(single_thread([*BIG, newcomer]), {"t": 500}, before)
    gained = [p for p, thread in after["t"].items() if before["t"][p] != thread]
    assert all(after["t"][p] == thread_id(newcomer, 0) for p in gained)
    assert len(gained) == 9  # 500 // 51; 41 members keep 10, the last 9 in member order give one each
    losers = Counter(before["t"][p] for p in gained)
    assert losers == Counter({thread_id(m, 0): 1 for m in BIG[-9:]})
    assert range_assign(single_thread([*BIG, newcomer]), {"t": 500}) != after  # range would shift every range
    assert moved_partitions(before, range_assign(single_thread([*BIG, newcomer]), {"t": 500})) > 400


def test_one_leaves_fifty_members_with_ten_each() -> None:
    before = range_assign(single_thread(BIG), {"t": 500})
    leaver = BIG[17]
    after = uniform_assign(single_thread([m for m in BIG if m != leaver]), {"t": 500}, before)
    moved = [p for p, thread in after["t"].items() if before["t"][p] != thread]
    assert sorted(moved) == sorted(p for p, thread in before["t"].items() if thread == thread_id(leaver, 0))
    # 500 = 49 * 10 + 10: the first 10 members in member order go to 11, one of the leaver's partitions each.
    assert Counter(after["t"][p] for p in moved) == Counter({thread_id(m, 0): 1 for m in BIG[:10]})


def test_extra_partitions_go_to_the_biggest_holders_then_thread_order() -> None:
    # One member: all partitions are its own; this is how they spread over its threads.
    subs = {"c": {"t": 11}}
    threads = consumers_per_topic(subs)["t"]
    assert threads[:3] == ["c-0", "c-1", "c-10"]
    one_each = dict(enumerate(threads))  # partitions 0..10, one per thread; 11 unowned
    result = uniform_assign(subs, {"t": 12}, {"t": one_each})
    assert result["t"] == {**one_each, 11: "c-0"}  # a tie: the extra goes first in *string* order
    # c-2 holding two of them makes it the one that keeps base + 1 = 2; c-9 then gets the lowest free partition.
    result = uniform_assign(subs, {"t": 12}, {"t": {**one_each, 10: "c-2"}})
    assert result["t"] == {**one_each, 10: "c-2", 11: "c-9"}


def test_surplus_keeps_the_lowest_partitions_and_the_pool_is_dealt_in_order() -> None:
    previous = {"t": {5: "a-0", 1: "a-0", 3: "a-0", 0: "a-0", 2: "b-0", 4: "b-0"}}
    result = uniform_assign({"a": {"t": 1}, "b": {"t": 1}, "c": {"t": 1}}, {"t": 6}, previous)
    assert result == {"t": {0: "a-0", 1: "a-0", 2: "b-0", 3: "c-0", 4: "b-0", 5: "c-0"}}


def test_a_member_gives_up_partitions_evenly_from_its_threads() -> None:
    # a fetches 8 partitions on 2 threads; b joins.  a keeps 4, two from each thread (no partition moves between a's
    # own threads), and b's one thread gets as many as a's two.
    previous = {"t": {p: f"a-{p // 4}" for p in range(8)}}  # a-0: 0-3, a-1: 4-7
    result = uniform_assign({"a": {"t": 2}, "b": {"t": 1}}, {"t": 8}, previous)
    kept = {p: thread for p, thread in result["t"].items() if thread.startswith("a-")}
    assert all(previous["t"][p] == thread for p, thread in kept.items())
    assert kept == {0: "a-0", 1: "a-0", 4: "a-1", 5: "a-1"}
    assert Counter(result["t"].values())["b-0"] == 4


def test_partitions_on_a_thread_the_member_no_longer_has_stay_with_the_member() -> None:
    # a went from 3 threads to 2: what a-2 fetched stays a's (on another thread), and is what a gives up first.
    previous = {"t": {0: "a-0", 1: "a-1", 2: "a-2", 3: "b-0"}}
    assert uniform_assign({"a": {"t": 2}, "b": {"t": 1}}, {"t": 4}, previous) == {
        "t": {0: "a-0", 1: "a-1", 2: "b-0", 3: "b-0"}
    }
    assert uniform_assign({"a": {"t": 2}}, {"t": 3}, previous) == {"t": {0: "a-0", 1: "a-1", 2: "a-0"}}


def test_garbage_in_previous_is_ignored() -> None:
    subs = {"a": {"t": 2}, "b": {"u": 1}}
    previous = {
        "t": {-1: "a-0", 0: "a-1", 1: "b-0", 2: "a-7", 3: "zz-0", 4: "garbage", 9: "a-0"},
        "gone": {0: "a-0"},
    }
    # a holds 0 (a-1) and 2 (a-7: a thread it does not have, but a's); b-0 is not on t, 9 and -1 are out of range.
    # a gets all of t; 0 stays on a-1, the rest is spread.
    assert uniform_assign(subs, {"t": 4, "u": 1}, previous) == {
        "t": {0: "a-1", 1: "a-0", 2: "a-0", 3: "a-1"},
        "u": {0: "b-0"},
    }


def test_topic_grows_and_shrinks() -> None:
    subs = {"a": {"t": 1}, "b": {"t": 1}}
    before = uniform_assign(subs, {"t": 4}, {"t": {0: "b-0", 1: "a-0", 2: "b-0", 3: "a-0"}})
    assert before == {"t": {0: "b-0", 1: "a-0", 2: "b-0", 3: "a-0"}}
    assert uniform_assign(subs, {"t": 6}, before) == {"t": {**before["t"], 4: "a-0", 5: "b-0"}}
    assert uniform_assign(subs, {"t": 2}, before) == {"t": {0: "b-0", 1: "a-0"}}
    assert uniform_assign(subs, {"t": 0}, before) == {}


def test_empty_topics_and_topics_without_threads_are_absent() -> None:
    partitions = {"t": 0, "u": 2, "idle": 5, "unsubscribed": 3}
    previous = {"idle": {0: "a-0"}, "unsubscribed": {0: "a-0"}, "t": {0: "a-0"}}
    assert uniform_assign({"a": {"t": 1, "u": 1, "gone": 1, "idle": 0}}, partitions, previous) == {
        "u": {0: "a-0", 1: "a-0"}
    }
    assert uniform_assign({}, partitions, previous) == {}


def test_negative_counts_are_rejected() -> None:
    with pytest.raises(ConfigurationError, match="threads"):
        uniform_assign({"a": {"t": -1}}, {"t": 1}, {"t": {0: "a-0"}})
    with pytest.raises(ConfigurationError, match="partition count"):
        uniform_assign({"a": {"t": 1}}, {"t": -1})


def test_registered_and_callable_with_two_arguments() -> None:
    # `sticky` stays a name (zkcoord broker --assignor sticky), now of the uniform assignor.
    assert ASSIGNORS["uniform"] is ASSIGNORS["sticky"] is uniform_assign
    subs = {"C1": {"t": 2}, "C2": {"t": 2}}
    assert get_assignor("sticky")(subs, {"t": 5}) == uniform_assign(subs, {"t": 5}, {})
    # Member-level balance: 3 and 2, each member's share spread over its own threads.
    assert get_assignor("uniform")(subs, {"t": 5}) == {"t": {0: "C1-0", 1: "C2-0", 2: "C1-0", 3: "C2-1", 4: "C1-1"}}


# --- properties ---------------------------------------------------------------------------------------------------


@given(inputs())
def test_valid_balanced_per_member_and_even_over_threads(case: Case) -> None:
    subscriptions, partitions, previous = case
    assignment = uniform_assign(subscriptions, partitions, previous)
    check_validity(subscriptions, partitions, assignment)
    check_balance_per_member(subscriptions, partitions, assignment)
    check_threads_even(subscriptions, assignment)


def shuffled_previous(previous: Previous, rnd: random.Random) -> Previous:
    topics = list(previous.items())
    rnd.shuffle(topics)
    result: Previous = {}
    for topic, owners in topics:
        items = list(owners.items())
        rnd.shuffle(items)
        result[topic] = dict(items)
    return result


@given(case=inputs(), rnd=st.randoms(use_true_random=False))
def test_deterministic(case: Case, rnd: random.Random) -> None:
    subscriptions, partitions, previous = case
    expected = uniform_assign(subscriptions, partitions, previous)
    again = uniform_assign(*shuffled(subscriptions, partitions, rnd), shuffled_previous(previous, rnd))
    assert as_items(again) == as_items(expected)


@given(inputs(homogeneous=True))
def test_moves_the_fewest_partitions_a_balanced_result_can(case: Case) -> None:
    subscriptions, partitions, previous = case
    topics = topics_of(subscriptions, partitions)
    total = sum(partitions[t] for t in next(iter(topics.values())))
    held = member_held(subscriptions, partitions, previous)
    owned = by_member(uniform_assign(subscriptions, partitions, previous))
    kept = {m: held[m] & owned.get(m, set()) for m in subscriptions}
    # A member gives up partitions only when it holds more than it now has, and then only the surplus.
    for member in subscriptions:
        assert len(kept[member]) == min(len(held[member]), len(owned.get(member, ())))
    # So movement between members is minimal overall: the optimum of a member-balanced assignment.
    assert sum(map(len, kept.values())) == optimal_kept(held, total)


@given(inputs())
def test_idempotent(case: Case) -> None:
    subscriptions, partitions, previous = case
    once = uniform_assign(subscriptions, partitions, previous)
    assert uniform_assign(subscriptions, partitions, once) == once


@given(balanced_group(), st.data())
def test_a_member_joining_takes_at_most_its_share_and_only_it_gains(
    group: tuple[list[str], int, Previous], data: st.DataObject
) -> None:
    # With n = N * b + r, the new base n // (N + 1) is at most b, and every old member holds at least b: none is
    # below its new quota, and the newcomer, holding nothing, gets the base: exactly n // (N + 1) partitions move.
    members, count, previous = group
    newcomer = data.draw(st.sampled_from([m for m in MEMBER_IDS if m not in members]))
    after = uniform_assign(single_thread([*members, newcomer]), {"t": count}, previous)
    moved = [p for p, thread in after.get("t", {}).items() if previous["t"][p] != thread]
    assert len(moved) <= math.ceil(count / (len(members) + 1))
    assert len(moved) == count // (len(members) + 1)
    assert all(after["t"][p] == thread_id(newcomer, 0) for p in moved)
    assert moved_partitions(previous, after) == len(moved)


@given(balanced_group(), st.data())
def test_a_member_leaving_moves_only_its_partitions(
    group: tuple[list[str], int, Previous], data: st.DataObject
) -> None:
    members, count, previous = group
    # With n = N * b + r, the new base n // (N - 1) is at least b, and every stayer holds at most b + 1, within its
    # quota (the extra slots, at least r + b, cover the r holders of b + 1).  So no stayer gives anything up.  (A lone
    # member leaving leaves the topic unassigned: all of it was the leaver's.)
    leaver = data.draw(st.sampled_from(members))
    after = uniform_assign(single_thread([m for m in members if m != leaver]), {"t": count}, previous)
    changed = {p for p in range(count) if after.get("t", {}).get(p) != previous["t"][p]}
    assert changed == set(threads_of(previous, leaver).get("t", {}))


@st.composite
def threaded_group(draw: st.DrawFn) -> tuple[Subscriptions, dict[str, int], Previous]:
    """Members with 1 to 3 threads each on the same topics, settled by the uniform assignor from any previous."""
    members = draw(st.lists(st.sampled_from(MEMBER_IDS), min_size=1, max_size=12, unique=True))
    topics = draw(st.lists(st.sampled_from(TOPICS), min_size=1, max_size=3, unique=True))
    subscriptions = {m: dict.fromkeys(topics, draw(st.integers(1, 3))) for m in members}
    partitions = {t: draw(st.integers(0, 30)) for t in topics}
    return (
        subscriptions,
        partitions,
        uniform_assign(subscriptions, partitions, draw(any_previous(subscriptions, partitions))),
    )


def thread_moves(before: Assignment, after: Assignment) -> set[tuple[str, int]]:
    keys = {(t, p) for a in (before, after) for t, owners in a.items() for p in owners}
    return {(t, p) for t, p in keys if before.get(t, {}).get(p) != after.get(t, {}).get(p)}


@given(threaded_group(), st.data())
def test_with_several_threads_a_join_moves_only_the_joiners_share(
    group: tuple[Subscriptions, dict[str, int], Previous], data: st.DataObject
) -> None:
    # A member over its new quota gives up partitions from its fullest threads, so its threads stay even and none of
    # its other partitions changes thread: the partitions that change *thread* are exactly the joiner's share.
    subscriptions, partitions, before = group
    newcomer = data.draw(st.sampled_from([m for m in MEMBER_IDS if m not in subscriptions]))
    threads = data.draw(st.integers(1, 3))
    joined = {**subscriptions, newcomer: dict.fromkeys(next(iter(subscriptions.values())), threads)}
    after = uniform_assign(joined, partitions, before)
    changed = thread_moves(before, after)
    total = sum(partitions.values())
    assert len(changed) == total // len(joined) <= math.ceil(total / len(joined))
    assert all(consumer_of(after[t][p]) == newcomer for t, p in changed)


@given(threaded_group(), st.data())
def test_with_several_threads_a_leave_moves_only_the_leavers_partitions(
    group: tuple[Subscriptions, dict[str, int], Previous], data: st.DataObject
) -> None:
    subscriptions, partitions, before = group
    leaver = data.draw(st.sampled_from(sorted(subscriptions)))
    after = uniform_assign({m: s for m, s in subscriptions.items() if m != leaver}, partitions, before)
    assert thread_moves(before, after) == {(t, p) for t, ps in threads_of(before, leaver).items() for p in ps}
