"""Kafka 0.8.2's assignors: worked examples from Kafka's own sources, plus invariants checked with Hypothesis.

The examples are the oracle for *which* assignment Kafka makes; the properties (validity, balance, determinism,
range contiguity) hold for every input.  A re-statement of the algorithm would only copy the code under test, so
there is none here.
"""

from __future__ import annotations

import doctest
import importlib
import random
from collections import Counter
from collections.abc import Mapping

import pytest
from hypothesis import given
from hypothesis import strategies as st

from zkcoord.errors import ConfigurationError
from zkcoord.protocol import assignors
from zkcoord.protocol.assignors import (
    ASSIGNORS,
    Assignment,
    Assignor,
    consumer_of,
    get_assignor,
    moved_partitions,
    range_assign,
    roundrobin_assign,
    shares,
    thread_id,
    threads_of,
    uniform_assign,
)
from zkcoord.protocol.hashing import java_string_hash

Subscriptions = dict[str, dict[str, int]]

# Ids chosen to trip prefix tests ("g_h-1-aaaa" / "g_h-1-aaaa-1", "a" / "a-1") and numeric-vs-string order.
CONSUMERS = ["a", "a-1", "b", "c-2", "c-10", "g_h-1-aaaa", "g_h-1-aaaa-1"]
# "Aa" and "BB" have the same Java hashCode, so "[Aa,p]" and "[BB,p]" tie in round-robin's sort.
TOPICS = ["t", "u", "Aa", "BB", "x-1"]


# --- worked examples (Kafka 0.8.2 PartitionAssignor.scala and reference/legacy-kafka-zk.md §2.4-2.5) ----------------


def test_range_kafka_doc_example() -> None:
    # RangeAssignor scaladoc: "p0 -> C1-0, p1 -> C1-0, p2 -> C1-1, p3 -> C2-0, p4 -> C2-1".
    assert range_assign({"C1": {"t": 2}, "C2": {"t": 2}}, {"t": 5}) == {
        "t": {0: "C1-0", 1: "C1-0", 2: "C1-1", 3: "C2-0", 4: "C2-1"}
    }


def test_range_orders_threads_as_strings() -> None:
    # ConsumerThreadId.compare is toString.compare: c-10 and c-11 sort before c-2.
    result = range_assign({"c": {"t": 12}}, {"t": 12})
    assert list(result["t"].values()) == [f"c-{n}" for n in (0, 1, 10, 11, 2, 3, 4, 5, 6, 7, 8, 9)]
    # With fewer partitions than threads the "extra" partitions go to c-0, c-1, c-10, not to c-2.
    assert range_assign({"c": {"t": 11}}, {"t": 3}) == {"t": {0: "c-0", 1: "c-1", 2: "c-10"}}


def test_range_member_order_is_string_order_of_thread_ids() -> None:
    # Members interleave by their thread ids' string order, not by member: "c-10-0" < "c-2-0".
    assert range_assign({"c-2": {"t": 1}, "c-10": {"t": 1}}, {"t": 2}) == {"t": {0: "c-10-0", 1: "c-2-0"}}


def test_range_unsubscribed_member_gets_nothing_of_that_topic() -> None:
    result = range_assign({"a": {"t": 1, "u": 1}, "b": {"t": 1}}, {"t": 4, "u": 3})
    assert result == {"t": {0: "a-0", 1: "a-0", 2: "b-0", 3: "b-0"}, "u": {0: "a-0", 1: "a-0", 2: "a-0"}}
    assert threads_of(result, "b") == {"t": {2: "b-0", 3: "b-0"}}


def test_range_more_threads_than_partitions() -> None:
    result = range_assign({"a": {"t": 2}, "b": {"t": 2}}, {"t": 3})
    assert result == {"t": {0: "a-0", 1: "a-1", 2: "b-0"}}
    assert threads_of(result, "b") == {"t": {2: "b-0"}}  # b-1 gets nothing, as Kafka warns


