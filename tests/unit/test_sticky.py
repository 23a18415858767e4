"""The sticky assignor: worked examples, and its contract checked with Hypothesis against arbitrary inputs.

The properties hold for any subscriptions (multi-thread members, members on different topics) and any ``previous``,
including garbage: threads that do not exist or are not subscribed to the topic, and partitions out of range.
Minimal movement is checked against a closed form of the optimum (``optimal_kept``), not a copy of the algorithm.
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
    _threads,
    any_partitions,
    any_subscriptions,
    as_items,
    check_balance,
    check_validity,
    shuffled,
)
from zkcoord.errors import ConfigurationError
from zkcoord.protocol.assignors import (
    ASSIGNORS,
    consumers_per_topic,
    get_assignor,
    moved_partitions,
    range_assign,
    sticky_assign,
    thread_id,
    threads_of,
)

Previous = dict[str, dict[int, str]]
#: ``(subscriptions, partitions, previous)``.
Case = tuple[Subscriptions, dict[str, int], Previous]


def java_order(text: str) -> bytes:
    """Java's ``String.compareTo`` as a sort key (UTF-16 code units)."""
    return text.encode("utf-16-be", "surrogatepass")


def held_by(threads: list[str], count: int, previous: Mapping[int, str]) -> dict[str, list[int]]:
    """The valid part of one topic's ``previous``: each thread's held partitions, ascending."""
    held: dict[str, list[int]] = {thread: [] for thread in threads}
    for partition, thread in sorted(previous.items()):
        if 0 <= partition < count and thread in held:
            held[thread].append(partition)
    return held


def optimal_kept(held: Mapping[str, list[int]], count: int) -> int:
    """The most partitions any balanced assignment can leave with their holders.

    A balanced assignment gives every thread ``base`` or ``base + 1`` (exactly ``extra`` threads the latter), so a
    thread keeps at most ``min(held, base)``, plus one for each thread given ``base + 1`` that holds more than
    ``base`` -- at most ``extra`` of those.
    """
    base, extra = divmod(count, len(held))
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
def inputs(draw: st.DrawFn) -> Case:
    subscriptions = draw(any_subscriptions)
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


def test_one_joins_fifty_members_with_ten_each() -> None:
    before = range_assign(single_thread(BIG), {"t": 500})
    assert Counter(before["t"].values()) == Counter({thread_id(m, 0): 10 for m in BIG})
    newcomer = "g_h-0999-ffffffff"  # sorts first: it still gets no "extra" partition, as it holds nothing
    after = sticky_assign(single_thread([*BIG, newcomer]), {"t": 500}, before)
    gained = [p for p, thread in after["t"].items() if before["t"][p] != thread]
    assert all(after["t"][p] == thread_id(newcomer, 0) for p in gained)
    assert len(gained) == 9  # 500 // 51; 41 members keep 10, the last 9 in thread order give one each
    losers = Counter(before["t"][p] for p in gained)
    assert losers == Counter({thread_id(m, 0): 1 for m in BIG[-9:]})
    assert range_assign(single_thread([*BIG, newcomer]), {"t": 500}) != after  # range would shift every range
    assert moved_partitions(before, range_assign(single_thread([*BIG, newcomer]), {"t": 500})) > 400


def test_one_leaves_fifty_members_with_ten_each() -> None:
    before = range_assign(single_thread(BIG), {"t": 500})
    leaver = BIG[17]
    after = sticky_assign(single_thread([m for m in BIG if m != leaver]), {"t": 500}, before)
    moved = [p for p, thread in after["t"].items() if before["t"][p] != thread]
    assert sorted(moved) == sorted(p for p, thread in before["t"].items() if thread == thread_id(leaver, 0))
    # 500 = 49 * 10 + 10: the first 10 threads in thread order go to 11, one of the leaver's partitions each.
    assert Counter(after["t"][p] for p in moved) == Counter({thread_id(m, 0): 1 for m in BIG[:10]})


