"""The classic protocol's pure rules (seed 001): the strategy vote, the leader, the validity of a leader's assignment,
the shape check of what an assignor returns, the records' codecs, and loading assignors by name."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zkcoord.consumer.assignors import check_assignors, load_assignor
from zkcoord.consumer.config import ConsumerConfig, Subscription
from zkcoord.errors import AssignorError, CodecError, ConfigurationError
from zkcoord.layout.classic import JoinRecord, MemberMetadata, SyncRecord
from zkcoord.layout.registrations import MemberRegistration, Pattern
from zkcoord.protocol.assignors import range_assign
from zkcoord.protocol.classic_group import (
    BUILTINS,
    as_assignment,
    assignment_problems,
    choose_leader,
    choose_strategy,
)

NAMES = st.sampled_from(["range", "roundrobin", "sticky", "a.b:C", "x"])
PREFS = st.dictionaries(
    st.sampled_from([f"g_h-1-{i:08x}" for i in range(6)]),
    st.lists(NAMES, min_size=1, max_size=4, unique=True),
    min_size=1,
    max_size=6,
)


def test_a_rolling_upgrade_keeps_the_old_strategy_until_every_member_supports_the_new_one() -> None:
    old, new = ["range"], ["roundrobin", "range"]
    assert choose_strategy({"a": old, "b": old}).strategy == "range"  # type: ignore[union-attr]
    half = choose_strategy({"a": new, "b": old})
    assert half is not None and half.strategy == "range" and "not everyone supports: roundrobin" in half.reason
    done = choose_strategy({"a": new, "b": new})
    assert done is not None and done.strategy == "roundrobin" and "roundrobin=2, range=0" in done.reason


def test_the_vote_counts_each_members_first_common_choice() -> None:
    # b and c prefer roundrobin, a prefers range: roundrobin wins 2 to 1 (Kafka's vote, not the first member's choice)
    votes = {"a": ["range", "roundrobin"], "b": ["roundrobin", "range"], "c": ["roundrobin", "sticky", "range"]}
    choice = choose_strategy(votes)
    assert choice is not None and choice.strategy == "roundrobin"
    assert choose_strategy({"a": ["range"], "b": ["roundrobin"]}) is None, "nothing in common"
    assert choose_strategy({}) is None


@settings(max_examples=300, deadline=None)
@given(PREFS, st.randoms(use_true_random=False))
def test_the_chosen_strategy_is_supported_by_all_has_the_most_votes_and_ignores_order(
    prefs: dict[str, list[str]], rnd: random.Random
) -> None:
    choice = choose_strategy(prefs)
    common = set.intersection(*(set(p) for p in prefs.values()))
    if not common:
        assert choice is None
        return
    assert choice is not None and all(choice.strategy in p for p in prefs.values())
    votes = {s: sum(1 for p in prefs.values() if next(x for x in p if x in common) == s) for s in common}
    assert votes[choice.strategy] == max(votes.values())
    items = list(prefs.items())
    rnd.shuffle(items)
    assert choose_strategy(dict(items)) == choice, "independent of the members' order"
    first = {p[0] for p in prefs.values()}
    if len(first) == 1 and first <= common:
        assert choice.strategy in first, "unanimous first choices win"


def test_the_leader_is_kept_then_the_oldest_member_not_failed() -> None:
    members = {"b": 20, "a": 30, "c": 10}
    assert choose_leader(members, None) == "c", "the first to join (smallest czxid)"
    assert choose_leader(members, "a") == "a", "the previous leader is kept while it is a member"
    assert choose_leader(members, "a", frozenset({"a"})) == "c", "unless it failed this rebalance"
    assert choose_leader(members, "gone") == "c"
    assert choose_leader(members, None, frozenset({"c"})) == "b"
    assert choose_leader(members, None, frozenset(members)) == "c", "all failed: the oldest again"
    with pytest.raises(ValueError):
        choose_leader({}, None)


SUBS = {"g_h-1-a": {"t": 2, "u": 1}, "g_h-1-b": {"t": 1}}
PARTS = {"t": 4, "u": 2}


def test_a_valid_assignment_has_no_problems_and_each_fault_is_named() -> None:
    good = range_assign(SUBS, PARTS)
    assert assignment_problems(good, SUBS, PARTS) == []
    missing = {"t": dict(good["t"]), "u": {0: "g_h-1-a-0"}}
    assert "assigned to nobody" in assignment_problems(missing, SUBS, PARTS)[0]
    extra = {**good, "t": {**good["t"], 9: "g_h-1-a-0"}}
    assert "do not exist" in assignment_problems(extra, SUBS, PARTS)[0]
    stranger = {**good, "u": {0: "g_h-1-zz-0", 1: "g_h-1-a-0"}}
    assert "no current member's" in assignment_problems(stranger, SUBS, PARTS)[0]
    unsubscribed = {**good, "u": {0: "g_h-1-b-0", 1: "g_h-1-a-0"}}
    assert "does not subscribe" in assignment_problems(unsubscribed, SUBS, PARTS)[0]
    threads = {**good, "u": {0: "g_h-1-a-1", 1: "g_h-1-a-0"}}
    assert "thread(s)" in assignment_problems(threads, SUBS, PARTS)[0]
    assert "subscribed by no member" in assignment_problems({**good, "v": {0: "g_h-1-a-0"}}, SUBS, PARTS)[0]


@settings(max_examples=150, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from([f"g_h-1-{i}" for i in range(5)]),
        st.dictionaries(st.sampled_from(["t", "u", "v"]), st.integers(1, 3), min_size=1),
        min_size=1,
    ),
    st.dictionaries(st.sampled_from(["t", "u", "v"]), st.integers(1, 12), min_size=3, max_size=3),
    st.sampled_from(["range", "sticky"]),
)
def test_the_built_in_strategies_compute_valid_assignments(
    subs: dict[str, dict[str, int]], parts: dict[str, int], name: str
) -> None:
    result = as_assignment(BUILTINS[name](subs, parts, {}))
    counts = {t: parts[t] for s in subs.values() for t in s}
    assert assignment_problems(result, subs, counts) == []


@pytest.mark.parametrize(
    "garbage", ["text", None, {"t": [1, 2]}, {"t": {"0": "a-0"}}, {"t": {0: 7}}, {1: {0: "a-0"}}, {"t": {True: "a-0"}}]
)
def test_what_is_not_an_assignment_is_the_assignors_error(garbage: object) -> None:
    with pytest.raises(AssignorError):
        as_assignment(garbage)


def test_the_records_round_trip_and_refuse_what_is_inconsistent() -> None:
    members = {
        "g_h-1-a": MemberMetadata(7, {"t": 1}, ("roundrobin", "range")),
        "g_h-1-b": MemberMetadata(9, {}, ("range",)),
    }
    join = JoinRecord(4, 2, "g_h-1-a", "range", "why", members, {"t": 3}, {"t": {0: "g_h-1-a-0"}})
    back = JoinRecord.decode(join.encode())
    assert back == join and back.leader_incarnation == 7
    with pytest.raises(CodecError, match="not supported by every member"):
        JoinRecord.decode(join.encode().replace(b'"strategy":"range"', b'"strategy":"roundrobin"'))
    with pytest.raises(CodecError, match="not a member"):
        JoinRecord.decode(join.encode().replace(b'"leader":"g_h-1-a"', b'"leader":"g_h-1-z"'))
    sync = SyncRecord(4, "g_h-1-a", "range", {"t": {0: "g_h-1-a-0"}}, 1.25)
    assert SyncRecord.decode(sync.encode()) == sync
    failed = SyncRecord(4, "g_h-1-a", "range", {}, 0.5, "boom")
    assert SyncRecord.decode(failed.encode()).error == "boom"
    for bad in (b"", b"{}", b'{"version":1,"generation":-1,"leader":"x","strategy":"range"}'):
        with pytest.raises(CodecError):
            SyncRecord.decode(bad)


def test_a_classic_registration_names_its_strategies_and_only_it_does() -> None:
    reg = MemberRegistration(Pattern.STATIC, {"t": 1}, 1, assignors=("roundrobin", "range"))
    back = MemberRegistration.decode(reg.encode())
    assert back.classic and back.assignors == ("roundrobin", "range") and b'"protocol":"classic"' in reg.encode()
    assert not MemberRegistration.decode(MemberRegistration(Pattern.STATIC, {"t": 1}, 1).encode()).classic
    base = b'{"version":1,"pattern":"static","subscription":{"t":1},"timestamp":"1"'
    for tail, why in (
        (b',"assignors":["range"]}', "belongs to the classic protocol"),
        (b',"protocol":"classic"}', "strategies must be a list"),
        (b',"protocol":"classic","assignors":["range","range"]}', "listed twice"),
        (b',"protocol":"classic","assignors":["no spaces"]}', "bad strategy name"),
        (b',"protocol":"classic","assignors":["range"],"incremental":true}', "neither"),
    ):
        with pytest.raises(CodecError, match=why):
            MemberRegistration.decode(base + tail)


def test_assignors_load_by_name_and_a_bad_name_is_a_clear_error() -> None:
    assert load_assignor("range") is BUILTINS["range"]
    user = load_assignor("tests.classic_assignors:Flaky")
    assert as_assignment(user({"g_h-1-a": {"t": 1}}, {"t": 2}, {})) == {"t": {0: "g_h-1-a-0", 1: "g_h-1-a-0"}}
    for name, why in (
        ("nope", "unknown assignor"),
        ("no_such_module_here:X", "cannot import"),
        ("tests.classic_assignors:Missing", "has no class"),
        ("zkcoord.errors:ZkCoordError", "has no assign"),
    ):
        with pytest.raises(ConfigurationError, match=why):
            load_assignor(name)
    with pytest.raises(ConfigurationError, match="listed twice"):
        check_assignors(("range", "range"))
    config = {"group": "g", "subscription": Subscription.static({"t": 1}), "zk": "h:1", "data_dir": Path("/tmp")}
    with pytest.raises(ConfigurationError, match="unknown assignor"):
        ConsumerConfig(**config, rebalance="classic", assignors=("nope",))  # type: ignore[arg-type]
    assert ConsumerConfig(**config, rebalance="classic", assignors=("sticky", "range")).assignors  # type: ignore[arg-type]


def test_the_documented_example_assignor_loads_and_computes_valid_sticky_assignments(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.syspath_prepend(str(Path(__file__).parents[2] / "docs" / "examples"))
    assign = load_assignor("sticky_range:StickyRange")
    subs = {"g_h-1-a": {"t": 2}, "g_h-1-b": {"t": 1}}
    first = as_assignment(assign(subs, {"t": 7}, {}))
    assert assignment_problems(first, subs, {"t": 7}) == []
    grown = {**subs, "g_h-1-c": {"t": 1}}
    again = as_assignment(assign(grown, {"t": 9}, first))
    assert assignment_problems(again, grown, {"t": 9}) == []
    assert all(again["t"][p] == t for p, t in first["t"].items()), "every partition kept where it was"
