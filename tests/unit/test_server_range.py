"""KIP-848's server-side range assignor: Kafka's own ``RangeAssignorTest`` cases (group-coordinator), and its
contract checked with Hypothesis: valid, contiguous, per-topic sizes within one (the larger ranges first in the
order), static members first, co-partitioned when it can be, deterministic; and its thread-level form."""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from tests.unit.test_assignors import check_validity
from tests.unit.test_uniform import MEMBERS, Subs, any_partitions, check_valid, same, subscriptions
from zkcoord.protocol.assignors import (
    SERVER_ASSIGNORS,
    consumer_of,
    get_server_assignor,
    server_range,
    server_range_assign,
    uniform,
)
from zkcoord.protocol.assignors.server_range import range_order

# --- Kafka's RangeAssignorTest ------------------------------------------------------------------------------------


def test_three_members_three_topics_different_subscriptions() -> None:
    # testFirstAssignmentThreeMembersThreeTopicsDifferentSubscriptions
    result = server_range({"A": {"t1", "t2"}, "B": {"t3"}, "C": {"t2", "t3"}}, {"t1": 3, "t2": 3, "t3": 2})
    assert result == {
        "A": {"t1": frozenset({0, 1, 2}), "t2": frozenset({0, 1})},
        "B": {"t3": frozenset({0})},
        "C": {"t2": frozenset({2}), "t3": frozenset({1})},
    }


def test_more_members_than_partitions() -> None:
    # testFirstAssignmentNumMembersGreaterThanNumPartitions: C gets nothing.
    result = server_range(dict.fromkeys("ABC", frozenset({"t1", "t2"})), {"t1": 2, "t2": 2})
    assert result == {
        "A": {"t1": frozenset({0}), "t2": frozenset({0})},
        "B": {"t1": frozenset({1}), "t2": frozenset({1})},
        "C": {},
    }


def test_a_static_member_back_under_a_new_member_id_gets_its_range_back() -> None:
    # testStaticMembership
    before = server_range(dict.fromkeys(["A", "B"], frozenset({"t1"})), {"t1": 3}, {"A": "instanceA", "B": "instanceB"})
    after = server_range(
        dict.fromkeys(["memberA1", "B"], frozenset({"t1"})), {"t1": 3}, {"memberA1": "instanceA", "B": "instanceB"}
    )
    assert after["memberA1"] == before["A"] and after["B"] == before["B"]
    # Without instance ids "memberA1" sorts after "B": the ranges would swap.
    assert server_range(dict.fromkeys(["memberA1", "B"], frozenset({"t1"})), {"t1": 3})["B"] == before["A"]


def test_static_members_come_first() -> None:
    # testMixedStaticMembership: A and C static, B dynamic -> order A, C, B.
    subs = dict.fromkeys("ABC", frozenset({"t1"}))
    assert range_order(["A", "B", "C"], {"A": "instanceA", "C": "instanceC"}) == ["A", "C", "B"]
    result = server_range(subs, {"t1": 5}, {"A": "instanceA", "C": "instanceC"})
    assert result == {"A": {"t1": frozenset({0, 1})}, "C": {"t1": frozenset({2, 3})}, "B": {"t1": frozenset({4})}}


def test_registry_of_server_assignors() -> None:
    # Kafka's group.consumer.assignors default: uniform first (the default), then range.
    assert list(SERVER_ASSIGNORS) == ["uniform", "range"]
    assert get_server_assignor("uniform") is uniform and get_server_assignor("range") is server_range


# --- properties ---------------------------------------------------------------------------------------------------

instance_ids = st.dictionaries(st.sampled_from(MEMBERS), st.sampled_from(["i1", "i2", "i3", "I0", "z"]), max_size=4)


@given(subscriptions(), any_partitions, instance_ids)
def test_valid_contiguous_and_balanced_per_topic_in_order(
    subs: Subs, partitions: dict[str, int], static: dict[str, str]
) -> None:
    static = {m: i for m, i in static.items() if m in subs}
    result = server_range(subs, partitions, static)
    check_valid(subs, partitions, result)
    order = range_order(list(subs), static)
    for topic in {t for topics in subs.values() for t in topics if partitions.get(t, 0) > 0}:
        subscribers = [m for m in order if topic in subs[m]]
        blocks = [sorted(result[m].get(topic, ())) for m in subscribers]
        assert [p for block in blocks for p in block] == list(range(partitions[topic]))  # contiguous, in order
        sizes = [len(block) for block in blocks]
        assert sizes == sorted(sizes, reverse=True) and max(sizes) - min(sizes) <= 1


@given(st.lists(st.sampled_from(MEMBERS), min_size=1, max_size=8, unique=True), st.integers(0, 12), st.integers(1, 4))
def test_co_partitioned_when_topics_have_equal_counts(members: list[str], count: int, topics: int) -> None:
    names = {f"t{i}" for i in range(topics)}
    result = server_range(dict.fromkeys(members, names), dict.fromkeys(names, count))
    for holdings in result.values():
        assert len(set(holdings.values())) <= 1  # the same partition numbers of every topic
        assert len(holdings) in (0, topics)


@given(subscriptions(), any_partitions, instance_ids, st.randoms(use_true_random=False))
def test_deterministic(subs: Subs, partitions: dict[str, int], static: dict[str, str], rnd: random.Random) -> None:
    static = {m: i for m, i in static.items() if m in subs}
    members = list(subs)
    rnd.shuffle(members)
    shuffled = {m: frozenset(rnd.sample(sorted(subs[m]), len(subs[m]))) for m in members}
    assert same(server_range(shuffled, partitions, static), server_range(subs, partitions, static))


@given(
    st.dictionaries(
        st.sampled_from(MEMBERS), st.dictionaries(st.sampled_from(["t", "u", "v"]), st.integers(0, 4), max_size=3)
    ),
    st.dictionaries(st.sampled_from(["t", "u", "v"]), st.integers(0, 12)),
)
def test_thread_level_form_is_valid_and_contiguous_per_member(
    subs: dict[str, dict[str, int]], partitions: dict[str, int]
) -> None:
    assignment = server_range_assign(subs, partitions)
    check_validity(subs, partitions, assignment)
    members = server_range({m: {t for t, n in ts.items() if n > 0} for m, ts in subs.items()}, partitions)
    for topic, owners in assignment.items():
        for member, holdings in members.items():
            mine = {p: thread for p, thread in owners.items() if consumer_of(thread) == member}
            assert set(mine) == set(holdings.get(topic, ()))  # each member's threads hold its member-level range
            threads = [mine[p] for p in sorted(mine)]
            assert threads == sorted(threads)  # contiguous blocks, in thread (string) order
