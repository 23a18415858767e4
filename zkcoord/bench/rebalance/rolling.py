"""``zkcoord bench rebalance --scenario rolling-restart``: a rolling restart of a group of static members (KIP-848).

One group of ``consumers`` members of the ``consumer`` protocol, each with an instance id (``i000``, ``i001``, ...),
over the run's first topic, hosted by their own worker processes and formed as in the join-leave scenario.  Then, one
member after the other (``restarts`` of them, in instance-id order), the driver asks its worker to ``restart`` it: the
consumer is closed (``close()``: it commits, stops fetching, deregisters and ends its session, which releases its
instance id) and a new consumer is started at once with the same group, topic and instance id.  The coordinator holds
the member's assignment for its instance id meanwhile (``kip848.member_held``) and gives it to the new consumer
(``kip848.member_replaced``) with no new group epoch.  Each restart is measured from the journals:

* ``moved``: partitions fetched, at any moment of the restart, by a member of another instance id than the one that
  fetched it before, or fetched by another instance id at the end (KIP-848's promise: none);
* ``gap_ms``: the longest time one partition was not fetched, from the driver's command until the group is stable
  again (``outage``; the restarted member's partitions, from its old consumer's ``fetch.stopped`` to the new one's
  ``fetch.started``), set beside the session timeout; ``stw_ms`` (no partition fetched at all) should be 0;
* ``back_ms``: from the command until the new consumer fetches as many partitions as its predecessor did;
  ``stable_ms``: until the coordinator journals ``rebalance.completed`` after the replacement (the group stable,
  every member at the assignment epoch); ``closed_ms`` and ``started_ms``: the worker's ``close()`` and ``start()``;
* ``epoch_bumps`` (``rebalance.started``) and ``disturbed`` (members other than the new one sent a command): both
  0 when nobody else is disturbed; ``zk_requests`` and ``zk_requests_by_role`` as for a change (the old consumer's
  session is closed by the second reading: its requests are in ``other``).

A restart that does not reach the stable group within ``--change-timeout`` is ``completed: false``.  Driver thread
only; owned by :class:`~zkcoord.bench.rebalance.run.RebalanceBench`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from zkcoord.bench.rebalance.cluster import CpuMeter, WorkerProcess, stop_all
from zkcoord.bench.rebalance.config import BenchConfig, Progress
from zkcoord.bench.rebalance.environment import BenchEnvironment
from zkcoord.bench.rebalance.events import Event, count_events, outage
from zkcoord.bench.rebalance.measures import Reading, usage_of
from zkcoord.bench.rebalance.sessions import ROLES
from zkcoord.bench.rebalance.timeline import CONSUMER, GroupTracker
from zkcoord.bench.rebalance.waits import QUIET_S, JournalWaits
from zkcoord.bench.rebalance.zkfloor import stats
from zkcoord.coordinator.config import CoordinatorConfig


class Run(Protocol):
    """What the scenario uses of the run it is part of (:class:`~zkcoord.bench.rebalance.run.RebalanceBench`)."""

    config: BenchConfig
    say: Progress
    prefix: str
    topics: list[str]
    env: BenchEnvironment
    cpu: CpuMeter
    waits: JournalWaits

    def reading(self) -> Reading: ...
    def learn_sessions(self, consumers: dict[str, str]) -> None: ...
    def roles(self, subjects: set[str], members: set[str]) -> dict[str, set[int]]: ...


@dataclass
class Restart:
    """One member's restart (one row of ``rolling_restart.restarts`` in the JSON)."""

    index: int
    instance_id: str
    previous: str  # the consumer closed
    consumer: str  # the consumer started in its place
    completed: bool
    replaced: bool  # the coordinator journalled kip848.member_replaced for it
    partitions_before: int  # what the member fetched before
    partitions_after: int  # what its new consumer fetches at the end
    moved: int  # partitions fetched by another instance id during the restart or at its end
    gap_ms: int
    stw_ms: int
    unfetched_partition_ms: int
    back_ms: int | None
    stable_ms: int | None
    closed_ms: float | None
    started_ms: float | None
    epoch_bumps: int
    disturbed: int
    zk_requests: float
    zk_requests_by_role: dict[str, float | None] = field(default_factory=dict)
    start_ts: int = 0