def test_empty_topics_and_topics_without_threads_are_absent() -> None:
    # "gone" has no partitions entry (no /brokers/topics/gone): 0 partitions, as for Kafka.
    partitions = {"t": 0, "u": 2, "idle": 5, "unsubscribed": 3}
    for assign in (range_assign, roundrobin_assign):
        assert assign({"a": {"t": 1, "u": 1, "gone": 1}}, partitions) == {"u": {0: "a-0", 1: "a-0"}}
        assert assign({}, partitions) == {}
        assert assign({"a": {"idle": 0}}, partitions) == {}
    # A topic listed with 0 streams gets no thread of that member.  (Round-robin refuses such a mix, as Kafka does:
    # the topic's thread-id set is empty, unlike the others'.)
    assert range_assign({"a": {"u": 1, "idle": 0}}, partitions) == {"u": {0: "a-0", 1: "a-0"}}
    with pytest.raises(ConfigurationError, match="idle=0, u=1"):
        roundrobin_assign({"a": {"u": 1, "idle": 0}}, partitions)


def test_roundrobin_reference_example() -> None:
    # [t,0]=87540032 < [t,1] < [t,2] < [t,3] < [u,0]=87569823 < [u,1]: threads alternate c1, c2, c1, c2, c1, c2.
    hashes = [java_string_hash(f"[{t},{p}]") for t, p in [("t", 0), ("t", 1), ("t", 2), ("t", 3), ("u", 0), ("u", 1)]]
    assert hashes == sorted(hashes)
    assert hashes[0] == 87540032
    assert hashes[4] == 87569823
    subs = {"c1": {"t": 1, "u": 1}, "c2": {"t": 1, "u": 1}}
    assert roundrobin_assign(subs, {"t": 4, "u": 2}) == {
        "t": {0: "c1-0", 1: "c2-0", 2: "c1-0", 3: "c2-0"},
        "u": {0: "c1-0", 1: "c2-0"},
    }


def test_roundrobin_deals_in_hash_order_not_partition_order() -> None:
    # "[v,10]" is one character longer than "[v,9]": its hash overflows to a negative int, so 10-12 are dealt first.
    order = sorted(range(13), key=lambda p: java_string_hash(f"[v,{p}]"))
    assert order == [10, 11, 12, *range(10)]
    result = roundrobin_assign({"a": {"v": 1}, "b": {"v": 1}}, {"v": 13})
    assert [result["v"][p] for p in order] == ["a-0", "b-0"] * 6 + ["a-0"]


def test_roundrobin_orders_threads_as_strings() -> None:
    assert roundrobin_assign({"c": {"t": 12}}, {"t": 3}) == {"t": {0: "c-0", 1: "c-1", 2: "c-10"}}


def test_roundrobin_hash_ties_keep_topic_then_partition_order() -> None:
    # Kafka's sortWith is stable; tied pairs keep their input order (partitions ascending within a topic; across
    # topics Kafka's order is a Scala HashMap's).  Here ties across topics go by topic name, whatever the input order.
    assert java_string_hash("[Aa,0]") == java_string_hash("[BB,0]")
    subs = {"c1": {"BB": 1, "Aa": 1}, "c2": {"Aa": 1, "BB": 1}}
    expected = {"Aa": {0: "c1-0"}, "BB": {0: "c2-0"}}
    assert roundrobin_assign(subs, {"BB": 1, "Aa": 1}) == expected
    assert roundrobin_assign(dict(reversed(subs.items())), {"Aa": 1, "BB": 1}) == expected


def test_roundrobin_allows_members_with_different_stream_counts() -> None:
    # Kafka's require compares per-topic thread-id sets: a member must use one count for all topics, but members may
    # differ from each other.
    result = roundrobin_assign({"a": {"t": 2, "u": 2}, "b": {"t": 1, "u": 1}}, {"t": 3, "u": 3})
    assert result == {"t": {0: "a-0", 1: "a-1", 2: "b-0"}, "u": {0: "a-0", 1: "a-1", 2: "b-0"}}


