"""The rebalance benchmark's ``consumer`` protocol (KIP-848) and rolling restart, on hand-made journal events: when a
group counts as settled (the group written stable for the newest epoch, not when the partitions are fetched), what a
change commanded, the spurious aborts not counted, the ratios over the consumer protocol, who sent the requests
(``cons``), and which partitions a restart moved."""

from __future__ import annotations

import itertools
from dataclasses import asdict
from typing import Any

import pytest

from tests.unit.test_bench_timeline_report import _document
from zkcoord.bench.rebalance.config import BenchConfig
from zkcoord.bench.rebalance.events import Event
from zkcoord.bench.rebalance.measures import aborted, breakdown, commands, comparison
from zkcoord.bench.rebalance.report import format_report
from zkcoord.bench.rebalance.rolling import Restart, moved_partitions, summarize
from zkcoord.bench.rebalance.sessions import Sessions, by_role, read_sessions
from zkcoord.bench.rebalance.timeline import CONSUMER, GroupTracker
from zkcoord.errors import ConfigurationError

_SEQ = itertools.count(1)
A, B, C = "g_h-1-aaaa", "g_h-1-bbbb", "g_h-1-cccc"
P = 6


def _ev(ts: int, ev: str, pid: int = 1, **fields: Any) -> Event:
    return Event(ts, pid, next(_SEQ), ev, {"group": "g", **fields})


def _fetch(ts: int, started: bool, consumer: str, partition: int) -> Event:
    ev = "fetch.started" if started else "fetch.stopped"
    return _ev(ts, ev, pid=2, consumer=consumer, thread=f"{consumer}-0", topic="t", partition=partition)


def _applied(ts: int, consumer: str, option: str, generation: int, partitions: int) -> Event:
    fields = {"consumer": consumer, "option": option, "generation": generation, "partitions": partitions}
    return _ev(ts, "command.applied", pid=2, **fields)


def _sent(ts: int, consumer: str, option: str, generation: int) -> Event:
    return _ev(ts, "command.sent", consumer=consumer, option=option, generation=generation)


def _started(ts: int, epoch: int, members: list[str]) -> Event:
    return _ev(ts, "rebalance.started", generation=epoch, members=members, mode="consumer")


def _formed() -> GroupTracker:
    """A and B, epoch 1 completed: A fetches 0-2, B 3-5."""
    tracker = GroupTracker("g", CONSUMER, "t", P)
    tracker.set_members([A, B])
    events = [_ev(1, "rebalance.requested"), _started(2, 1, [A, B])]
    events += [_fetch(3, True, A, p) for p in range(3)] + [_fetch(3, True, B, p) for p in range(3, 6)]
    events.append(_ev(4, "rebalance.completed", generation=1))
    for event in events:
        tracker.apply(event)
    assert tracker.settled(), tracker.progress()
    return tracker


def _join_c() -> list[Event]:
    """C joins: epoch 2; A revokes 2, B revokes 5, C is granted them; then the group is written stable."""
    return [
        _ev(100, "rebalance.requested"),
        _ev(101, "rebalance.aborted", generation=1),  # the engine's spurious abort of a completed epoch
        _started(101, 2, [A, B, C]),
        _sent(102, A, "stop-fetcher", 2),
        _sent(102, B, "stop-fetcher", 2),
        _sent(102, C, "start-fetcher", 2),  # its empty assignment, announced
        _applied(103, C, "start-fetcher", 2, 0),
        _fetch(104, False, A, 2),
        _applied(105, A, "stop-fetcher", 2, 1),
        _sent(106, C, "start-fetcher", 2),
        _fetch(107, True, C, 2),
        _applied(107, C, "start-fetcher", 2, 1),
        _fetch(108, False, B, 5),
        _applied(109, B, "stop-fetcher", 2, 1),
        _sent(110, C, "start-fetcher", 2),
        _fetch(111, True, C, 5),  # every member fetches its new share from here
        _applied(111, C, "start-fetcher", 2, 1),
        _ev(115, "rebalance.completed", generation=2),  # the group written stable: the end
    ]


def test_a_join_settles_when_the_group_is_written_stable_not_when_the_partitions_are_fetched() -> None:
    tracker = _formed()
    tracker.set_members([A, B, C])
    tracker.arm()
    events = _join_c()
    for event in events[:-1]:
        tracker.apply(event)
        assert tracker.settled_at is None, (event, tracker.progress())
    assert tracker.fetching_at is not None and tracker.fetching_at.ts == 111
    tracker.apply(events[-1])
    assert tracker.settled_at is events[-1] and tracker.settled_generation == 2
    assert breakdown(tracker, events, since=100, end=115) == {
        "requested": 0,
        "started": 1,
        "stop_applied_first": 5,
        "stop_applied_last": 9,
        "barrier": None,
        "start_applied_first": 3,
        "start_applied_last": 11,
        "completed": 15,
        "fetching": 11,
    }
    assert commands(tracker, events, 115) == {
        "mode": "consumer",
        "commanded": 3,
        "moved_partitions": 2,  # what the incremental starts added
        "stopped_partitions": 2,
    }
    # The abort of epoch 1 (completed before) is none; one of an epoch that never completed is.
    assert aborted(events, tracker.events) == 0
    assert aborted([_ev(120, "rebalance.aborted", generation=3)], tracker.events) == 1


