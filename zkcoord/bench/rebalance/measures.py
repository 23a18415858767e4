"""The rebalance benchmark's results and the arithmetic that turns readings and journal events into them.

Pure functions of their arguments (no I/O): :func:`measure` makes one :class:`Change` from a group's events and the
readings around it, :func:`summarize` the JSON's ``summary`` rows, :func:`comparison` the protocols' ratios.  The
driver is :mod:`zkcoord.bench.rebalance`; the JSON document is described in ``docs/benchmarks.md``, and beside it:

* ``changes[*]``: ``mode`` (``"eager"`` / ``"incremental"``: the ``mode`` of the ``rebalance.started`` of the
  generation the group settled on; ``null`` for ``zk-client``, or when the coordinator does not journal it),
  ``commanded`` (members sent a stop- or start-fetcher in that generation; ``null`` for ``zk-client``),
  ``moved_partitions`` (the ``moved`` of that generation's ``rebalance.completed``: partitions whose owner changed)
  and ``stopped_partitions`` (the sum of ``partitions`` over that generation's stop-fetcher ``command.applied``:
  partitions whose fetcher was stopped; every partition in an eager rebalance, the moved ones in an incremental one);
* ``summary[*]``: ``commanded_p50``, ``moved_partitions_p50``, ``stopped_partitions_p50`` (medians over the
  completed changes);
* ``comparison``: ``{join,leave}_legacy_over_coordinator``, ``{join,leave}_legacy_over_incremental``,
  ``{join,leave}_coordinator_over_incremental``, ``{join,leave}_legacy_over_consumer`` and
  ``{join,leave}_incremental_over_consumer`` (p50 over p50; ``null`` unless both protocols ran and settled);
* ``consumer`` (KIP-848): ``mode`` is ``"consumer"``; ``moved_partitions`` is the sum of ``partitions`` over the
  epoch's start-fetcher ``command.applied`` (an incremental start counts only what it adds: the partitions that
  changed member); ``member_steps`` counts ``kip848.member_step`` (each a member's reconciliation step written in
  the coordinator's transactions) and ``acks`` ``command.acked``; ``breakdown_ms`` adds ``fetching``, the moment
  every member fetched its new share (the others' end), before the coordinator wrote the group stable
  (``completed``, this protocol's end);
* ``zk_requests_by_role`` (every protocol): the change's requests per group by who sent them
  (:mod:`~zkcoord.bench.rebalance.sessions`: ``coordinator``, ``subject``, ``members``, ``other``).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from zkcoord.bench.rebalance.cluster import CpuReading
from zkcoord.bench.rebalance.sessions import ROLES, Sessions, by_role
from zkcoord.bench.rebalance.timeline import (
    CLASSIC,
    CONSUMER,
    COORDINATED,
    COORDINATOR,
    INCREMENTAL,
    LEGACY,
    Event,
    GroupTracker,
    count_events,
    first_ts,
    outage,
)
from zkcoord.bench.rebalance.zkfloor import Counters, Floor, delta, stats

if TYPE_CHECKING:
    from zkcoord.bench.rebalance.config import BenchConfig

# --- results ----------------------------------------------------------------------------------------------------


@dataclass
class Change:
    """One membership change of one group (one row of ``changes`` in the JSON)."""

    protocol: str
    kind: str  # "join" or "leave"
    trial: int
    group: str
    consumer: str  # the one joining or leaving
    members_before: int
    members_after: int
    partitions: int
    completed: bool
    latency_ms: int | None  # trigger -> settled
    from_command_ms: int | None  # the driver's command -> settled
    stw_ms: int  # longest interval with no partition of the group fetched
    gap_ms: int  # longest interval one partition was not fetched
    unfetched_partition_ms: int  # sum over partitions of the time each was not fetched
    attempts: int  # rebalance attempts: coordinator rebalance.started; zk-client: every member's attempts
    conflicts: int
    retries: int
    aborted: int
    failures: int
    rejected: int
    reopened: int
    zk_requests: float  # per group, background subtracted
    zk_reads: float
    zk_writes: float
    zk_requests_raw: int  # the counters' difference over the window, all groups, background included
    zk_packets_raw: int
    zk_window_s: float
    zk_background_per_s: float
    #: CPU time of each role over the window, background subtracted (None: not readable, e.g. an external ZooKeeper)
    cpu_ms: dict[str, float | None]
    start_ts: int
    trigger_ts: int | None
    done_ts: int | None
    breakdown_ms: dict[str, int | None] = field(default_factory=dict)
    #: coordinator, incremental (None for zk-client): the settled generation's mode ("eager" / "incremental"), the
    #: members sent a command in it, the partitions whose owner changed, the partitions whose fetcher was stopped
    mode: str | None = None
    commanded: int | None = None
    moved_partitions: int | None = None
    stopped_partitions: int | None = None
    #: coordinated protocols: command.acked events in the change; consumer: kip848.member_step events (else None)
    acks: int | None = None
    member_steps: int | None = None
    #: classic: the leader's assignor time (``classic.synced``'s ``compute_ms``) and the coordinator's wait from its
    #: join record to the leader's valid sync, summed over the change's generations (else None)
    leader_compute_ms: float | None = None
    sync_wait_ms: float | None = None
    #: the requests per group by who sent them (:mod:`~zkcoord.bench.rebalance.sessions`)
    zk_requests_by_role: dict[str, float | None] = field(default_factory=dict)


@dataclass
class ProtocolRun:
    protocol: str
    workers: int
    formed: bool = False
    form_s: float | None = None
    #: the formation (every consumer of every group starting at once): rebalance attempts, conflicts, retries...
    formation: dict[str, int] = field(default_factory=dict)
    error: str | None = None
    floor_loaded: Floor | None = None
    changes: list[Change] = field(default_factory=list)


# --- measurements -------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Reading:
    """The server's counters and the processes' CPU times at one instant."""

    counters: Counters
    cpu: CpuReading
    #: the server's per-session counters (None: ``cons`` not answered)
    sessions: Sessions | None = None


def usage_of(
    quiet: Reading,
    before: Reading,
    after: Reading,
    groups: int,
    roles: Mapping[str, Collection[int]] | None = None,
) -> dict[str, Any]:
    """ZooKeeper requests and CPU time from ``before`` to ``after``, less the background rate seen from ``quiet``
    to ``before``; requests per group (each group changed once), and by the sessions of each of ``roles``."""
    background, window = delta(quiet.counters, before.counters), delta(before.counters, after.counters)

    def net(window_value: float, background_value: float) -> float:
        rate = background_value / background.seconds if background.seconds > 0 else 0.0
        return max(0.0, window_value - rate * window.seconds)

    cpu: dict[str, float | None] = {}
    ours = 0.0
    for role, now in after.cpu.roles.items():
        start, base = before.cpu.roles.get(role), quiet.cpu.roles.get(role)
        if now is None or start is None or base is None:
            cpu[role] = None
        else:
            cpu[role] = round(net(now - start, start - base), 1)
            ours += now - start
    # What the rest of the machine took meanwhile, raw (no background): other processes (an external ZooKeeper
    # among them; a process that started in the window counts from 0, one that ended in it is missed), and the
    # kernel's own work beyond any process (interrupts: loopback networking).
    others = sum(ms - before.cpu.others.get(pid, 0.0) for pid, ms in after.cpu.others.items())
    cpu["others"] = round(max(0.0, others), 1)
    if after.cpu.machine is None or before.cpu.machine is None:
        cpu["kernel"] = None
    else:
        cpu["kernel"] = round(max(0.0, after.cpu.machine - before.cpu.machine - ours - others), 1)
    reads, writes = net(window.reads, background.reads) / groups, net(window.writes, background.writes) / groups
    return {
        "zk_requests_by_role": by_role(
            quiet.sessions, before.sessions, after.sessions, roles or {}, total=reads + writes, groups=groups
        ),
        "zk_requests": round(reads + writes, 1),
        "zk_reads": round(reads, 1),
        "zk_writes": round(writes, 1),
        "zk_requests_raw": window.requests,
        "zk_packets_raw": window.packets_received,
        "zk_window_s": round(window.seconds, 3),
        "zk_background_per_s": round(background.requests_per_s, 1),
        "cpu_ms": cpu,
    }


def measure(
    tracker: GroupTracker,
    events: list[Event],
    initial: list[set[tuple[str, str]]],
    *,
    kind: str,
    trial: int,
    consumer_id: str,
    members_before: int,
    start_ms: int,
    usage: dict[str, Any],
) -> Change:
    """One group's change, from its events since ``start_ms`` (the command to the worker)."""
    trigger_event = "consumer.registered" if kind == "join" else "consumer.deregistered"
    trigger = first_ts(events, trigger_event, consumer=consumer_id)
    done = tracker.settled_at.ts if tracker.settled_at is not None else None
    end = done if done is not None else max((e.ts for e in events), default=start_ms)
    window = [e for e in events if e.ts <= end]
    lost = outage(initial, window, tracker.topic, start_ms, end)
    since = trigger if trigger is not None else start_ms
    legacy = tracker.protocol == LEGACY
    change = Change(
        protocol=tracker.protocol,
        kind=kind,
        trial=trial,
        group=tracker.name,
        consumer=consumer_id,
        members_before=members_before,
        members_after=len(tracker.members),
        partitions=tracker.partitions,
        completed=done is not None,
        latency_ms=None if done is None else max(0, done - since),
        from_command_ms=None if done is None else max(0, done - start_ms),
        stw_ms=lost.stw_ms,
        gap_ms=lost.gap_ms,
        unfetched_partition_ms=lost.unfetched_ms,
        attempts=count_events(events, "legacy.rebalance.started" if legacy else "rebalance.started"),
        conflicts=count_events(events, "legacy.rebalance.conflict"),
        retries=count_events(events, "legacy.rebalance.retrying", "rebalance.retrying"),
        aborted=aborted(events, tracker.events),
        failures=count_events(events, "legacy.rebalance.failed", "rebalance.failed"),
        rejected=count_events(events, "command.rejected", "offsets.fenced"),
        reopened=tracker.reopened,
        start_ts=start_ms,
        trigger_ts=trigger,
        done_ts=done,
        breakdown_ms=breakdown(tracker, events, since, end),
        acks=count_events(window, "command.acked") if tracker.protocol in COORDINATED else None,
        member_steps=count_events(window, "kip848.member_step") if tracker.protocol == CONSUMER else None,
        **commands(tracker, events, end),
        **usage,
    )
    if tracker.protocol == CLASSIC:
        change.leader_compute_ms, change.sync_wait_ms = leader_times(window)
    return change


