"""KIP-848's uniform assignor at member level, checked with Hypothesis on the properties Kafka's own assignor suites
check (reference/modern-group-protocols.md §2.6):

* validity (``verifyValidityAndBalance`` (a), (b); the server-side ``checkValidityAndBalance``): every partition of
  every subscribed topic assigned exactly once, only to a subscriber of its topic;
* balance: homogeneous -- ``isFullyBalanced``, totals differ by at most one; heterogeneous --
  ``verifyValidityAndBalance`` (c): two members whose totals differ by two or more share no topic the more loaded one
  holds (checked here in the stronger form: no topic the less loaded one *subscribes* to);
* stickiness: a join moves at most ``ceil(P / N)`` partitions (here exactly ``P // N``), a leave moves only the
  leaver's, a re-run with the result as the current assignment changes nothing, and a member gives up partitions
  only when over its quota (so the fewest move that a balanced result allows);
* determinism: the result does not depend on the iteration order of any input;
* the incremental form (``UniformGroup``) computes exactly what the full one does.

Each check is a function used by the properties; ``test_checks_can_fail_*`` show that each rejects a bad
assignment, among them the per-topic rule of the replaced ``sticky`` assignor on the issue's 3 x 10 case.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zkcoord.errors import ConfigurationError
from zkcoord.protocol.assignors import GroupAssignment, UniformGroup, uniform

Subs = dict[str, frozenset[str]]
Current = dict[str, dict[str, frozenset[int]]]

# Ids that trip prefix tests and numeric-vs-string order; the last two differ in Java (UTF-16) and Python order.
MEMBERS = ["a", "a-1", "b", "c-2", "c-10", "g_h-1-aaaa", "g_h-1-aaaa-1", "m", "\uffff", "\U00010000"]
TOPICS = ["t", "u", "v", "Aa", "BB", "x-1"]


# --- the checks ---------------------------------------------------------------------------------------------------


def totals(result: GroupAssignment) -> dict[str, int]:
    return {m: sum(len(ps) for ps in h.values()) for m, h in result.items()}


def owners(result: GroupAssignment) -> dict[tuple[str, int], str]:
    return {(t, p): m for m, h in result.items() for t, ps in h.items() for p in ps}


def check_valid(subs: Mapping[str, frozenset[str]], partitions: Mapping[str, int], result: GroupAssignment) -> None:
    """Every member present; every partition of every subscribed topic assigned once, to a subscriber."""
    assert set(result) == set(subs)
    seen: dict[tuple[str, int], str] = {}
    for member, holdings in result.items():
        for topic, ps in holdings.items():
            assert ps, f"{member} has an empty entry for {topic}"
            assert topic in subs[member], f"{member} holds {topic} it does not subscribe to"
            for p in ps:
                assert 0 <= p < partitions.get(topic, 0), (topic, p)
                assert (topic, p) not in seen, f"{topic}-{p} assigned to {seen[topic, p]} and {member}"
                seen[topic, p] = member
    subscribed = {t for topics in subs.values() for t in topics}
    assert set(seen) == {(t, p) for t in subscribed for p in range(partitions.get(t, 0))}


def check_fully_balanced(result: GroupAssignment) -> None:
    """Kafka's ``isFullyBalanced``: totals differ by at most one."""
    sizes = totals(result).values()
    assert not sizes or max(sizes) - min(sizes) <= 1, totals(result)


def check_balanced(subs: Mapping[str, frozenset[str]], result: GroupAssignment) -> None:
    """Kafka's ``verifyValidityAndBalance`` (c), in its stronger form: when two members' totals differ by two or more,
    the more loaded one holds no partition of a topic the other subscribes to (no single move evens them out).
    The literal form (no topic both *hold*) follows from it."""
    size = totals(result)
    for more, held in result.items():
        for less in result:
            if size[more] - size[less] >= 2:
                assert not set(held) & subs[less], f"{more} ({size[more]}) could give {less} ({size[less]}) one"
                assert not set(held) & set(result[less])


def moved(before: GroupAssignment, after: GroupAssignment) -> set[tuple[str, int]]:
    """The partitions whose member changes (a partition in only one of them counts)."""
    old, new = owners(before), owners(after)
    return {tp for tp in old.keys() | new.keys() if old.get(tp) != new.get(tp)}


def check_join(before: GroupAssignment, after: GroupAssignment, joiner: str) -> None:
    """A join from a balanced group: only the joiner gains, and it gains ``P // N``, at most ``ceil(P / N)``."""
    changed = moved(before, after)
    count, total = len(after), len(owners(after))
    assert all(owners(after)[tp] == joiner for tp in changed)
    assert len(changed) <= math.ceil(total / count)
    assert len(changed) == total // count