def test_not_settled_on_the_completion_of_an_older_epoch_or_of_other_members() -> None:
    tracker = _formed()
    tracker.set_members([A, B, C])
    tracker.arm()
    tracker.apply(_ev(100, "rebalance.requested"))
    assert not tracker.settled()  # epoch 1 is complete, but it is of A and B
    tracker.apply(_started(101, 2, [A, B, C]))
    tracker.apply(_ev(102, "rebalance.completed", generation=1))  # late, of the old epoch
    assert not tracker.settled()
    # C left again before epoch 2 completed; epoch 3 is of A and B again.
    tracker.set_members([A, B])
    tracker.apply(_started(103, 3, [A, B]))
    tracker.apply(_ev(104, "rebalance.completed", generation=2))
    assert tracker.settled_at is None
    done = _ev(105, "rebalance.completed", generation=3)
    tracker.apply(done)
    assert tracker.settled_at is done


def test_not_settled_while_a_partition_is_fetched_twice_even_if_the_group_is_stable() -> None:
    tracker = _formed()
    tracker.set_members([A, B, C])
    tracker.arm()
    events = _join_c()
    a_stops = events.pop(7)
    assert a_stops.ev == "fetch.stopped" and a_stops.fields["partition"] == 2
    for event in events:
        tracker.apply(event)
    assert tracker.settled_at is None and "1 not fetched by exactly one member" in tracker.progress()
    tracker.apply(_fetch(116, False, A, 2))
    assert tracker.settled()


def _row(protocol: str, kind: str, p50: float | None) -> dict[str, Any]:
    return {"protocol": protocol, "kind": kind, "latency_ms": None if p50 is None else {"p50": p50}}


def test_comparison_has_the_ratios_over_the_consumer_protocol() -> None:
    rows = [_row("consumer", "join", 20), _row("incremental", "join", 30), _row("zk-client", "join", 1500)]
    ratios = comparison(rows)
    assert ratios["join_legacy_over_consumer"] == 75.0
    assert ratios["join_incremental_over_consumer"] == 1.5
    assert ratios["leave_legacy_over_consumer"] is None


def test_requests_by_role_from_the_servers_per_session_counters() -> None:
    coordinator, joiner, member, leaver = 0x10, 0x20, 0x30, 0x40
    quiet = Sessions(0.0, {coordinator: 100, member: 50, leaver: 10})
    before = Sessions(1.0, {coordinator: 110, member: 52, leaver: 10})  # background: 10/s and 2/s
    after = Sessions(1.5, {coordinator: 140, member: 60, joiner: 30})
    roles = {"coordinator": {coordinator}, "subject": {joiner}, "members": {member}}
    assert by_role(quiet, before, after, roles, total=100.0, groups=1) == {
        "coordinator": 25.0,  # 30 less 5 of background
        "subject": 30.0,  # a new session: from 0
        "members": 7.0,
        "other": 38.0,
    }
    # A leaver's session is gone by the second reading: unknown, counted in "other".
    gone = by_role(quiet, before, after, {"subject": {leaver}}, total=10.0, groups=1)
    assert gone["subject"] is None and gone["other"] == 10.0
    assert set(by_role(None, before, after, roles, total=1.0, groups=1).values()) == {None}


def test_read_sessions_parses_cons_and_a_refusal_gives_none(monkeypatch: pytest.MonkeyPatch) -> None:
    reply = (
        " /127.0.0.1:50022[1](queued=0,recved=2,sent=2,sid=0x10002cf039f0000,lop=CREA,est=1795686758382,to=6000)\n"
        " /127.0.0.1:50030[0](queued=0,recved=1,sent=0)\n\n"
    )
    monkeypatch.setattr("zkcoord.bench.rebalance.sessions.four_letter_word", lambda *_a, **_k: reply)
    got = read_sessions("127.0.0.1", 1, at=5.0)
    assert got is not None and got.received == {0x10002CF039F0000: 2} and got.at == 5.0
    refused = "cons is not executed because it is not in the whitelist.\n"
    monkeypatch.setattr("zkcoord.bench.rebalance.sessions.four_letter_word", lambda *_a, **_k: refused)
    assert read_sessions("127.0.0.1", 1, at=5.0) is None


