"""Rebalance latency of consumers sharing one process with an in-process coordinator."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from zkcoord.bench.consumer.common import (
    REBALANCE_MAX_POLL,
    REBALANCE_PARTITIONS,
    SESSION_S,
    BenchError,
    Env,
    Seen,
    percentile,
    summary,
)
from zkcoord.consumer import Consumer, ConsumerConfig, Subscription, TopicPartition
from zkcoord.errors import ZkCoordError, ZkError
from zkcoord.layout import paths
from zkcoord.layout.group_state import GroupPhase, GroupState
from zkcoord.testbed.poll_loop import PollLoop
from zkcoord.zk import ZkClient

log = logging.getLogger(__name__)


# --- rebalance latency ------------------------------------------------------------------------------------------


@dataclass
class Transition:
    consumers: int  # N, the group's size before a join and after a leave
    kind: str  # "join" or "leave"
    trial: int
    generation: int
    attempts: int  # rebalances started for the group during the transition
    latency_ms: float  # trigger (member znode created / deleted) -> last consumer applied the start
    from_call_ms: float  # Consumer.start() / close() called -> last consumer applied the start
    watch_ms: float  # trigger -> rebalance.requested
    plan_ms: float  # requested -> rebalance.started (queue, group read, plan)
    stop_ms: float  # started -> rebalance.barrier (the coordinator has seen every stop acknowledged)
    stop_first_ms: float  # started -> the first consumer applied its stop-fetcher
    stop_last_ms: float  # started -> the last consumer applied its stop-fetcher
    start_ms: float  # barrier -> the last consumer applied its start-fetcher
    start_first_ms: float  # barrier -> the first consumer applied its start-fetcher
    spread_ms: float  # first start applied -> last start applied
    coordinator_ms: float  # requested -> rebalance.completed (the coordinator's own latency)


def read_state(admin: ZkClient, group: str) -> GroupState | None:
    try:
        data, _ = admin.get(paths.group_state(group))
    except ZkError:
        return None
    return GroupState.decode(data, paths.group_state(group))


def rebalance_progress(group: str, expected: set[str]) -> Callable[[list[Seen]], int | None]:
    """A check for :meth:`Recorder.wait`: the generation of the newest rebalance of ``group`` once it completed
    with exactly ``expected`` as members.  Raises on a failed rebalance."""

    def check(seen: list[Seen]) -> int | None:
        started: dict[int, Seen] = {}
        completed: set[int] = set()
        for s in seen:
            if s.fields.get("group") != group:
                continue
            if s.event == "rebalance.failed":
                raise BenchError(f"group {group}: rebalance failed: {s.fields.get('reason')}")
            if s.event == "rebalance.started":
                started[s.fields["generation"]] = s
            elif s.event == "rebalance.completed":
                completed.add(s.fields["generation"])
        if not started:
            return None
        generation = max(started)
        if set(started[generation].fields["members"]) != expected or generation not in completed:
            return None
        return generation

    return check


def settle(env: Env, group: str, consumers: list[Consumer], since: int, timeout: float) -> tuple[int, GroupState]:
    """Wait until ``group`` is stable with exactly ``consumers``, each fetching its share of the persisted target."""
    expected = {c.consumer_id for c in consumers}
    deadline = time.monotonic() + timeout
    check = rebalance_progress(group, expected)
    while True:
        remaining = deadline - time.monotonic()
        seen = env.recorder.mark()  # the check below sees at least the events before this
        generation = env.recorder.wait(check, since, max(remaining, 0.0), f"group {group} stable with {len(expected)}")
        state = read_state(env.admin, group)
        if (
            state is not None
            and state.phase is GroupPhase.STABLE
            and state.generation == generation
            and set(state.members) == expected
        ):
            break
        if time.monotonic() >= deadline:
            raise BenchError(f"group {group}: the persisted state never matched generation {generation}: {state}")
        # A newer rebalance started after that one completed: wait for its next event, then look again.
        env.recorder.wait(lambda events: events or None, seen, max(deadline - time.monotonic(), 0.0), "a rebalance")
    owned = 0
    for c in consumers:
        want = {
            TopicPartition(topic, p): thread
            for topic, parts in state.target.items()
            for p, thread in parts.items()
            if thread.startswith(f"{c.consumer_id}-")
        }
        got = c.assignment()
        if got != want:
            raise BenchError(
                f"group {group} generation {generation}: {c.consumer_id} fetches {len(got)} partitions, "
                f"its share of the target is {len(want)} ({sorted(set(got) ^ set(want))[:5]} differ)"
            )
        owned += len(got)
    if owned != REBALANCE_PARTITIONS:
        raise BenchError(f"group {group}: {owned} of {REBALANCE_PARTITIONS} partitions fetched")
    return generation, state


def first_at(seen: Iterable[Seen], event: str, **match: object) -> float | None:
    for s in seen:
        if s.event == event and all(s.fields.get(k) == v for k, v in match.items()):
            return s.at
    return None


def applied_span(
    seen: list[Seen], group: str, generation: int, option: str, consumers: list[Consumer]
) -> tuple[float, float]:
    """When the first and the last of ``consumers`` applied their ``option`` command of ``generation``."""
    applied = {
        s.fields["consumer"]: s.at
        for s in seen
        if s.event == "command.applied"
        and s.fields.get("group") == group
        and s.fields.get("option") == option
        and s.fields.get("generation") == generation
    }
    missing = [c.consumer_id for c in consumers if c.consumer_id not in applied]
    if missing:
        raise BenchError(f"group {group} generation {generation}: no {option} applied by {missing[:3]}")
    times = [applied[c.consumer_id] for c in consumers]
    return min(times), max(times)


def measure(
    env: Env,
    group: str,
    consumers: list[Consumer],
    since: int,
    *,
    kind: str,
    trial: int,
    trigger: tuple[str, str],
    called_at: float,
    timeout: float,
) -> Transition:
    generation, _ = settle(env, group, consumers, since, timeout)
    seen = env.recorder.since(since)
    event, consumer_id = trigger
    triggered = first_at(seen, event, consumer=consumer_id)
    if triggered is None:  # e.g. close() could not delete the member znode: its session's end did
        log.warning("no %s event for %s; timing from the call", event, consumer_id)
        triggered = called_at
    started = first_at(seen, "rebalance.started", group=group, generation=generation)
    barrier = first_at(seen, "rebalance.barrier", group=group, generation=generation)
    completed = first_at(seen, "rebalance.completed", group=group, generation=generation)
    if started is None or barrier is None or completed is None:
        raise BenchError(f"group {group} generation {generation}: coordinator events missing")
    requested = max(
        (s.at for s in seen if s.event == "rebalance.requested" and s.fields.get("group") == group and s.at <= started),
        default=started,
    )
    stop_first, stop_last = applied_span(seen, group, generation, "stop-fetcher", consumers)
    first, last = applied_span(seen, group, generation, "start-fetcher", consumers)
    attempts = sum(1 for s in seen if s.event == "rebalance.started" and s.fields.get("group") == group)
    problems = [s for s in seen if s.event in ("command.rejected", "offsets.fenced", "consumer.fenced")]
    for s in problems:
        log.warning("during %s trial %d: %s %s", kind, trial, s.event, s.fields)

    def ms(a: float, b: float) -> float:
        return round((b - a) * 1000, 2)

    return Transition(
        consumers=len(consumers) - (1 if kind == "join" else 0),
        kind=kind,
        trial=trial,
        generation=generation,
        attempts=attempts,
        latency_ms=ms(triggered, last),
        from_call_ms=ms(called_at, last),
        watch_ms=ms(triggered, requested),
        plan_ms=ms(requested, started),
        stop_ms=ms(started, barrier),
        stop_first_ms=ms(started, stop_first),
        stop_last_ms=ms(started, stop_last),
        start_ms=ms(barrier, last),
        start_first_ms=ms(barrier, first),
        spread_ms=ms(first, last),
        coordinator_ms=ms(requested, completed),
    )


def rebalance_consumer(env: Env, group: str, topic: str) -> Consumer:
    config = ConsumerConfig(
        group=group,
        subscription=Subscription.static({topic: 1}),
        zk=env.hosts,
        data_dir=env.data_dir,
        session_timeout_s=SESSION_S,
        max_poll_records=REBALANCE_MAX_POLL,
        auto_commit=True,
    )
    consumer = Consumer(config, journal=env.recorder)
    consumer.pause()  # the control plane is measured: nothing is read; a PollLoop runs the callbacks
    return consumer


def close_all(consumers: list[Consumer]) -> None:
    for c in reversed(consumers):
        try:
            c.close(timeout=5.0)
        except (ZkCoordError, OSError, RuntimeError):  # keep closing the others
            log.exception("closing %s", c.consumer_id)


def rebalance(env: Env, topic: str, n: int, trials: int) -> tuple[list[Transition], float]:
    """N consumers form a group; then ``trials`` times one joins and leaves.  Returns the transitions and the time
    the N took to form the group (first start() to the last start applied)."""
    group = f"rebalance-{n}-{uuid.uuid4().hex[:8]}"
    timeout = 30.0 + n
    members: list[Consumer] = []
    transitions: list[Transition] = []
    polling = PollLoop(name="bench-poll")
    try:
        since = env.recorder.mark()
        began = time.monotonic()
        for _ in range(n):
            c = rebalance_consumer(env, group, topic)
            members.append(c)
            polling.add(c.start())
        generation, _ = settle(env, group, members, since, timeout=60.0 + n)
        applied = [
            s.at
            for s in env.recorder.since(since)
            if s.event == "command.applied"
            and s.fields.get("group") == group
            and s.fields.get("generation") == generation
            and s.fields.get("option") == "start-fetcher"
        ]
        formed_s = max(applied) - began
        print(f"  {n} consumers formed the group in {formed_s:.2f} s (generation {generation})", flush=True)
        for trial in range(trials):
            newcomer = rebalance_consumer(env, group, topic)
            try:
                since = env.recorder.mark()
                called = time.monotonic()
                polling.add(newcomer.start())
                join = measure(
                    env,
                    group,
                    [*members, newcomer],
                    since,
                    kind="join",
                    trial=trial,
                    trigger=("consumer.registered", newcomer.consumer_id),
                    called_at=called,
                    timeout=timeout,
                )
                transitions.append(join)
                since = env.recorder.mark()
                called = time.monotonic()
                polling.remove(newcomer)
                newcomer.close(timeout=5.0)
                leave = measure(
                    env,
                    group,
                    members,
                    since,
                    kind="leave",
                    trial=trial,
                    trigger=("consumer.deregistered", newcomer.consumer_id),
                    called_at=called,
                    timeout=timeout,
                )
                transitions.append(leave)
            finally:
                polling.remove(newcomer)
                newcomer.close(timeout=5.0)
            print(
                f"  N={n} trial {trial}: join {join.latency_ms:8.1f} ms ({join.attempts} rebalance), "
                f"leave {leave.latency_ms:8.1f} ms ({leave.attempts} rebalance)",
                flush=True,
            )
    finally:
        polling.close()
        close_all(members)
    return transitions, formed_s


BREAKDOWN = (
    "watch_ms",
    "plan_ms",
    "stop_ms",
    "stop_first_ms",
    "stop_last_ms",
    "start_ms",
    "start_first_ms",
    "spread_ms",
    "coordinator_ms",
)


def rebalance_summary(transitions: list[Transition]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for n in sorted({t.consumers for t in transitions}):
        for kind in ("join", "leave"):
            group = [t for t in transitions if t.consumers == n and t.kind == kind]
            if not group:
                continue
            lat = [t.latency_ms for t in group]
            row: dict[str, Any] = {
                "consumers": n,
                "members_after": n + 1 if kind == "join" else n,
                "kind": kind,
                "trials": len(group),
                "latency_ms": summary(lat),
                "from_call_ms": summary([t.from_call_ms for t in group]),
                "rebalances": sum(t.attempts for t in group),
            }
            for key in BREAKDOWN:
                row[f"{key}_p50"] = round(percentile([getattr(t, key) for t in group], 0.5), 2)
            out.append(row)
    return out


def print_rebalance(summary_rows: list[dict[str, Any]], formed: dict[int, float]) -> None:
    print(
        f"\nRebalance latency over {REBALANCE_PARTITIONS} partitions (ms; trigger -> every consumer fetching its share)"
    )
    header = (
        f"{'N':>3} {'event':<12} {'trials':>6} {'p50':>7} {'p95':>7} {'max':>7} {'rebal':>5} | "
        f"{'watch':>5} {'plan':>5} | {'stop':>6} {'1st':>5} {'last':>6} | {'start':>6} {'1st':>6} | {'coord':>6}"
    )
    print(header)
    print("-" * len(header))
    for r in summary_rows:
        lat = r["latency_ms"]
        event = f"join ->{r['members_after']}" if r["kind"] == "join" else f"leave ->{r['members_after']}"
        print(
            f"{r['consumers']:>3} {event:<12} {r['trials']:>6} {lat['p50']:>7.1f} {lat['p95']:>7.1f} "
            f"{lat['max']:>7.1f} {r['rebalances']:>5} | {r['watch_ms_p50']:>5.1f} {r['plan_ms_p50']:>5.1f} | "
            f"{r['stop_ms_p50']:>6.1f} {r['stop_first_ms_p50']:>5.1f} {r['stop_last_ms_p50']:>6.1f} | "
            f"{r['start_ms_p50']:>6.1f} {r['start_first_ms_p50']:>6.1f} | {r['coordinator_ms_p50']:>6.1f}"
        )
    print(
        "p50/p95/max: trigger (member znode created / deleted) -> the last consumer applied the start-fetcher.\n"
        "Breakdown, medians: watch = trigger -> rebalance requested; plan = requested -> started; stop = started ->\n"
        "barrier (1st / last: -> the first / last consumer applied its stop-fetcher); start = barrier -> the last\n"
        "consumer applied its start-fetcher (1st: -> the first did); coord = requested -> completed (the\n"
        "coordinator's own latency: it ends when it has seen every start acknowledged)."
    )
    for n, seconds in sorted(formed.items()):
        print(f"(forming the group of {n}, from the first start() to the last start applied: {seconds:.2f} s)")