class RollingRestart:
    """The scenario on a run's environment (see the module docstring)."""

    def __init__(self, bench: Run) -> None:
        self.bench = bench
        self.config = bench.config
        self.say = bench.say
        self.name = f"{bench.prefix}-rr0"
        self.topic = bench.topics[0]
        #: consumer id -> instance id, and the worker hosting it
        self.instance: dict[str, str] = {}
        self.host: dict[str, WorkerProcess] = {}

    def run(self) -> dict[str, Any]:
        """Form the static group, restart its members one by one, stop its workers; the document's part."""
        cfg = self.config
        tag = "[consumer, rolling restart]"
        tracker = GroupTracker(self.name, CONSUMER, self.topic, cfg.partitions)
        self.bench.waits.trackers = {self.name: tracker}
        workers: list[WorkerProcess] = []
        restarts: list[Restart] = []
        formed, form_s = False, 0.0
        try:
            count = max(1, min(cfg.worker_count, cfg.consumers))
            workers = self.bench.env.start_workers(CONSUMER, count, "rr")
            self.bench.cpu.set("workers", [w.pid for w in workers])
            self.say(f"{tag} forming a group of {cfg.consumers} static members over {cfg.partitions} partitions...")
            began = time.monotonic()
            formed = self._form(workers, tracker)
            form_s = round(time.monotonic() - began, 2)
            if not formed:
                self.say(f"{tag} the group did not settle in {form_s:g} s ({tracker.progress()}); restarting anyway")
            else:
                self.say(f"{tag} formed in {form_s:.1f} s")
            self.bench.learn_sessions(dict.fromkeys(tracker.members, self.name))
            order = sorted(tracker.members, key=lambda c: self.instance[c])[: cfg.restart_count]
            for k, consumer_id in enumerate(order):
                restart = self._restart(k, consumer_id, tracker)
                restarts.append(restart)
                self.say(f"{tag} restart {k + 1}/{len(order)} {describe(restart, cfg.session_timeout_s)}")
        finally:
            self.say(f"{tag} stopping {len(workers)} workers...")
            stop_all(workers, timeout=30.0 + cfg.consumers * 0.05)
            self.bench.cpu.pids.pop("workers", None)
            self.bench.waits.trackers = {}
            self.bench.waits.wait_quiet_journal(1.0, 20.0)
        return {
            "group": self.name,
            "consumers": cfg.consumers,
            "partitions": cfg.partitions,
            "restarts_planned": cfg.restart_count,
            "session_timeout_s": cfg.session_timeout_s,
            "static_hold_s": CoordinatorConfig().static_hold_s,
            "formed": formed,
            "form_s": form_s,
            "summary": summarize(restarts, cfg.session_timeout_s),
            "restarts": [asdict(r) for r in restarts],
        }

    def _form(self, workers: list[WorkerProcess], tracker: GroupTracker) -> bool:
        cfg = self.config
        plan: dict[int, list[str]] = {}
        for k in range(cfg.consumers):
            plan.setdefault(k % len(workers), []).append(f"i{k:03d}")
        for w, instances in plan.items():
            command = {"op": "add", "group": self.name, "topic": self.topic, "count": len(instances)}
            workers[w].send({**command, "instance_ids": instances})
        deadline = time.monotonic() + cfg.form_deadline_s
        for w, instances in plan.items():
            reply = workers[w].receive(max(1.0, deadline - time.monotonic()))
            for consumer_id, instance in zip(reply["consumers"], instances, strict=True):
                self.instance[consumer_id] = instance
                self.host[consumer_id] = workers[w]
                workers[w].consumers[consumer_id] = self.name
        tracker.set_members(self.instance)
        self.bench.waits.arm()
        return self.bench.waits.wait_settled(deadline, report_every=10.0)

    def _restart(self, index: int, old: str, tracker: GroupTracker) -> Restart:
        cfg, bench = self.config, self.bench
        quiet, before = bench.waits.background(bench.reading)
        first, initial = tracker.snapshot()
        owner_before = [self._instance_of(holders) for holders in initial]
        instance = self.instance[old]
        start_ms = time.time_ns() // 1_000_000
        deadline = time.monotonic() + cfg.change_timeout_s
        worker = self.host.pop(old)
        reply = worker.call({"op": "restart", "consumer": old}, max(1.0, deadline - time.monotonic()))
        new = str(reply["consumer"])
        worker.consumers.pop(old, None)
        worker.consumers[new] = self.name
        self.host[new], self.instance[new] = worker, instance
        tracker.set_members((tracker.members - {old}) | {new})
        completed = self._wait_back(tracker, first, new, deadline)
        after = bench.reading()
        bench.learn_sessions({new: self.name})
        usage = usage_of(quiet, before, after, 1, bench.roles({new}, set(tracker.members)))
        events = tracker.events[first:]
        end = max((e.ts for e in events), default=start_ms)
        stable = _stable_ts(events, new)
        if completed and stable is not None:
            end = stable
        window = [e for e in events if e.ts <= end]
        lost = outage(initial, window, self.topic, start_ms, end)
        fetched_by_new = _fetched(window, new)
        return Restart(
            index=index,
            instance_id=instance,
            previous=old,
            consumer=new,
            completed=completed,
            replaced=any(e.ev == "kip848.member_replaced" and e.fields.get("consumer") == new for e in events),
            partitions_before=sum(1 for o in owner_before if o == instance),
            partitions_after=sum(1 for holders in tracker.owners if any(c == new for c, _ in holders)),
            moved=len(moved_partitions(window, self.topic, owner_before, tracker.owners, self.instance)),
            gap_ms=lost.gap_ms,
            stw_ms=lost.stw_ms,
            unfetched_partition_ms=lost.unfetched_ms,
            back_ms=None if fetched_by_new is None else max(0, fetched_by_new - start_ms),
            stable_ms=None if stable is None else max(0, stable - start_ms),
            closed_ms=reply.get("closed_ms"),
            started_ms=reply.get("started_ms"),
            epoch_bumps=count_events(window, "rebalance.started"),
            disturbed=len({str(e.fields.get("consumer")) for e in window if e.ev == "command.sent"} - {new}),
            zk_requests=usage["zk_requests"],
            zk_requests_by_role=usage["zk_requests_by_role"],
            start_ts=start_ms,
        )

    def _wait_back(self, tracker: GroupTracker, first: int, new: str, deadline: float) -> bool:
        """Until the new consumer took its predecessor's place and the group is stable again with every partition
        fetched by exactly one member, then quiet for :data:`QUIET_S`; False at ``deadline``."""
        waits = self.bench.waits

        def back() -> bool:
            stable = tracker.fetched_once() and _stable_ts(tracker.events[first:], new) is not None
            return stable and waits.quiet_for(QUIET_S)

        return waits.until(back, deadline)

    def _instance_of(self, holders: set[tuple[str, str]]) -> str | None:
        return instance_of(holders, self.instance)


