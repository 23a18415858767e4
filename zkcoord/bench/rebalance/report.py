"""The end-of-run table of ``zkcoord bench rebalance``, from its JSON document (so a saved run prints the same)."""

from __future__ import annotations

from typing import Any

_COLUMNS = (
    ("protocol", "<11"),
    ("change", "<6"),
    ("cons", ">5"),
    ("parts", ">5"),
    ("trials", ">6"),
    ("done", ">7"),
    ("p50 ms", ">8"),
    ("p95 ms", ">8"),
    ("max ms", ">8"),
    ("STW p50", ">8"),
    ("gap p50", ">8"),
    ("ZK req", ">7"),
    ("confl", ">6"),
    ("retries", ">7"),
    ("failed", ">6"),
    ("x floor", ">8"),
)

_COORDINATOR_STEPS = (
    ("requested", "requested"),
    ("started", "started"),
    ("stop_applied_first", "1st stop"),
    ("stop_applied_last", "last stop"),
    ("barrier", "barrier"),
    ("start_applied_first", "1st start"),
    ("start_applied_last", "last start"),
    ("completed", "completed"),
)
_CONSUMER_STEPS = (
    ("requested", "requested"),
    ("started", "epoch bump"),
    ("stop_applied_first", "1st stop"),
    ("stop_applied_last", "last stop"),
    ("start_applied_first", "1st start"),
    ("start_applied_last", "last start"),
    ("fetching", "all fetch"),
    ("completed", "stable"),
)
_COORDINATED = ("coordinator", "incremental", "classic", "consumer")
_CLASSIC_STEPS = (*_COORDINATOR_STEPS[:2], ("synced", "leader sync"), *_COORDINATOR_STEPS[2:])
#: the comparison's ratios shown in the notes: key suffix, numerator, denominator
_RATIOS = (
    ("legacy_over_coordinator", "zk-client", "coordinator"),
    ("legacy_over_incremental", "zk-client", "incremental"),
    ("coordinator_over_incremental", "coordinator", "incremental"),
    ("legacy_over_consumer", "zk-client", "consumer"),
    ("incremental_over_consumer", "incremental", "consumer"),
    ("classic_over_coordinator", "classic", "coordinator"),
)
_LEGACY_STEPS = (
    ("first_attempt", "1st attempt"),
    ("first_conflict", "1st conflict"),
    ("first_completed", "1st done"),
    ("last_completed", "last done"),
)


def _num(value: float | None, digits: int = 0) -> str:
    if value is None:
        return "-"
    text = f"{value:,.{digits}f}"
    return text[1:] if text.startswith("-") and not text.strip("-0.,") else text  # no "-0"


def _row(cells: list[str]) -> str:
    return " ".join(f"{cell:{spec}}" for cell, (_, spec) in zip(cells, _COLUMNS, strict=True))


def format_table(document: dict[str, Any]) -> list[str]:
    header = _row([name for name, _ in _COLUMNS])
    lines = [header, "-" * len(header)]
    for r in document["summary"]:
        lat = r["latency_ms"] or {}
        stw = r["stw_ms"] or {}
        gap = r["gap_ms"] or {}
        retries = r["retries"] + r["aborted"]
        x = r["x_floor_watch"]
        lines.append(
            _row(
                [
                    r["protocol"],
                    r["kind"],
                    str(r["consumers"]),
                    str(r["partitions"]),
                    str(r["trials"]),
                    f"{r['completed']}/{r['changes']}",
                    _num(lat.get("p50")),
                    _num(lat.get("p95")),
                    _num(lat.get("max")),
                    _num(stw.get("p50")),
                    _num(gap.get("p50")),
                    _num(r["zk_requests_per_rebalance"]),
                    str(r["conflicts"]),
                    str(retries),
                    str(r["failures"]),
                    "-" if x is None else f"{x:,.1f}x",
                ]
            )
        )
    return lines