def leader_times(window: Iterable[Event]) -> tuple[float, float]:
    """A classic change's leader computation and sync wait (ms, summed over its generations), apart from the rest of
    its latency."""
    synced = [e.fields for e in window if e.ev == "classic.synced"]
    compute = sum(float(f.get("compute_ms") or 0) for f in synced)
    return round(compute, 3), round(sum(float(f.get("wait_ms") or 0) for f in synced), 3)


def aborted(events: Iterable[Event], everything: Iterable[Event]) -> int:
    """``rebalance.aborted`` events in ``events``, less those of a generation that completed (``rebalance.completed``
    in ``everything``): the consumer protocol's coordinator journals the epoch it supersedes as aborted even when that
    epoch was complete and stable (it looks at stability after adding a joiner, who is at epoch 0), which is no
    abort."""
    done = {e.fields.get("generation") for e in everything if e.ev == "rebalance.completed"}
    return sum(1 for e in events if e.ev == "rebalance.aborted" and e.fields.get("generation") not in done)


def _count(value: object) -> int:
    """A ``partitions`` field: a count, or a list (of partitions)."""
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return value
    return len(value) if isinstance(value, list | dict) else 0


def commands(tracker: GroupTracker, events: Sequence[Event], end: int) -> dict[str, Any]:
    """What the generation the group settled on commanded (the :class:`Change` fields ``mode``, ``commanded``,
    ``moved_partitions``, ``stopped_partitions``); all None for ``zk-client`` or a change that did not settle."""
    final = tracker.settled_generation
    if tracker.protocol not in COORDINATED or tracker.settled_at is None or final < 0:
        return {"mode": None, "commanded": None, "moved_partitions": None, "stopped_partitions": None}
    mode: str | None = None
    moved: int | None = None
    commanded: set[str] = set()
    stopped = started = 0
    for e in events:
        f = e.fields
        if f.get("generation") != final:
            continue
        if e.ev == "rebalance.started":
            mode = str(f["mode"]) if "mode" in f else None
        elif e.ev == "rebalance.completed" and "moved" in f:
            moved = _count(f["moved"])
        elif e.ev == "command.sent":
            commanded.add(str(f.get("consumer")))
        elif e.ev == "command.applied" and f.get("option") == "stop-fetcher" and e.ts <= end:
            stopped += _count(f.get("partitions"))
        elif e.ev == "command.applied" and f.get("option") == "start-fetcher" and e.ts <= end:
            started += _count(f.get("partitions"))
    if tracker.protocol == CONSUMER:
        moved = started  # incremental starts: only what each member gains
    return {"mode": mode, "commanded": len(commanded), "moved_partitions": moved, "stopped_partitions": stopped}