def check_leave(before: GroupAssignment, after: GroupAssignment, leaver: str) -> None:
    """A leave: exactly the leaver's partitions move."""
    assert moved(before, after) == {(t, p) for t, ps in before[leaver].items() for p in ps}


def optimal_kept(held: Mapping[str, int], total: int) -> int:
    """The most partitions a balanced assignment of ``total`` partitions can leave with members holding ``held``."""
    base, extra = divmod(total, len(held))
    return sum(min(h, base) for h in held.values()) + min(extra, sum(1 for h in held.values() if h > base))


def check_sticky(current: Current, result: GroupAssignment, partitions: Mapping[str, int]) -> None:
    """Homogeneous, from a consistent ``current``: a member gives up partitions only when it held more than it now
    has (and keeps all the others), so the number kept is the optimum of a balanced assignment.  What a member
    holds is what it may keep: partitions within range of the topics it subscribes to (all members: the same)."""
    topics = {t for h in result.values() for t in h}
    total = sum(partitions.get(t, 0) for t in topics)
    held = {
        m: {(t, p) for t, ps in current.get(m, {}).items() if t in topics for p in ps if p < partitions[t]}
        for m in result
    }
    now = {m: {(t, p) for t, ps in h.items() for p in ps} for m, h in result.items()}
    for member in result:
        assert len(held[member] & now[member]) == min(len(held[member]), len(now[member])), member
    kept = sum(len(held[m] & now[m]) for m in result)
    assert kept == optimal_kept({m: len(h) for m, h in held.items()}, total)


def same(a: GroupAssignment, b: GroupAssignment) -> bool:
    """Equal as values: same members, same topics, same partitions (orders and empty entries aside)."""
    return owners(a) == owners(b) and set(a) == set(b)


# --- strategies ---------------------------------------------------------------------------------------------------

any_partitions = st.dictionaries(st.sampled_from(TOPICS), st.integers(0, 12), max_size=len(TOPICS))
topic_sets = st.frozensets(st.sampled_from([*TOPICS, "gone"]), max_size=4)


@st.composite
def subscriptions(draw: st.DrawFn, homogeneous: bool | None = None, min_size: int = 0) -> Subs:
    members = draw(st.lists(st.sampled_from(MEMBERS), min_size=min_size, max_size=8, unique=True))
    if homogeneous is None:
        homogeneous = draw(st.booleans())
    if homogeneous:
        topics = draw(topic_sets)
        return dict.fromkeys(members, topics)
    return {m: draw(topic_sets) for m in members}


@st.composite
def consistent(draw: st.DrawFn, subs: Subs, partitions: Mapping[str, int]) -> Current:
    """A current assignment a coordinator could hold: each partition with at most one member, any balance, and
    partitions of members and topics no longer there (those are the garbage a real previous target leaves)."""
    out: dict[str, dict[str, set[int]]] = {}
    candidates = [*subs, "gone-member"]
    for topic, count in partitions.items():
        for p in range(count + draw(st.integers(0, 2))):  # some beyond the end: a topic that shrank
            owner = draw(st.sampled_from([None, *candidates]))
            if owner is not None:
                out.setdefault(owner, {}).setdefault(topic, set()).add(p)
    return {m: {t: frozenset(ps) for t, ps in h.items()} for m, h in out.items()}


garbage = st.dictionaries(
    st.sampled_from([*MEMBERS, "gone-member"]),
    st.dictionaries(st.sampled_from([*TOPICS, "gone"]), st.frozensets(st.integers(-2, 15), max_size=8), max_size=4),
    max_size=9,
)


@st.composite
def cases(
    draw: st.DrawFn, homogeneous: bool | None = None, any_current: bool = True
) -> tuple[Subs, dict[str, int], Current]:
    subs = draw(subscriptions(homogeneous))
    partitions = draw(any_partitions)
    if any_current and draw(st.booleans()):
        return subs, partitions, draw(garbage)
    return subs, partitions, draw(consistent(subs, partitions))


# --- properties ---------------------------------------------------------------------------------------------------


@given(cases())
def test_valid_for_any_input(case: tuple[Subs, dict[str, int], Current]) -> None:
    subs, partitions, current = case
    check_valid(subs, partitions, uniform(subs, partitions, current))


@given(cases(homogeneous=True))
def test_homogeneous_totals_differ_by_at_most_one(case: tuple[Subs, dict[str, int], Current]) -> None:
    subs, partitions, current = case
    result = uniform(subs, partitions, current)
    check_valid(subs, partitions, result)
    check_fully_balanced(result)


@given(cases(homogeneous=False))
def test_heterogeneous_balanced_as_kafka_tests_define_it(case: tuple[Subs, dict[str, int], Current]) -> None:
    subs, partitions, current = case
    result = uniform(subs, partitions, current)
    check_valid(subs, partitions, result)
    check_balanced(subs, result)