def _floor_notes(document: dict[str, Any]) -> list[str]:
    floor = document["floor"]["quiet"]
    lines = [
        f"ZooKeeper floor (quiet server, medians of {floor['samples']}): a write {floor['write_ms']['p50']:.2f} ms, "
        f"a write seen through another session's watch {floor['watch_ms']['p50']:.2f} ms.",
    ]
    cpu = [floor.get(f"{side}_cpu_ms_per_{op}") for op in ("watched_write", "read") for side in ("server", "client")]
    if None not in cpu:
        lines.append(
            f"CPU time per watched write (the write, the watch set, its notification): the server {cpu[0]:.2f} ms,"
            f" the two client sessions {cpu[1]:.2f} ms; per read: the server {cpu[2]:.2f} ms, the client"
            f" {cpu[3]:.2f} ms."
        )
    idle = [run["floor_loaded"]["watch_ms"]["p50"] for run in document["protocols"] if run.get("floor_loaded")]
    if idle and floor["watch_ms"]["p50"] > 2 * min(idle):
        lines.append(
            f"NOTE: the quiet floor ({floor['watch_ms']['p50']:.2f} ms) is over twice the lowest floor measured with a "
            f"protocol's groups idle ({min(idle):.2f} ms): it was taken during a disturbance (other processes); read "
            "x floor beside x idle, each change over its own protocol's idle floor (x_floor_idle)."
        )
    return lines


def _protocol_notes(document: dict[str, Any], run: dict[str, Any]) -> list[str]:
    formation = ", ".join(f"{v} {k}" for k, v in (run.get("formation") or {}).items() if v)
    settled = "settled" if run["formed"] else "did NOT settle"
    lines = [
        f"{run['protocol']}: forming the group(s) (every consumer starting at once) {settled} in "
        f"{_num(run['form_s'], 1)} s ({formation or 'no events'})"
    ]
    loaded = run["floor_loaded"]
    if loaded:
        lines.append(
            f"  with the {run['protocol']} groups formed and idle: write {loaded['write_ms']['p50']:.2f} ms, "
            f"watched {loaded['watch_ms']['p50']:.2f} ms"
        )
        idle_x = [
            f"{r['kind']} {r['x_floor_idle']:g}x"
            for r in document["summary"]
            if r["protocol"] == run["protocol"] and r.get("x_floor_idle") is not None
        ]
        if idle_x:
            lines.append(f"  p50 over that idle floor (x idle): {', '.join(idle_x)}")
    if run["error"] and run["formed"]:
        lines.append(f"  {run['protocol']}: {run['error']}")
    return lines


def format_notes(document: dict[str, Any]) -> list[str]:
    cfg = document["config"]
    lines = _floor_notes(document)
    for run in document["protocols"]:
        lines += _protocol_notes(document, run)
    lines += [
        "p50/p95/max: trigger (the member znode created / deleted) -> every member fetches its new share, in ms.",
        "STW: the longest interval with no partition of the group fetched; gap: the longest one partition was not.",
        "ZK req: requests per rebalance (server counters, background subtracted); x floor: p50 over the watched write.",
        f"{cfg['groups']} group(s) of {cfg['consumers']} consumers in {cfg['workers']} worker processes per protocol;"
        f" session timeout {cfg['session_timeout_s']:g} s.",
    ]
    if "zk-client" in cfg["protocols"]:
        lines.append(
            f"zk-client: rebalance.backoff {cfg['legacy_backoff_s']:g} s, rebalance.max.retries "
            f"{cfg['legacy_max_retries']} (Kafka 0.8.2's defaults: 2 s, 4); retries counts legacy.rebalance.retrying."
        )
    coordinated = [p for p in _COORDINATED if p in cfg["protocols"]]
    if coordinated:
        lines.append(f"{' and '.join(coordinated)}: retries counts rebalance.retrying and rebalance.aborted.")
    if "incremental" in cfg["protocols"]:
        lines.append(
            "incremental: the coordinator with every member registered for incremental rebalances (uniform "
            "assignor; settled = every partition fetched once, shares balanced, every start-fetcher sent applied)."
        )
    if "consumer" in cfg["protocols"] and document["summary"]:
        lines.append(
            "consumer: KIP-848 (group epochs, reconciliation member by member, uniform assignor); a change ends when "
            "the coordinator writes the group stable, every member at the assignment epoch (rebalance.completed)."
        )
    comparison = document["comparison"]
    for kind in ("join", "leave"):
        for key, over, under in _RATIOS:
            ratio = comparison.get(f"{kind}_{key}")
            if ratio is not None:
                lines.append(f"{kind}: the {over} p50 is {ratio:g}x the {under}'s.")
    return lines