def breakdown(tracker: GroupTracker, events: Sequence[Event], since: int, end: int) -> dict[str, int | None]:
    """When the steps of the change happened, in ms after the trigger (None: did not happen in the change)."""

    def rel(ts: int | None) -> int | None:
        return None if ts is None else ts - since

    window = [e for e in events if e.ts <= end]
    if tracker.protocol in COORDINATED:
        final = tracker.settled_generation
        fetching = tracker.fetching_at.ts if tracker.fetching_at is not None else None
        extra = {"fetching": rel(fetching)} if tracker.protocol == CONSUMER else {}
        if tracker.protocol == CLASSIC:  # the leader's sync accepted: its computation is before this
            extra = {"synced": rel(first_ts(window, "classic.synced", generation=final))}
        applied: dict[str, list[int]] = {"stop-fetcher": [], "start-fetcher": []}
        for e in window:
            if e.ev == "command.applied" and e.fields.get("generation") == final:
                applied.setdefault(str(e.fields.get("option")), []).append(e.ts)
        requested = next((e.ts for e in window if e.ev == "rebalance.requested" and e.ts >= since), None)
        return {
            "requested": rel(requested),
            "started": rel(first_ts(window, "rebalance.started", generation=final)),
            "stop_applied_first": rel(min(applied["stop-fetcher"], default=None)),
            "stop_applied_last": rel(max(applied["stop-fetcher"], default=None)),
            "barrier": rel(first_ts(window, "rebalance.barrier", generation=final)),
            "start_applied_first": rel(min(applied["start-fetcher"], default=None)),
            "start_applied_last": rel(max(applied["start-fetcher"], default=None)),
            "completed": rel(first_ts(events, "rebalance.completed", generation=final)),
            **extra,
        }
    completions = [e.ts for e in window if e.ev == "legacy.rebalance.completed"]
    return {
        "first_attempt": rel(first_ts(window, "legacy.rebalance.started")),
        "first_conflict": rel(first_ts(window, "legacy.rebalance.conflict")),
        "first_completed": rel(min(completions, default=None)),
        "last_completed": rel(max(completions, default=None)),
    }