@pytest.mark.parametrize(
    ("subscriptions", "message"),
    [
        ({"a": {"t": 1, "u": 1}, "b": {"t": 1}}, r"consumer 'b' has t=1, u=0 \(not subscribed\)"),
        ({"a": {"t": 1, "u": 2}, "b": {"t": 1, "u": 1}}, r"consumer 'a' has t=1, u=2"),
        ({"a": {"t": 1}, "b": {"u": 1}}, r"consumer 'a' has t=1, u=0 \(not subscribed\)"),
    ],
)
def test_roundrobin_rejects_non_uniform_subscriptions(subscriptions: Subscriptions, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        roundrobin_assign(subscriptions, {"t": 2, "u": 2})


@pytest.mark.parametrize("assign", [range_assign, roundrobin_assign])
def test_negative_counts_are_rejected(assign: Assignor) -> None:
    with pytest.raises(ConfigurationError, match="threads"):
        assign({"a": {"t": -1}}, {"t": 1})
    with pytest.raises(ConfigurationError, match="partition count"):
        assign({"a": {"t": 1}}, {"t": -1})


def test_registry() -> None:
    assert get_assignor("range") is range_assign
    assert get_assignor("roundrobin") is roundrobin_assign
    assert set(ASSIGNORS) == {"range", "roundrobin", "uniform", "sticky"}
    assert get_assignor("sticky") is get_assignor("uniform") is uniform_assign  # the documented alias
    # Kafka 0.8.2 falls back to range for any other name; we refuse it.
    with pytest.raises(ConfigurationError, match=r"unknown partition assignment strategy 'cooperative'.*range"):
        get_assignor("cooperative")


def test_thread_ids_round_trip_without_prefix_confusion() -> None:
    assert thread_id("g_h-1-aaaa", 10) == "g_h-1-aaaa-10"
    assert consumer_of("g_h-1-aaaa-10") == "g_h-1-aaaa"
    assert consumer_of("g_h-1-aaaa-1-0") == "g_h-1-aaaa-1"
    for bad in ("nodash", "-0", "c-", "c-01", "c-+1", "c-x"):
        assert consumer_of(bad) is None
    assignment = {"t": {0: "g_h-1-aaaa-0", 1: "g_h-1-aaaa-1-0", 2: "g_h-1-aaaa-1"}}
    assert threads_of(assignment, "g_h-1-aaaa") == {"t": {0: "g_h-1-aaaa-0", 2: "g_h-1-aaaa-1"}}
    assert threads_of(assignment, "g_h-1-aaaa-1") == {"t": {1: "g_h-1-aaaa-1-0"}}
    assert threads_of(assignment, "g_h-1") == {}


def test_moved_partitions_examples() -> None:
    before = range_assign({"a": {"t": 1}, "b": {"t": 1}}, {"t": 4})  # a: 0,1  b: 2,3
    after = range_assign({"a": {"t": 1}, "b": {"t": 1}, "c": {"t": 1}}, {"t": 4})  # a: 0,1  b: 2  c: 3
    assert moved_partitions(before, after) == 1
    assert moved_partitions(before, {}) == 4
    assert moved_partitions({}, after) == 4
    assert moved_partitions(before, before) == 0


@pytest.mark.parametrize(
    "module", ["classic", "members", "homogeneous", "heterogeneous", "uniform", "threads", "server_range"]
)
def test_docstring_examples(module: str) -> None:
    assert doctest.testmod(importlib.import_module(f"{assignors.__name__}.{module}"), raise_on_error=True).attempted > 0


# --- invariants -------------------------------------------------------------------------------------------------


def _threads(subscriptions: Mapping[str, Mapping[str, int]], topic: str | None = None) -> list[str]:
    """Every thread id of the group (of ``topic``'s subscribers if given)."""
    return [
        thread_id(consumer, n)
        for consumer, topics in subscriptions.items()
        for t, count in topics.items()
        if topic is None or t == topic
        for n in range(count)
    ]


def check_validity(subscriptions: Subscriptions, partitions: dict[str, int], assignment: Assignment) -> None:
    """Every partition of every subscribed topic is owned exactly once, by a thread of a member subscribed to it."""
    expected_topics = {t for t in partitions if partitions[t] > 0 and _threads(subscriptions, t)}
    assert set(assignment) == expected_topics
    for topic, owners in assignment.items():
        assert sorted(owners) == list(range(partitions[topic]))  # a dict key: exactly once
        for thread in owners.values():
            consumer = consumer_of(thread)
            assert consumer in subscriptions
            assert int(thread.rpartition("-")[2]) < subscriptions[consumer].get(topic, 0)
    # The per-consumer views partition the assignment.
    views = [threads_of(assignment, consumer) for consumer in subscriptions]
    pieces = [(topic, p, thread) for view in views for topic, owners in view.items() for p, thread in owners.items()]
    assert sorted(pieces) == sorted((t, p, thread) for t, owners in assignment.items() for p, thread in owners.items())


def check_balance(threads: list[str], owners: list[str]) -> None:
    """Counts per thread (zero for a thread that got nothing) differ by at most one."""
    counts = Counter(dict.fromkeys(threads, 0))
    counts.update(owners)
    assert set(counts) == set(threads)
    if counts:
        assert max(counts.values()) - min(counts.values()) <= 1


def shuffled(
    subscriptions: Subscriptions, partitions: dict[str, int], rnd: random.Random
) -> tuple[Subscriptions, dict[str, int]]:
    """The same inputs with every dict's insertion order shuffled."""

    def shuffle_items(d: Mapping[str, int]) -> dict[str, int]:
        items = list(d.items())
        rnd.shuffle(items)
        return dict(items)

    outer = list(subscriptions.items())
    rnd.shuffle(outer)
    return {c: shuffle_items(topics) for c, topics in outer}, shuffle_items(partitions)


def as_items(assignment: Assignment) -> list[tuple[str, list[tuple[int, str]]]]:
    """The assignment with its iteration order made visible to ``==``."""
    return [(topic, list(owners.items())) for topic, owners in assignment.items()]


any_subscriptions = st.dictionaries(
    st.sampled_from(CONSUMERS), st.dictionaries(st.sampled_from(TOPICS), st.integers(0, 12), max_size=4), max_size=5
)
any_partitions = st.dictionaries(st.sampled_from([*TOPICS, "other"]), st.integers(0, 40), max_size=6)


@st.composite
def uniform_subscriptions(draw: st.DrawFn, min_topics: int = 1) -> Subscriptions:
    """Subscriptions round-robin accepts: all members on the same topics, each with one count for all of them."""
    topics = draw(st.lists(st.sampled_from(TOPICS), min_size=min_topics, max_size=4, unique=True))
    members = draw(st.lists(st.sampled_from(CONSUMERS), min_size=1, max_size=5, unique=True))
    if draw(st.booleans()):
        same = draw(st.integers(1, 6))
        return {m: dict.fromkeys(topics, same) for m in members}
    return {m: dict.fromkeys(topics, draw(st.integers(1, 6))) for m in members}


@given(any_subscriptions, any_partitions)
def test_range_is_valid_and_balanced_per_topic(subscriptions: Subscriptions, partitions: dict[str, int]) -> None:
    assignment = range_assign(subscriptions, partitions)
    check_validity(subscriptions, partitions, assignment)
    for topic, owners in assignment.items():
        check_balance(_threads(subscriptions, topic), list(owners.values()))


@given(any_subscriptions, any_partitions)
def test_range_gives_contiguous_ranges_in_thread_string_order(
    subscriptions: Subscriptions, partitions: dict[str, int]
) -> None:
    for topic, owners in range_assign(subscriptions, partitions).items():
        order = sorted(_threads(subscriptions, topic))
        positions = [order.index(owners[p]) for p in range(len(owners))]
        assert positions == sorted(positions)  # each thread one contiguous block, blocks in thread order
        sizes = [positions.count(i) for i in range(len(order))]
        assert sizes == sorted(sizes, reverse=True)  # the extra partitions go to the first threads


@given(uniform_subscriptions(), any_partitions)
def test_roundrobin_is_valid_and_balanced_overall(subscriptions: Subscriptions, partitions: dict[str, int]) -> None:
    assignment = roundrobin_assign(subscriptions, partitions)
    check_validity(subscriptions, partitions, assignment)
    members_threads = sorted(set(_threads(subscriptions)))
    check_balance(members_threads, [thread for owners in assignment.values() for thread in owners.values()])


@given(uniform_subscriptions(min_topics=2), any_partitions, st.data())
def test_roundrobin_rejects_differing_subscriptions(
    subscriptions: Subscriptions, partitions: dict[str, int], data: st.DataObject
) -> None:
    member = data.draw(st.sampled_from(sorted(subscriptions)))
    topic = data.draw(st.sampled_from(sorted(subscriptions[member])))
    count = subscriptions[member][topic]
    if len(subscriptions) > 1 and data.draw(st.booleans()):
        del subscriptions[member][topic]  # (a lone member dropping a topic stays uniform)
    else:
        subscriptions[member][topic] = data.draw(st.integers(0, 7).filter(lambda n: n != count))
    with pytest.raises(ConfigurationError, match="round-robin assignment needs"):
        roundrobin_assign(subscriptions, partitions)


@pytest.mark.parametrize("name", sorted(ASSIGNORS))
@given(subscriptions=any_subscriptions, partitions=any_partitions, rnd=st.randoms(use_true_random=False))
def test_assignors_are_deterministic(
    name: str, subscriptions: Subscriptions, partitions: dict[str, int], rnd: random.Random
) -> None:
    assign = get_assignor(name)
    try:
        expected = assign(subscriptions, partitions)
    except ConfigurationError:
        with pytest.raises(ConfigurationError):
            assign(*shuffled(subscriptions, partitions, rnd))
        return
    assert as_items(assign(*shuffled(subscriptions, partitions, rnd))) == as_items(expected)


@given(subscriptions=uniform_subscriptions(), partitions=any_partitions, rnd=st.randoms(use_true_random=False))
def test_roundrobin_is_deterministic_for_accepted_inputs(
    subscriptions: Subscriptions, partitions: dict[str, int], rnd: random.Random
) -> None:
    expected = roundrobin_assign(subscriptions, partitions)
    assert as_items(roundrobin_assign(*shuffled(subscriptions, partitions, rnd))) == as_items(expected)


@given(any_subscriptions, any_subscriptions, any_partitions)
def test_moved_partitions_is_a_distance(a: Subscriptions, b: Subscriptions, partitions: dict[str, int]) -> None:
    old, new = range_assign(a, partitions), range_assign(b, partitions)
    assert moved_partitions(old, old) == 0
    assert moved_partitions(old, new) == moved_partitions(new, old)
    total = sum(map(len, old.values())) + sum(map(len, new.values()))
    assert moved_partitions(old, new) <= total
    assert (moved_partitions(old, new) == 0) == (old == new)


@given(
    st.dictionaries(
        st.sampled_from(["t", "u"]),
        st.dictionaries(
            st.integers(0, 50),
            st.sampled_from(["g_h-1-aaaa-0", "g_h-1-aaaa-1", "g_h-1-aaaa-1-0", "g_h-1-bbbb-0", "no-thread-x", "x"]),
        ),
    )
)
def test_shares_is_threads_of_for_every_consumer_at_once(assignment: dict[str, dict[int, str]]) -> None:
    split = shares(assignment)
    consumers = {c for owners in assignment.values() for t in owners.values() if (c := consumer_of(t)) is not None}
    assert set(split) == consumers
    for consumer in consumers:
        assert split[consumer] == threads_of(assignment, consumer)