def test_extra_partitions_go_to_the_biggest_holders_then_thread_order() -> None:
    subs = {"c": {"t": 11}}
    threads = consumers_per_topic(subs)["t"]
    assert threads[:3] == ["c-0", "c-1", "c-10"]
    one_each = dict(enumerate(threads))  # partitions 0..10, one per thread; 11 unowned
    result = sticky_assign(subs, {"t": 12}, {"t": one_each})
    assert result["t"] == {**one_each, 11: "c-0"}  # a tie: the extra goes first in *string* order
    # c-2 holding two of them makes it the one that keeps base + 1 = 2; c-9 then gets the lowest free partition.
    result = sticky_assign(subs, {"t": 12}, {"t": {**one_each, 10: "c-2"}})
    assert result["t"] == {**one_each, 10: "c-2", 11: "c-9"}


def test_surplus_keeps_the_lowest_partitions_and_the_pool_is_dealt_in_order() -> None:
    previous = {"t": {5: "a-0", 1: "a-0", 3: "a-0", 0: "a-0", 2: "b-0", 4: "b-0"}}
    result = sticky_assign({"a": {"t": 1}, "b": {"t": 1}, "c": {"t": 1}}, {"t": 6}, previous)
    assert result == {"t": {0: "a-0", 1: "a-0", 2: "b-0", 3: "c-0", 4: "b-0", 5: "c-0"}}


def test_garbage_in_previous_is_ignored() -> None:
    subs = {"a": {"t": 2}, "b": {"u": 1}}
    previous = {
        "t": {-1: "a-0", 0: "a-1", 1: "b-0", 2: "a-7", 3: "zz-0", 4: "garbage", 9: "a-0"},
        "gone": {0: "a-0"},
    }
    # Only 0 -> a-1 is valid (b-0 is not on t, a-7 does not exist, 9 is out of range); the rest are dealt fresh.
    assert sticky_assign(subs, {"t": 4, "u": 1}, previous) == {
        "t": {0: "a-1", 1: "a-0", 2: "a-0", 3: "a-1"},
        "u": {0: "b-0"},
    }


def test_topic_grows_and_shrinks() -> None:
    subs = {"a": {"t": 1}, "b": {"t": 1}}
    before = sticky_assign(subs, {"t": 4}, {"t": {0: "b-0", 1: "a-0", 2: "b-0", 3: "a-0"}})
    assert before == {"t": {0: "b-0", 1: "a-0", 2: "b-0", 3: "a-0"}}
    assert sticky_assign(subs, {"t": 6}, before) == {"t": {**before["t"], 4: "a-0", 5: "b-0"}}
    assert sticky_assign(subs, {"t": 2}, before) == {"t": {0: "b-0", 1: "a-0"}}
    assert sticky_assign(subs, {"t": 0}, before) == {}


def test_empty_topics_and_topics_without_threads_are_absent() -> None:
    partitions = {"t": 0, "u": 2, "idle": 5, "unsubscribed": 3}
    previous = {"idle": {0: "a-0"}, "unsubscribed": {0: "a-0"}, "t": {0: "a-0"}}
    assert sticky_assign({"a": {"t": 1, "u": 1, "gone": 1, "idle": 0}}, partitions, previous) == {
        "u": {0: "a-0", 1: "a-0"}
    }
    assert sticky_assign({}, partitions, previous) == {}


def test_negative_counts_are_rejected() -> None:
    with pytest.raises(ConfigurationError, match="threads"):
        sticky_assign({"a": {"t": -1}}, {"t": 1}, {"t": {0: "a-0"}})
    with pytest.raises(ConfigurationError, match="partition count"):
        sticky_assign({"a": {"t": 1}}, {"t": -1})


def test_registered_and_callable_with_two_arguments() -> None:
    assert ASSIGNORS["sticky"] is sticky_assign
    assert get_assignor("sticky") is sticky_assign
    subs = {"C1": {"t": 2}, "C2": {"t": 2}}
    assert get_assignor("sticky")(subs, {"t": 5}) == range_assign(subs, {"t": 5})


# --- properties ---------------------------------------------------------------------------------------------------