def formation_counts(trackers: Iterable[GroupTracker]) -> dict[str, int]:
    """What forming the groups cost, from all their events so far (summed over the groups)."""
    events = [e for t in trackers for e in t.events]
    return {
        "attempts": count_events(events, "rebalance.started", "legacy.rebalance.started"),
        "conflicts": count_events(events, "legacy.rebalance.conflict"),
        "retries": count_events(events, "legacy.rebalance.retrying", "rebalance.retrying"),
        "aborted": aborted(events, events),
        "failures": count_events(events, "legacy.rebalance.failed", "rebalance.failed"),
    }


def describe(changes: list[Change]) -> str:
    """One progress line for the changes of one step (one per group)."""
    c = changes[0]
    arrow = f"{c.kind:<5} -> {c.members_after}"
    lat = [x.latency_ms for x in changes if x.latency_ms is not None]
    done = sum(1 for x in changes if x.completed)
    latency = "/".join(f"{v}" for v in lat) + " ms" if lat else "not settled"
    extra = []
    if done < len(changes):
        extra.append(f"{len(changes) - done} of {len(changes)} groups did not settle")
    conflicts = sum(x.conflicts for x in changes)
    retries = sum(x.retries + x.aborted for x in changes)
    if conflicts or retries:
        extra.append(f"{conflicts} conflicts, {retries} retries")
    stw = max(x.stw_ms for x in changes)
    return (
        f"{arrow}: {latency} (stw {stw} ms, {sum(x.attempts for x in changes)} attempts, "
        f"{c.zk_requests:.0f} ZK requests/group{', ' if extra else ''}{', '.join(extra)})"
    )


def _median(values: list[float]) -> float | None:
    return stats(values)["p50"] if values else None