def format_commands(document: dict[str, Any]) -> list[str]:
    """What the rebalances of the coordinated protocols commanded, per change (p50 over the completed changes)."""
    rows = [r for r in document["summary"] if r["protocol"] in _COORDINATED and r["completed"]]
    if not rows or all(r.get("commanded_p50") is None for r in rows):
        return []
    lines = [
        "Per change, p50: members sent a command, partitions whose owner changed, partitions whose fetcher stopped",
        f"  {'protocol':<11} {'change':<6} {'commanded':>10} {'moved':>7} {'stopped':>8}",
    ]
    for r in rows:
        lines.append(
            f"  {r['protocol']:<11} {r['kind']:<6} {_num(r.get('commanded_p50')):>10} "
            f"{_num(r.get('moved_partitions_p50')):>7} {_num(r.get('stopped_partitions_p50')):>8}"
        )
    return lines


def format_breakdown(document: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    for protocol, steps in (
        ("coordinator", _COORDINATOR_STEPS),
        ("incremental", _COORDINATOR_STEPS),
        ("classic", _CLASSIC_STEPS),
        ("consumer", _CONSUMER_STEPS),
        ("zk-client", _LEGACY_STEPS),
    ):
        rows = [r for r in document["summary"] if r["protocol"] == protocol and r["completed"]]
        if not rows:
            continue
        lines.append(f"{protocol}: when each step happened, p50 ms after the trigger")
        lines.append(f"  {'change':<6} " + " ".join(f"{label:>12}" for _, label in steps))
        for r in rows:
            values = r["breakdown_ms_p50"]
            lines.append(f"  {r['kind']:<6} " + " ".join(f"{_num(values.get(key)):>12}" for key, _ in steps))
        for r in rows if protocol == "classic" else []:
            lines.append(
                f"  {r['kind']}: the leader's assignor {_num(r.get('leader_compute_ms_p50'), 2)} ms, its join to a "
                f"valid sync {_num(r.get('sync_wait_ms_p50'), 1)} ms (p50; within the latency, shown apart)"
            )
    return lines


def format_cpu(document: dict[str, Any]) -> list[str]:
    """CPU time of each role per change (p50), against the window it was measured over."""
    roles = ("zookeeper", "broker", "workers", "driver")
    cpus = document["meta"].get("cpus") or 1
    lines = [
        "CPU time per change, p50 ms; the run's roles with the background subtracted, the rest raw: others = other",
        "processes of the machine, kernel = busy beyond any process (interrupts); settle = command -> settled, p50 ms;",
        f"busy = the run's CPU time over settle x {cpus} CPUs",
        f"  {'protocol':<11} {'change':<6} "
        + " ".join(f"{r:>9}" for r in (*roles, "others", "kernel"))
        + f" {'settle':>9} {'busy':>6}",
    ]
    for r in document["summary"]:
        cpu = r.get("cpu_ms_p50") or {}
        settle = r.get("from_command_ms_p50")
        known = [v for v in (cpu.get(role) for role in roles) if v is not None]
        busy = f"{sum(known) / (settle * cpus) * 100:.0f}%" if settle and known else "-"
        lines.append(
            f"  {r['protocol']:<11} {r['kind']:<6} "
            + " ".join(f"{_num(cpu.get(role)):>9}" for role in (*roles, "others", "kernel"))
            + f" {_num(settle):>9} {busy:>6}"
        )
    return lines


def format_roles(document: dict[str, Any]) -> list[str]:
    """ZooKeeper requests per change by who sent them (p50), with the consumer protocol's steps and acks."""
    rows = [
        r for r in document["summary"] if any(v is not None for v in (r.get("zk_requests_by_role_p50") or {}).values())
    ]
    if not rows:
        return []
    lines = [
        "ZooKeeper requests per change by session, p50 (subject: the member joining; one leaving has closed its",
        "session: its requests are in other); acks: command.acked; steps: kip848.member_step",
        f"  {'protocol':<11} {'change':<6} {'total':>7} {'coord':>7} {'subject':>8} {'members':>8} {'other':>7}"
        f" {'acks':>5} {'steps':>6}",
    ]
    for r in rows:
        roles = r["zk_requests_by_role_p50"]
        lines.append(
            f"  {r['protocol']:<11} {r['kind']:<6} {_num(r['zk_requests_per_rebalance']):>7} "
            f"{_num(roles.get('coordinator')):>7} {_num(roles.get('subject')):>8} {_num(roles.get('members')):>8} "
            f"{_num(roles.get('other')):>7} {_num(r.get('acks_p50')):>5} {_num(r.get('member_steps_p50')):>6}"
        )
    return lines


def format_rolling(document: dict[str, Any]) -> list[str]:
    """The rolling restart of static members: per restart, and the summary against the session timeout."""
    rolling = document.get("rolling_restart")
    if not rolling:
        return []
    s = rolling["summary"]
    lines = [
        f"Rolling restart (consumer protocol, static members): {rolling['consumers']} members over "
        f"{rolling['partitions']} partitions, {s['restarts']} restarted one after the other"
        f" ({'formed' if rolling['formed'] else 'NOT formed'} in {_num(rolling['form_s'], 1)} s)",
        f"  {'#':>3} {'instance':<9} {'done':<5} {'moved':>5} {'gap ms':>7} {'back ms':>8} {'stable ms':>9}"
        f" {'close ms':>8} {'start ms':>8} {'bumps':>5} {'disturbed':>9} {'ZK req':>7}",
    ]
    for r in rolling["restarts"]:
        lines.append(
            f"  {r['index'] + 1:>3} {r['instance_id']:<9} {'yes' if r['completed'] else 'NO':<5} {r['moved']:>5} "
            f"{r['gap_ms']:>7} {_num(r['back_ms']):>8} {_num(r['stable_ms']):>9} {_num(r['closed_ms']):>8} "
            f"{_num(r['started_ms']):>8} {r['epoch_bumps']:>5} {r['disturbed']:>9} {_num(r['zk_requests']):>7}"
        )
    gap = s["gap_ms"] or {}
    roles = s.get("zk_requests_by_role_p50") or {}
    verdict = {True: "under", False: "NOT under", None: "-"}[s["gap_under_session_timeout"]]
    lines += [
        f"  completed {s['completed']}/{s['restarts']}, replaced in place {s['replaced']}; partitions moved to another"
        f" member: {s['moved_partitions']} ({'none' if s['no_partition_moved'] else 'SOME'}); group epoch bumps: "
        f"{s['epoch_bumps']}; other members sent a command: {s['disturbed']}",
        f"  longest time one partition was not fetched: p50 {_num(gap.get('p50'))} ms, max {_num(gap.get('max'))} ms,"
        f" {verdict} the session timeout ({s['session_timeout_ms']:g} ms); back (new consumer fetching) p50 "
        f"{_num((s['back_ms'] or {}).get('p50'))} ms, stable p50 {_num((s['stable_ms'] or {}).get('p50'))} ms; "
        f"ZK requests per restart p50 {_num(s['zk_requests_p50'])} (coordinator "
        f"{_num(roles.get('coordinator'))}, the new consumer {_num(roles.get('subject'))}, the other members "
        f"{_num(roles.get('members'))})",
    ]
    return lines


def format_report(document: dict[str, Any]) -> str:
    parts = ["", *format_table(document), "", *format_notes(document)]
    breakdown = format_breakdown(document)
    if breakdown:
        parts += ["", *breakdown]
    commands = format_commands(document)
    if commands:
        parts += ["", *commands]
    roles = format_roles(document)
    if roles:
        parts += ["", *roles]
    if document["summary"]:
        parts += ["", *format_cpu(document)]
    rolling = format_rolling(document)
    if rolling:
        parts += ["", *rolling]
    return "\n".join(parts)