def instance_of(holders: set[tuple[str, str]], instances: Mapping[str, str]) -> str | None:
    """The instance id fetching a partition (its one holder's), or None (nobody, or several)."""
    ids = {instances.get(consumer) for consumer, _ in holders}
    return ids.pop() if len(ids) == 1 else None


def moved_partitions(
    window: list[Event],
    topic: str,
    owner_before: Sequence[str | None],
    owners_now: Sequence[set[tuple[str, str]]],
    instances: Mapping[str, str],
) -> set[int]:
    """Partitions of ``topic`` that a member of another instance id than ``owner_before`` started fetching in
    ``window``, or that another instance id (or several, or none) fetches now (``owners_now``)."""
    moved = set()
    for e in window:
        if e.ev == "fetch.started" and e.fields.get("topic") == topic:
            p = int(e.fields["partition"])
            if 0 <= p < len(owner_before) and instances.get(str(e.fields["consumer"])) != owner_before[p]:
                moved.add(p)
    for p, holders in enumerate(owners_now):
        if p < len(owner_before) and instance_of(holders, instances) != owner_before[p]:
            moved.add(p)
    return moved


def _stable_ts(events: list[Event], new: str) -> int | None:
    """When the group was written stable after ``new`` took its predecessor's place (None: not yet)."""
    replaced = False
    for e in events:
        if e.ev == "kip848.member_replaced" and e.fields.get("consumer") == new:
            replaced = True
        elif replaced and e.ev == "rebalance.completed":
            return e.ts
    return None