def test_a_restart_moves_nothing_when_the_new_consumer_of_the_instance_takes_the_partitions() -> None:
    old, new, other = "g_h-1-old", "g_h-2-new", "g_h-1-oth"
    instances = {old: "i000", new: "i000", other: "i001"}
    before = ["i000", "i000", "i001"]
    window = [_fetch(1, False, old, 0), _fetch(1, False, old, 1), _fetch(5, True, new, 0), _fetch(5, True, new, 1)]
    now = [{(new, f"{new}-0")}, {(new, f"{new}-0")}, {(other, f"{other}-0")}]
    assert moved_partitions(window, "t", before, now, instances) == set()
    # The other member took partition 1 for a moment (a rebalance), or holds it at the end: moved.
    blip = [*window, _fetch(3, True, other, 1), _fetch(4, False, other, 1)]
    assert moved_partitions(blip, "t", before, now, instances) == {1}
    taken = [now[0], {(other, f"{other}-0")}, now[2]]
    assert moved_partitions(window, "t", before, taken, instances) == {1}
    unfetched = [now[0], set(), now[2]]
    assert moved_partitions(window, "t", before, unfetched, instances) == {1}


def _restart(moved: int, gap: int) -> Restart:
    return Restart(
        index=0, instance_id="i000", previous="a", consumer="b", completed=True, replaced=True,
        partitions_before=2, partitions_after=2, moved=moved, gap_ms=gap, stw_ms=0, unfetched_partition_ms=gap,
        back_ms=gap, stable_ms=gap + 5, closed_ms=50.0, started_ms=20.0, epoch_bumps=0, disturbed=0,
        zk_requests=70.0, zk_requests_by_role={"coordinator": 20.0, "subject": 40.0, "members": 0.0, "other": 10.0},
    )  # fmt: skip


def test_the_summary_says_whether_a_partition_moved_and_whether_the_gap_stayed_under_the_session_timeout() -> None:
    good = summarize([_restart(0, 150), _restart(0, 250)], session_timeout_s=6.0)
    assert good["no_partition_moved"] and good["gap_under_session_timeout"]
    assert good["gap_ms"] is not None and good["gap_ms"]["max"] == 250
    assert good["longest_gap_over_session_timeout"] == round(250 / 6000, 3)
    assert good["zk_requests_by_role_p50"]["subject"] == 40.0
    bad = summarize([_restart(0, 150), _restart(3, 7000)], session_timeout_s=6.0)
    assert not bad["no_partition_moved"] and bad["moved_partitions"] == 3 and bad["restarts_with_moves"] == 1
    assert bad["gap_under_session_timeout"] is False


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"scenarios": ("rolling-restart",), "protocols": ("incremental",)}, "add --protocol consumer"),
        ({"scenarios": ("rolling-restart",), "protocols": ("consumer", "zk-client")}, "not zk-client"),
        ({"scenarios": ("join-leave",), "protocols": ("consumer",), "restarts": 2}, "--restarts needs"),
        ({"scenarios": ("rolling-restart",), "protocols": ("consumer",), "restarts": 51}, "within 1..50"),
        ({"scenarios": ("rolling-restart", "rolling-restart"), "protocols": ("consumer",)}, "each --scenario once"),
        ({"scenarios": ("restart",), "protocols": ("consumer",)}, "unknown scenario 'restart'"),
    ],
)
def test_bad_scenario_settings_are_refused(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        BenchConfig(consumers=50, **settings)
    BenchConfig(protocols=("consumer",), scenarios=("rolling-restart",), restarts=50)  # the boundary is fine


def test_the_report_shows_the_consumer_rows_the_requests_by_role_and_the_rolling_restart() -> None:
    doc = _document()
    doc["config"]["protocols"].insert(2, "consumer")
    for kind, p50 in (("join", 60.0), ("leave", 40.0)):
        row = {**next(r for r in doc["summary"] if r["protocol"] == "incremental" and r["kind"] == kind)}
        row |= {"protocol": "consumer", "latency_ms": {"n": 1, "p50": p50, "p95": p50, "max": p50, "mean": p50}}
        row |= {"breakdown_ms_p50": {"started": 9.0, "fetching": p50 - 6, "completed": p50}, "acks_p50": 9.0}
        row |= {"member_steps_p50": 40.0, "zk_requests_by_role_p50": {"coordinator": 30.0, "subject": 45.0}}
        doc["summary"].append(row)
    doc["comparison"] = comparison(doc["summary"])
    restarts = [_restart(0, 150), _restart(0, 210)]
    doc["rolling_restart"] = {
        "consumers": 2, "partitions": 4, "formed": True, "form_s": 1.5,
        "restarts": [asdict(r) for r in restarts], "summary": summarize(restarts, 6.0),
    }  # fmt: skip
    text = format_report(doc)
    assert "join: the zk-client p50 is 25x the consumer's." in text
    assert "join: the incremental p50 is 2x the consumer's." in text
    assert "consumer: when each step happened" in text and "all fetch" in text
    lines = text.splitlines()
    section = lines[next(i for i, line in enumerate(lines) if line.startswith("ZooKeeper requests per change")) :]
    roles = next(line for line in section if line.strip().startswith("consumer    join"))
    assert roles.split()[2:] == ["100", "30", "45", "-", "-", "9", "40"]  # total, coord, subject, ..., acks, steps
    assert "partitions moved to another member: 0 (none)" in text
    assert "max 210 ms, under the session timeout (6000 ms)" in text