def summarize(run: ProtocolRun, cfg: BenchConfig, floor: Floor) -> list[dict[str, Any]]:
    """The summary rows of one protocol: one per kind of change."""
    rows = []
    for kind in ("join", "leave"):
        changes = [c for c in run.changes if c.kind == kind]
        latencies = [float(c.latency_ms) for c in changes if c.latency_ms is not None]
        completed = [c for c in changes if c.completed]
        lat = stats(latencies) if latencies else None
        p50 = lat["p50"] if lat else None
        breakdown_p50: dict[str, float | None] = {}
        for key in changes[0].breakdown_ms if changes else {}:
            values = [float(v) for c in completed if (v := c.breakdown_ms.get(key)) is not None]
            breakdown_p50[key] = _median(values)
        rows.append(
            {
                "protocol": run.protocol,
                "kind": kind,
                "consumers": cfg.consumers,
                "partitions": cfg.partitions,
                "groups": cfg.groups,
                "trials": cfg.trials,
                "changes": len(changes),
                "completed": len(completed),
                "formed": run.formed,
                "latency_ms": lat,
                "stw_ms": stats([float(c.stw_ms) for c in completed]) if completed else None,
                "gap_ms": stats([float(c.gap_ms) for c in completed]) if completed else None,
                "unfetched_partition_ms_p50": _median([float(c.unfetched_partition_ms) for c in completed]),
                "zk_requests_per_rebalance": _median([c.zk_requests for c in changes]),
                "zk_reads_per_rebalance": _median([c.zk_reads for c in changes]),
                "zk_writes_per_rebalance": _median([c.zk_writes for c in changes]),
                "attempts": sum(c.attempts for c in changes),
                "conflicts": sum(c.conflicts for c in changes),
                "retries": sum(c.retries for c in changes),
                "aborted": sum(c.aborted for c in changes),
                "failures": sum(c.failures for c in changes),
                "rejected": sum(c.rejected for c in changes),
                "reopened": sum(c.reopened for c in changes),
                "cpu_ms_p50": {
                    role: _median([ms for c in changes if (ms := c.cpu_ms.get(role)) is not None])
                    for role in sorted({role for c in changes for role in c.cpu_ms})
                },
                "window_ms_p50": _median([c.zk_window_s * 1000 for c in changes]),
                "from_command_ms_p50": _median([float(c.from_command_ms) for c in completed if c.from_command_ms]),
                "x_floor_watch": round(p50 / floor.watch, 1) if p50 is not None and floor.watch > 0 else None,
                "x_floor_write": round(p50 / floor.write, 1) if p50 is not None and floor.write > 0 else None,
                "x_floor_idle": (
                    round(p50 / run.floor_loaded.watch, 1)
                    if p50 is not None and run.floor_loaded is not None and run.floor_loaded.watch > 0
                    else None
                ),
                "legacy_backoff_s": cfg.legacy_backoff_s if run.protocol == LEGACY else None,
                "breakdown_ms_p50": breakdown_p50,
                "commanded_p50": _median([float(c.commanded) for c in completed if c.commanded is not None]),
                "moved_partitions_p50": _median(
                    [float(c.moved_partitions) for c in completed if c.moved_partitions is not None]
                ),
                "stopped_partitions_p50": _median(
                    [float(c.stopped_partitions) for c in completed if c.stopped_partitions is not None]
                ),
                "acks_p50": _median([float(c.acks) for c in completed if c.acks is not None]),
                "member_steps_p50": _median([float(c.member_steps) for c in completed if c.member_steps is not None]),
                "leader_compute_ms_p50": _median(
                    [c.leader_compute_ms for c in completed if c.leader_compute_ms is not None]
                ),
                "sync_wait_ms_p50": _median([c.sync_wait_ms for c in completed if c.sync_wait_ms is not None]),
                "zk_requests_by_role_p50": {
                    role: _median([n for c in changes if (n := c.zk_requests_by_role.get(role)) is not None])
                    for role in ROLES
                },
            }
        )
    return rows


#: The ratios of :func:`comparison`: (key suffix, numerator protocol, denominator protocol).
RATIOS = (
    ("legacy_over_coordinator", LEGACY, COORDINATOR),
    ("legacy_over_incremental", LEGACY, INCREMENTAL),
    ("coordinator_over_incremental", COORDINATOR, INCREMENTAL),
    ("legacy_over_consumer", LEGACY, CONSUMER),
    ("incremental_over_consumer", INCREMENTAL, CONSUMER),
    ("classic_over_coordinator", CLASSIC, COORDINATOR),
)


def comparison(rows: list[dict[str, Any]]) -> dict[str, float | None]:
    """One protocol's p50 over another's, per kind of change (:data:`RATIOS`; None unless both ran and settled):
    ``join_legacy_over_coordinator``, ``join_legacy_over_incremental``, ``join_coordinator_over_incremental``,
    ``join_legacy_over_consumer``, ``join_incremental_over_consumer``, and the same for ``leave``."""
    out: dict[str, float | None] = {}
    for kind in ("join", "leave"):
        p50 = {r["protocol"]: (r["latency_ms"] or {}).get("p50") for r in rows if r["kind"] == kind}
        for suffix, over, under in RATIOS:
            top, bottom = p50.get(over), p50.get(under)
            out[f"{kind}_{suffix}"] = round(top / bottom, 1) if top and bottom else None
    return out