@given(cases(homogeneous=True, any_current=False))
def test_homogeneous_moves_the_fewest_a_balanced_result_allows(case: tuple[Subs, dict[str, int], Current]) -> None:
    subs, partitions, current = case
    if subs:
        check_sticky(current, uniform(subs, partitions, current), partitions)


@given(cases(homogeneous=True), st.data())
def test_a_join_moves_only_the_joiners_share(case: tuple[Subs, dict[str, int], Current], data: st.DataObject) -> None:
    subs, partitions, current = case
    before = uniform(subs, partitions, current)
    joiner = data.draw(st.sampled_from([m for m in [*MEMBERS, "new"] if m not in subs]))
    topics = next(iter(subs.values())) if subs else data.draw(topic_sets)
    after = uniform({**subs, joiner: topics}, partitions, before)
    check_join(before, after, joiner)


@given(cases(homogeneous=True), st.data())
def test_a_leave_moves_only_the_leavers_partitions(
    case: tuple[Subs, dict[str, int], Current], data: st.DataObject
) -> None:
    subs, partitions, current = case
    if not subs:
        return
    before = uniform(subs, partitions, current)
    leaver = data.draw(st.sampled_from(sorted(subs)))
    after = uniform({m: t for m, t in subs.items() if m != leaver}, partitions, before)
    check_leave(before, after, leaver)


@given(cases())
def test_a_rerun_changes_nothing(case: tuple[Subs, dict[str, int], Current]) -> None:
    subs, partitions, current = case
    once = uniform(subs, partitions, current)
    again = uniform(subs, partitions, once)
    assert same(again, once)
    # Copy-on-write: nothing changed, so every member's holdings are the very same objects.
    assert all(again[m] is once[m] for m in once)


def reshuffled(case: tuple[Subs, dict[str, int], Current], rnd: random.Random) -> tuple[Subs, dict[str, int], Current]:
    """The same values, every mapping and set built in another insertion order."""

    def shuffled(items: list[str]) -> list[str]:
        rnd.shuffle(items)
        return items

    subs, partitions, current = case
    subs2 = {m: frozenset(shuffled(list(subs[m]))) for m in shuffled(list(subs))}
    partitions2 = {t: partitions[t] for t in shuffled(list(partitions))}
    current2 = {
        m: {t: frozenset(rnd.sample(sorted(current[m][t]), len(current[m][t]))) for t in shuffled(list(current[m]))}
        for m in shuffled(list(current))
    }
    return subs2, partitions2, current2


@given(cases(), st.randoms(use_true_random=False))
def test_deterministic(case: tuple[Subs, dict[str, int], Current], rnd: random.Random) -> None:
    assert same(uniform(*reshuffled(case, rnd)), uniform(*case))


@settings(max_examples=60)
@given(cases(homogeneous=True), st.lists(st.tuples(st.booleans(), st.sampled_from([*MEMBERS, "n1", "n2"])), max_size=8))
def test_the_incremental_form_equals_the_full_one(
    case: tuple[Subs, dict[str, int], Current], steps: list[tuple[bool, str]]
) -> None:
    subs, partitions, current = case
    topics = next(iter(subs.values())) if subs else frozenset({"t"})
    counts = {t: partitions.get(t, 0) for t in topics}
    group = UniformGroup.start(subs, counts, current)
    assert same(dict(group.assignment), uniform(subs, counts, current))
    for joins, member in steps:
        members = set(group.assignment)
        if joins and member not in members:
            nxt = group.join(member)
            expected = uniform(dict.fromkeys([*members, member], topics), counts, group.assignment)
            check_join(dict(group.assignment), dict(nxt.assignment), member)
        elif not joins and member in members:
            nxt = group.leave(member)
            expected = uniform(dict.fromkeys(members - {member}, topics), counts, group.assignment)
            check_leave(dict(group.assignment), dict(nxt.assignment), member)
        else:
            continue
        assert same(dict(nxt.assignment), expected)
        # The classes are the members by size, in member order: what the next step relies on.
        assert {m for ms in nxt.classes.values() for m in ms} == set(nxt.assignment)
        for size, ms in nxt.classes.items():
            assert ms and all(totals(dict(nxt.assignment))[m] == size for m in ms)
        group = nxt


# --- worked examples ----------------------------------------------------------------------------------------------


def test_issue_16_three_members_ten_one_partition_topics() -> None:
    topics = frozenset(f"t{i}" for i in range(10))
    result = uniform(dict.fromkeys("abc", topics), dict.fromkeys(topics, 1))
    assert sorted(totals(result).values()) == [3, 3, 4]