@given(inputs())
def test_valid_and_balanced_per_topic(case: Case) -> None:
    subscriptions, partitions, previous = case
    assignment = sticky_assign(subscriptions, partitions, previous)
    check_validity(subscriptions, partitions, assignment)
    for topic, owners in assignment.items():
        check_balance(_threads(subscriptions, topic), list(owners.values()))


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
    expected = sticky_assign(subscriptions, partitions, previous)
    again = sticky_assign(*shuffled(subscriptions, partitions, rnd), shuffled_previous(previous, rnd))
    assert as_items(again) == as_items(expected)


@given(inputs())
def test_moves_the_fewest_partitions_a_balanced_result_can(case: Case) -> None:
    subscriptions, partitions, previous = case
    assignment = sticky_assign(subscriptions, partitions, previous)
    for topic, threads in consumers_per_topic(subscriptions).items():
        count = partitions.get(topic, 0)
        owners = assignment.get(topic, {})
        if not threads or count == 0:
            continue
        held = held_by(threads, count, previous.get(topic, {}))
        got = Counter(owners.values())
        kept = {thread: sorted(p for p in held[thread] if owners[p] == thread) for thread in threads}
        # A thread keeps what it held unless it now has fewer partitions, and then its lowest-numbered ones.
        for thread in threads:
            assert kept[thread] == held[thread][: got[thread]]
        # So movement is minimal overall: the optimum of a balanced assignment.
        assert sum(map(len, kept.values())) == optimal_kept(held, count)
        # The threads given base + 1 are the biggest holders, ties in thread order.
        base, extra = divmod(count, len(threads))
        ranked = sorted(threads, key=lambda thread: (-len(held[thread]), java_order(thread)))
        assert {thread for thread in threads if got[thread] == base + 1} == set(ranked[:extra])
        # The partitions that change hands are dealt in ascending order to the threads in thread order.
        dealt = [owners[p] for p in range(count) if p not in held[owners[p]]]
        positions = [threads.index(thread) for thread in dealt]
        assert positions == sorted(positions)


@given(inputs())
def test_idempotent(case: Case) -> None:
    subscriptions, partitions, previous = case
    once = sticky_assign(subscriptions, partitions, previous)
    assert sticky_assign(subscriptions, partitions, once) == once


@given(any_subscriptions, any_partitions)
def test_without_previous_it_is_range(subscriptions: Subscriptions, partitions: dict[str, int]) -> None:
    expected = range_assign(subscriptions, partitions)
    assert as_items(sticky_assign(subscriptions, partitions)) == as_items(expected)
    assert as_items(sticky_assign(subscriptions, partitions, {})) == as_items(expected)


@given(balanced_group(), st.data())
def test_a_member_joining_takes_at_most_its_share_and_only_it_gains(
    group: tuple[list[str], int, Previous], data: st.DataObject
) -> None:
    # No corner case needs excluding.  With n = N * b + r, the new base n // (N + 1) is at most b; when it equals b
    # the new extra (r - b) is at most r, the number of old members holding b + 1, who rank first.  So no old member
    # is below its quota, and the newcomer, holding nothing, gets the base: exactly n // (N + 1) partitions move.
    members, count, previous = group
    newcomer = data.draw(st.sampled_from([m for m in MEMBER_IDS if m not in members]))
    after = sticky_assign(single_thread([*members, newcomer]), {"t": count}, previous)
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
    # No corner case needs excluding.  With n = N * b + r, the new base n // (N - 1) is at least b; when it equals b
    # the new extra (b + r) is at least the number of stayers holding b + 1, who rank first.  So no stayer is over
    # its quota.  (A lone member leaving leaves the topic unassigned: all of it was the leaver's.)
    leaver = data.draw(st.sampled_from(members))
    after = sticky_assign(single_thread([m for m in members if m != leaver]), {"t": count}, previous)
    changed = {p for p in range(count) if after.get("t", {}).get(p) != previous["t"][p]}
    assert changed == set(threads_of(previous, leaver).get("t", {}))