def _fetched(events: list[Event], consumer: str) -> int | None:
    """The last ``fetch.started`` of ``consumer`` in ``events``: when it fetched all it was given."""
    return max((e.ts for e in events if e.ev == "fetch.started" and e.fields.get("consumer") == consumer), default=None)


def summarize(restarts: list[Restart], session_timeout_s: float) -> dict[str, Any]:
    """The scenario's figures over its restarts."""
    done = [r for r in restarts if r.completed]
    gaps = [float(r.gap_ms) for r in done]
    longest = max(gaps, default=None)

    def of(values: list[float]) -> dict[str, float] | None:
        return stats(values) if values else None

    return {
        "restarts": len(restarts),
        "completed": len(done),
        "replaced": sum(1 for r in restarts if r.replaced),
        "moved_partitions": sum(r.moved for r in restarts),
        "restarts_with_moves": sum(1 for r in restarts if r.moved),
        "epoch_bumps": sum(r.epoch_bumps for r in restarts),
        "disturbed": sum(r.disturbed for r in restarts),
        "gap_ms": of(gaps),
        "stw_ms_max": max((r.stw_ms for r in done), default=None),
        "back_ms": of([float(r.back_ms) for r in done if r.back_ms is not None]),
        "stable_ms": of([float(r.stable_ms) for r in done if r.stable_ms is not None]),
        "closed_ms": of([float(r.closed_ms) for r in done if r.closed_ms is not None]),
        "started_ms": of([float(r.started_ms) for r in done if r.started_ms is not None]),
        "zk_requests_p50": _p50([r.zk_requests for r in restarts]),
        "zk_requests_by_role_p50": {
            role: _p50([n for r in restarts if (n := r.zk_requests_by_role.get(role)) is not None]) for role in ROLES
        },
        "session_timeout_ms": session_timeout_s * 1000,
        "longest_gap_over_session_timeout": None if longest is None else round(longest / (session_timeout_s * 1000), 3),
        "gap_under_session_timeout": None if longest is None else longest < session_timeout_s * 1000,
        "no_partition_moved": bool(restarts) and all(r.moved == 0 for r in restarts),
    }


def _p50(values: list[float]) -> float | None:
    return stats(values)["p50"] if values else None


def describe(r: Restart, session_timeout_s: float) -> str:
    """One progress line for a restart."""
    if not r.completed:
        return f"{r.instance_id}: did not settle (moved {r.moved}, longest gap {r.gap_ms} ms so far)"
    return (
        f"{r.instance_id}: back in {r.back_ms} ms, stable in {r.stable_ms} ms, longest gap {r.gap_ms} ms "
        f"(session timeout {session_timeout_s * 1000:g}), moved {r.moved}, {r.epoch_bumps} epoch bumps, "
        f"{r.zk_requests:.0f} ZK requests"
    )
