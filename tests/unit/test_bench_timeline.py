"""The rebalance benchmark's ``incremental`` protocol on hand-made journal events: when a group counts as settled
(``GroupTracker``), what a change commanded (``measures.commands``), the breakdown and the comparison's ratios, and
the report and plots with three protocols side by side."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from zkcoord.bench.rebalance.measures import breakdown, commands, comparison
from zkcoord.bench.rebalance.timeline import (
    CLASSIC,
    CONSUMER,
    COORDINATOR,
    INCREMENTAL,
    LEGACY,
    PROTOCOLS,
    Event,
    GroupTracker,
)

_SEQ = itertools.count(1)
A, B, C = "g_h-1-aaaa", "g_h-1-bbbb", "g_h-1-cccc"
P = 6  # partitions: 3 + 3 over A, B; 2 + 2 + 2 once C joined


def _ev(ts: int, ev: str, pid: int = 1, **fields: Any) -> Event:
    return Event(ts, pid, next(_SEQ), ev, {"group": "g", **fields})


def _fetch(ts: int, started: bool, consumer: str, partition: int) -> Event:
    ev = "fetch.started" if started else "fetch.stopped"
    return _ev(ts, ev, pid=2, consumer=consumer, thread=f"{consumer}-0", topic="t", partition=partition)


def _sent(ts: int, consumer: str, option: str, generation: int, partitions: int = 0) -> Event:
    return _ev(ts, "command.sent", consumer=consumer, option=option, generation=generation, partitions=partitions)


def _applied(ts: int, consumer: str, option: str, generation: int, partitions: int = 0) -> Event:
    fields = {"consumer": consumer, "option": option, "generation": generation, "partitions": partitions}
    return _ev(ts, "command.applied", pid=2, **fields)


def _started(
    ts: int, generation: int, members: list[str], mode: str = "incremental", gaining: list[str] | None = None
) -> Event:
    if mode != "incremental":
        return _ev(ts, "rebalance.started", generation=generation, members=members, mode=mode)
    return _ev(ts, "rebalance.started", generation=generation, members=members, mode=mode, gaining=gaining or [])


def _completed(ts: int, generation: int, moved: int = 0) -> Event:
    return _ev(ts, "rebalance.completed", generation=generation, moved=moved)


def _formed(protocol: str = INCREMENTAL) -> GroupTracker:
    """A group of A (partitions 0-2) and B (3-5), formed by an eager generation 1, settled."""
    tracker = GroupTracker("g", protocol, "t", P)
    tracker.set_members([A, B])
    events = [_ev(1, "rebalance.requested"), _started(2, 1, [A, B], mode="eager")]
    for consumer in (A, B):
        events += [_sent(3, consumer, "stop-fetcher", 1), _applied(4, consumer, "stop-fetcher", 1)]
    events.append(_ev(5, "rebalance.barrier", generation=1))
    for consumer, parts in ((A, range(3)), (B, range(3, 6))):
        events.append(_sent(6, consumer, "start-fetcher", 1, partitions=3))
        events += [_fetch(7, True, consumer, p) for p in parts]
        events.append(_applied(8, consumer, "start-fetcher", 1, partitions=3))
    events.append(_completed(9, 1, moved=6))
    for event in events:
        tracker.apply(event)
    assert tracker.settled(), tracker.progress()
    return tracker


def _join_c() -> list[Event]:
    """C joins: generation 2, incremental; A gives up partition 2, B partition 5, C starts both."""
    return [
        _ev(100, "rebalance.requested"),
        _started(101, 2, [A, B, C], gaining=[C]),
        _sent(102, A, "stop-fetcher", 2, partitions=1),
        _sent(102, B, "stop-fetcher", 2, partitions=1),
        _fetch(103, False, A, 2),
        _applied(104, A, "stop-fetcher", 2, partitions=1),
        _fetch(105, False, B, 5),
        _applied(106, B, "stop-fetcher", 2, partitions=1),
        _ev(107, "rebalance.barrier", generation=2),
        _sent(108, C, "start-fetcher", 2, partitions=2),
        _fetch(109, True, C, 2),
        _fetch(110, True, C, 5),
        _completed(111, 2, moved=2),
        _applied(112, C, "start-fetcher", 2, partitions=2),
    ]


def settled_at(tracker: GroupTracker) -> Event | None:
    """``tracker.settled_at``, read through a call (an assert on the attribute would narrow it for mypy)."""
    return tracker.settled_at


def _replay(tracker: GroupTracker, events: list[Event]) -> None:
    for event in events:
        tracker.apply(event)


def _joining(protocol: str = INCREMENTAL) -> GroupTracker:
    tracker = _formed(protocol)
    tracker.set_members([A, B, C])
    tracker.arm()
    return tracker


def test_protocols_list_incremental_classic_and_consumer_between_the_coordinator_and_the_legacy_one() -> None:
    assert PROTOCOLS == (COORDINATOR, INCREMENTAL, CLASSIC, CONSUMER, LEGACY)


def test_incremental_settles_at_the_last_missing_event_and_only_then() -> None:
    tracker = _joining()
    assert not tracker.settled()  # C is a member and fetches nothing
    events = _join_c()
    for event in events[:-1]:
        tracker.apply(event)
        assert tracker.settled_at is None, (event, tracker.progress())
    tracker.apply(events[-1])  # C's start-fetcher applied: the last condition
    assert settled_at(tracker) is events[-1] and tracker.settled()
    assert tracker.settled_generation == 2
    # A and B were sent no start-fetcher in generation 2: they did not hold the group up.
    assert "0 members without its start" in tracker.progress()


def test_untouched_members_get_no_command_and_do_not_hold_the_group_up() -> None:
    tracker = _formed()
    tracker.set_members([A, B])
    tracker.arm()
    # A rebalance of the same members that moves nothing (e.g. after a retry elsewhere): no commands at all.
    started = _started(11, 2, [A, B])
    _replay(tracker, [_ev(10, "rebalance.requested")])
    assert not tracker.settled()  # a request is pending
    tracker.apply(started)
    # Every member fetches its share and nobody is due a start: settled without waiting for rebalance.completed.
    assert settled_at(tracker) is started


def test_the_coordinator_criterion_is_unchanged_every_member_applies_the_range_assignment() -> None:
    tracker = _joining(COORDINATOR)
    _replay(tracker, _join_c())
    # Range over A, B, C gives A 0-1, B 2-3, C 4-5; and A and B never applied a start of generation 2.
    assert tracker.settled_at is None and not tracker.settled()


@pytest.mark.parametrize("missing", [10, 11], ids=["unfetched", "half-moved"])
def test_not_settled_while_a_moved_partition_is_not_fetched(missing: int) -> None:
    tracker = _joining()
    events = _join_c()
    held = events.pop(missing)  # C's fetch.started of partition 2 or 5
    _replay(tracker, events)
    assert tracker.settled_at is None
    assert "1 not fetched by exactly one member" in tracker.progress()
    tracker.apply(held)
    assert settled_at(tracker) is held


def test_not_settled_while_a_moved_partition_is_fetched_twice() -> None:
    tracker = _joining()
    events = _join_c()
    b_stops = events.pop(6)  # B stops partition 5 only after C started it
    assert b_stops.ev == "fetch.stopped" and b_stops.fields["partition"] == 5
    _replay(tracker, events)
    assert tracker.settled_at is None
    late = _fetch(120, False, B, 5)
    tracker.apply(late)
    assert settled_at(tracker) is late


def test_not_settled_while_a_commanded_member_has_not_applied_its_start() -> None:
    tracker = _joining()
    events = _join_c()
    applied = events.pop()
    _replay(tracker, events)
    # Every partition is fetched once and the shares are balanced, the generation completed: C's start is missing.
    assert tracker.settled_at is None
    assert "1 members without its start" in tracker.progress()
    tracker.apply(applied)
    assert settled_at(tracker) is applied


def test_command_applied_read_before_command_sent_counts() -> None:
    tracker = _joining()
    events = _join_c()
    applied = events.pop()
    sent_at = next(i for i, e in enumerate(events) if e.ev == "command.sent" and e.fields["option"] == "start-fetcher")
    events.insert(sent_at, applied)  # read first (another process, the same millisecond)
    _replay(tracker, events)
    last_fetch = next(e for e in reversed(events) if e.ev == "fetch.started")
    assert settled_at(tracker) is last_fetch and tracker.settled()
    # Even before the generation's rebalance.started: the sets are kept per generation.
    early = _joining()
    order = [_applied(100, C, "start-fetcher", 2), *(e for e in _join_c()[:-1])]
    _replay(early, order)
    assert settled_at(early) is next(e for e in reversed(order) if e.ev == "fetch.started")


def test_not_settled_while_the_shares_are_unbalanced() -> None:
    tracker = _joining()
    # The coordinator moves only partition 2 to C: A 2, B 3, C 1 (6 over 3 members: 2 each).
    events = [
        _ev(100, "rebalance.requested"),
        _started(101, 2, [A, B, C]),
        _sent(102, A, "stop-fetcher", 2, partitions=1),
        _fetch(103, False, A, 2),
        _applied(104, A, "stop-fetcher", 2, partitions=1),
        _sent(105, C, "start-fetcher", 2, partitions=1),
        _fetch(106, True, C, 2),
        _applied(107, C, "start-fetcher", 2, partitions=1),
        _completed(108, 2, moved=1),
    ]
    _replay(tracker, events)
    assert tracker.settled_at is None
    assert "2 members with an unbalanced share" in tracker.progress()


def test_not_settled_while_a_member_that_left_still_fetches_or_the_generation_is_stale() -> None:
    tracker = _joining()
    _replay(tracker, _join_c())
    assert tracker.settled()
    # C leaves: until the coordinator rebalances, its partitions are fetched by a non-member.
    tracker.set_members([A, B])
    tracker.arm()
    assert not tracker.settled()
    leave = [
        _ev(200, "consumer.deregistered", consumer=C),
        _fetch(201, False, C, 2),
        _fetch(201, False, C, 5),
        _ev(202, "rebalance.requested"),
    ]
    _replay(tracker, leave)
    assert not tracker.settled()  # nothing fetches 2 and 5; a request is pending
    stale = [_fetch(203, True, A, 2), _fetch(203, True, B, 5)]  # as if they had been given them back, no rebalance
    _replay(tracker, stale)
    assert not tracker.settled()  # the pending request, and generation 2's members are A, B, C
    gen3 = [
        _started(210, 3, [A, B], gaining=[A, B]),
        _sent(211, A, "start-fetcher", 3, partitions=3),
        _sent(211, B, "start-fetcher", 3, partitions=3),
        _applied(212, A, "start-fetcher", 3, partitions=3),
        _completed(214, 3, moved=2),
    ]
    _replay(tracker, gen3)
    assert tracker.settled_at is None  # B's start of generation 3 is not applied
    last = _applied(215, B, "start-fetcher", 3, partitions=3)
    tracker.apply(last)
    assert settled_at(tracker) is last and tracker.settled_generation == 3


def test_not_settled_while_a_consumer_that_left_still_fetches_a_partition_given_to_a_member() -> None:
    tracker = _joining()
    _replay(tracker, _join_c())
    tracker.set_members([A, B])
    tracker.arm()
    # C's session is slow to close: the coordinator hands its partitions over before C stops fetching 5.
    events = [
        _ev(200, "consumer.deregistered", consumer=C),
        _fetch(201, False, C, 2),
        _ev(202, "rebalance.requested"),
        _started(210, 3, [A, B], gaining=[A, B]),
        _sent(211, A, "start-fetcher", 3, partitions=3),
        _sent(211, B, "start-fetcher", 3, partitions=3),
        _fetch(212, True, A, 2),
        _fetch(212, True, B, 5),
        _applied(213, A, "start-fetcher", 3, partitions=3),
        _applied(213, B, "start-fetcher", 3, partitions=3),
        _completed(214, 3, moved=2),
    ]
    _replay(tracker, events)
    # The members' shares are balanced (3 and 3) and every command applied: partition 5 is fetched twice.
    assert tracker.settled_at is None
    assert "1 not fetched by exactly one member" in tracker.progress()
    last = _fetch(230, False, C, 5)
    tracker.apply(last)
    assert settled_at(tracker) is last


def test_not_settled_while_a_partition_is_fetched_twice_with_balanced_shares() -> None:
    # 7 partitions over 3 members: shares of 2 or 3.  A 3, B 3, C 2 add up to 8: one partition is fetched twice.
    tracker = GroupTracker("g", INCREMENTAL, "t", 7)
    tracker.set_members([A, B, C])
    events = [_started(1, 1, [A, B, C], mode="eager")]
    for consumer, parts in ((A, [0, 1, 2]), (B, [3, 4, 2]), (C, [5, 6])):
        events.append(_sent(2, consumer, "start-fetcher", 1))
        events += [_fetch(3, True, consumer, p) for p in parts]
        events.append(_applied(4, consumer, "start-fetcher", 1))
    events.append(_completed(5, 1))
    _replay(tracker, events)
    assert not tracker.settled()
    tracker.arm()
    tracker.apply(_fetch(6, False, B, 2))
    assert tracker.settled()


def test_not_settled_while_a_partition_is_fetched_only_by_a_consumer_that_is_not_a_member() -> None:
    # 7 partitions over A and B: shares of 3 or 4.  A 3 and B 3 are balanced; partition 6 is C's, which left.
    tracker = GroupTracker("g", INCREMENTAL, "t", 7)
    tracker.set_members([A, B])
    events = [_started(1, 1, [A, B], mode="eager"), _fetch(1, True, C, 6)]
    for consumer, parts in ((A, [0, 1, 2]), (B, [3, 4, 5])):
        events.append(_sent(2, consumer, "start-fetcher", 1))
        events += [_fetch(3, True, consumer, p) for p in parts]
        events.append(_applied(4, consumer, "start-fetcher", 1))
    events.append(_completed(5, 1))
    _replay(tracker, events)
    assert not tracker.settled()
    tracker.arm()
    _replay(tracker, [_fetch(6, False, C, 6), _fetch(7, True, A, 6)])
    assert tracker.settled()


def test_not_settled_on_a_generation_of_other_members() -> None:
    tracker = _formed()
    tracker.arm()
    # C registered and left again before the coordinator read the members: generation 2 has A, B and C.
    _replay(tracker, [_ev(10, "rebalance.requested"), _started(11, 2, [A, B, C]), _completed(12, 2)])
    assert not tracker.settled()
    tracker.apply(_ev(13, "rebalance.requested"))
    assert not tracker.settled()
    started = _started(14, 3, [A, B])  # moves nothing: nobody is due a start
    tracker.apply(started)
    assert settled_at(tracker) is started


def test_a_retry_is_eager_every_member_must_apply_its_start() -> None:
    tracker = _joining()
    events = [*_join_c()[:2], _ev(150, "rebalance.retrying", generation=2), _started(151, 3, [A, B, C], "eager")]
    for consumer, parts in ((A, [0, 1, 2]), (B, [3, 4, 5])):
        events.append(_sent(152, consumer, "stop-fetcher", 3, partitions=3))
        events += [_fetch(153, False, consumer, p) for p in parts]
        events.append(_applied(154, consumer, "stop-fetcher", 3, partitions=3))
    for consumer, parts in ((A, [0, 1]), (B, [2, 3]), (C, [4, 5])):
        events.append(_sent(160, consumer, "start-fetcher", 3, partitions=2))
        events += [_fetch(161, True, consumer, p) for p in parts]
    events.append(_completed(162, 3, moved=6))
    events += [_applied(163, A, "start-fetcher", 3, partitions=2), _applied(163, C, "start-fetcher", 3, partitions=2)]
    _replay(tracker, events)
    assert tracker.settled_at is None  # B was sent a start of generation 3 and has not applied it
    last = _applied(164, B, "start-fetcher", 3, partitions=2)
    tracker.apply(last)
    assert settled_at(tracker) is last


# --- measures -----------------------------------------------------------------------------------------------------


def test_breakdown_and_commands_of_an_incremental_change() -> None:
    tracker = _joining()
    events = _join_c()
    _replay(tracker, events)
    steps = breakdown(tracker, events, since=100, end=112)
    assert steps == {
        "requested": 0,
        "started": 1,
        "stop_applied_first": 4,
        "stop_applied_last": 6,
        "barrier": 7,
        "start_applied_first": 12,
        "start_applied_last": 12,
        "completed": 11,
    }
    assert commands(tracker, events, 112) == {
        "mode": "incremental",
        "commanded": 3,
        "moved_partitions": 2,
        "stopped_partitions": 2,
    }
    legacy = GroupTracker("g", LEGACY, "t", P)
    assert commands(legacy, [], 0)["commanded"] is None


def _row(protocol: str, kind: str, p50: float | None) -> dict[str, Any]:
    return {"protocol": protocol, "kind": kind, "latency_ms": None if p50 is None else {"p50": p50}}


def test_comparison_has_the_ratios_over_the_incremental_protocol() -> None:
    rows = [
        _row("coordinator", "join", 500),
        _row("incremental", "join", 100),
        _row("zk-client", "join", 1500),
        _row("coordinator", "leave", 400),
        _row("incremental", "leave", None),
        _row("zk-client", "leave", 1200),
    ]
    assert comparison(rows) == {
        "join_legacy_over_coordinator": 3.0,
        "join_legacy_over_incremental": 15.0,
        "join_coordinator_over_incremental": 5.0,
        "leave_legacy_over_coordinator": 3.0,
        "leave_legacy_over_incremental": None,
        "leave_coordinator_over_incremental": None,
        # no consumer protocol in these rows
        "join_legacy_over_consumer": None,
        "join_incremental_over_consumer": None,
        "leave_legacy_over_consumer": None,
        "leave_incremental_over_consumer": None,
        # nor the classic one
        "join_classic_over_coordinator": None,
        "leave_classic_over_coordinator": None,
    }
    with_classic = comparison([*rows, _row("classic", "join", 250)])
    assert with_classic["join_classic_over_coordinator"] == 0.5
    two = comparison([r for r in rows if r["protocol"] != "incremental"])
    assert two["join_legacy_over_coordinator"] == 3.0 and two["join_legacy_over_incremental"] is None


def test_a_start_superseded_while_awaiting_hand_overs_does_not_settle_the_group() -> None:
    """A hand-over's start journalled as superseded (a newer attempt took over while it waited) was not applied as
    planned, even if the partitions it did start make the group look complete for a moment."""
    tracker = _joining()
    events = _join_c()
    applied = events.pop()
    superseded = Event(
        applied.ts, applied.pid, applied.seq, applied.ev, {**applied.fields, "superseded": True, "not_started": 1}
    )
    _replay(tracker, [*events, superseded])
    assert tracker.settled_at is None and not tracker.settled()
    tracker.apply(_applied(113, C, "start-fetcher", 2, partitions=2))
    assert tracker.settled()