def test_issue_16_twenty_members_a_hundred_topics_of_four() -> None:
    topics = frozenset(f"topic-{i:03d}" for i in range(100))
    members = [f"m{i:02d}" for i in range(20)]
    result = uniform(dict.fromkeys(members, topics), dict.fromkeys(topics, 4))
    assert set(totals(result).values()) == {20}
    # Each member's 20 partitions are spread over 20 topics (the deal is a round-robin), not bunched in five.
    assert all(len(h) == 20 for h in result.values())


def test_kafka_javadoc_overlapping_subscriptions_end_nearly_balanced() -> None:
    result = uniform({"m1": {"A"}, "m2": {"A", "B"}, "m3": {"B"}}, {"A": 15, "B": 15})
    assert totals(result) == {"m1": 9, "m2": 10, "m3": 11}
    check_balanced({"m1": frozenset({"A"}), "m2": frozenset({"A", "B"}), "m3": frozenset({"B"})}, result)


def test_members_with_no_topic_or_empty_topics_get_nothing_and_do_not_make_a_group_heterogeneous() -> None:
    result = uniform({"a": {"t", "empty"}, "b": {"t"}, "c": set()}, {"t": 4, "empty": 0})
    assert totals(result) == {"a": 2, "b": 2, "c": 0}
    assert uniform({"a": {"t", "empty"}, "b": {"t"}}, {"t": 3, "empty": 0}, {}) == uniform(
        {"a": {"t"}, "b": {"t"}}, {"t": 3}
    )


def test_a_partition_claimed_twice_stays_with_the_first_member_in_member_order() -> None:
    current = {"b": {"t": frozenset({0, 1})}, "a": {"t": frozenset({1})}}
    result = uniform({"a": {"t"}, "b": {"t"}}, {"t": 2}, current)
    assert result == {"a": {"t": frozenset({1})}, "b": {"t": frozenset({0})}}


def test_incremental_refuses_a_member_twice_or_an_unknown_leaver() -> None:
    group = UniformGroup.start(["a"], {"t": 3})
    with pytest.raises(ConfigurationError, match="already"):
        group.join("a")
    with pytest.raises(ConfigurationError, match="not in the group"):
        group.leave("b")
    with pytest.raises(ConfigurationError, match="negative"):
        uniform({"a": {"t"}}, {"t": -1})


# --- each check can fail ------------------------------------------------------------------------------------------


def test_checks_can_fail_balance_on_the_per_topic_rule_of_the_replaced_sticky() -> None:
    # The replaced sticky assignor balanced each topic on its own over its threads: with no previous owners it was
    # range, which gives every one-partition topic to the first member.
    topics = frozenset(f"t{i}" for i in range(10))
    per_topic: GroupAssignment = {"a": {t: frozenset({0}) for t in topics}, "b": {}, "c": {}}
    check_valid(dict.fromkeys("abc", topics), dict.fromkeys(topics, 1), per_topic)  # valid ...
    with pytest.raises(AssertionError):
        check_fully_balanced(per_topic)  # ... but 10/0/0
    with pytest.raises(AssertionError):
        check_balanced(dict.fromkeys("abc", topics), per_topic)


def test_checks_can_fail_validity() -> None:
    subs = {"a": frozenset({"t"}), "b": frozenset({"u"})}
    partitions = {"t": 2, "u": 1}
    good: GroupAssignment = {"a": {"t": frozenset({0, 1})}, "b": {"u": frozenset({0})}}
    check_valid(subs, partitions, good)
    bads: list[GroupAssignment] = [
        {"a": {"t": frozenset({0})}, "b": {"u": frozenset({0})}},  # t-1 unassigned
        {"a": {"t": frozenset({0, 1}), "u": frozenset({0})}, "b": {}},  # a is not on u
        {"a": {"t": frozenset({0, 1})}, "b": {"u": frozenset({0, 1})}},  # u-1 does not exist
        {"a": {"t": frozenset({0, 1})}},  # b missing
    ]
    for bad in bads:
        with pytest.raises(AssertionError):
            check_valid(subs, partitions, bad)


def test_checks_can_fail_stickiness() -> None:
    before: GroupAssignment = {"a": {"t": frozenset({0, 1, 2})}, "b": {"t": frozenset({3, 4, 5})}}
    # A from-scratch recompute after c joins moves more than c's share.
    scratch = uniform(dict.fromkeys("abc", frozenset({"t"})), {"t": 6})
    with pytest.raises(AssertionError):
        check_join(before, scratch, "c")
    with pytest.raises(AssertionError):
        check_sticky({m: dict(h) for m, h in before.items()}, scratch, {"t": 6})
    # After b leaves, a result that also moves one of a's partitions is not a leave's.
    with pytest.raises(AssertionError):
        check_leave({**before, "c": {}}, {"a": {"t": frozenset({0, 1, 3})}, "c": {"t": frozenset({2, 4, 5})}}, "b")
