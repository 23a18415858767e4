"""``zkcoord group list|describe``: read-only views of consumer groups, like ``kafka-consumer-groups.sh --describe``,
whatever protocol their members speak (``zkcoord.admin.groups``); and ``zkcoord group config``, the groups' dynamic
configs (:mod:`zkcoord.cli.group_config_cmd`).

Output contract: ``--json`` prints exactly one JSON object on stdout (``GroupDescription.to_json()``, or the parts
the view flags select, or ``{"groups": [...]}``), with the problems found inside it.  Otherwise stdout holds the
tables and every problem (a malformed znode, an unreadable log, an ownership problem) is one ``warning: ...`` line on
stderr, ownership problems in red on a terminal.  Problems never change the exit status, except that ``describe
--check`` exits 2 when there is an ownership problem.  An unknown group, an invalid name or an unreachable ZooKeeper
is one ``Error: ...`` line and exit status 1.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

from zkcoord.admin.group_config import read_config
from zkcoord.admin.group_merge import DOUBLE_OWNER
from zkcoord.admin.group_reads import Layout
from zkcoord.admin.groups import GroupDescription, GroupStatus, MemberView, PartitionView, describe_group
from zkcoord.admin.groups import list_groups as read_groups
from zkcoord.admin.kip848_view import Kip848View, member_rows
from zkcoord.cli.common import ZkCoordGroup, data_dir_option, echo_json, resolve_data_dir, zk_config, zk_options
from zkcoord.cli.common import echo_table as _table
from zkcoord.cli.group_admin_cmd import ADMIN_COMMANDS
from zkcoord.cli.group_config_cmd import config, config_lines, effective_config
from zkcoord.layout.group_state import GroupPhase
from zkcoord.layout.names import validate_group
from zkcoord.layout.registrations import Pattern
from zkcoord.zk import ZkClient

#: ``describe --check``'s exit status when a partition's ownership is in doubt (1 is "could not describe")
CHECK_FAILED = 2


@click.group(cls=ZkCoordGroup)
def group() -> None:
    """List and describe consumer groups, whatever protocol their members speak (the coordinator's
    /consumers/groups/<g> and Kafka 0.8's /consumers/<g>); get, set and delete their dynamic configs
    (/config/groups)."""


group.add_command(config)
for _command in ADMIN_COMMANDS:
    group.add_command(_command)


def _dash(value: object | None) -> str:
    return "-" if value is None else str(value)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


@group.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@zk_options
def list_(as_json: bool, zk: str, session_timeout: float) -> None:
    """List the groups of every layout (the coordinator's and Kafka 0.8's) with their member count, the protocols
    their members speak, state and generation.  Ownership is checked by `group describe --check`."""
    with ZkClient(zk_config(zk, session_timeout), name="group-list") as client:
        summaries = read_groups(client)
    if as_json:
        echo_json({"groups": [s.to_json() for s in summaries]})
        return
    _table(
        ["GROUP", "MEMBERS", "PROTOCOLS", "STATE", "GENERATION"],
        [[s.group, str(s.members), _mix(s.protocols) or "-", s.state.value, _dash(s.generation)] for s in summaries],
    )
    for s in summaries:
        _warn(s.problems, ())


def _warn(problems: Sequence[str], alarms: Sequence[str]) -> None:
    """One ``warning:`` line per problem on stderr, the ownership problems (``alarms``) in red."""
    for problem in problems:
        line = f"warning: {problem}"
        click.echo(click.style(line, fg="red") if problem in alarms else line, err=True)


def _mix(protocols: dict[str, int]) -> str:
    return ",".join(f"{name}:{n}" for name, n in protocols.items())


# --- describe: the state ------------------------------------------------------------------------------------------


def _header(d: GroupDescription) -> list[str]:
    st = d.persisted
    count = _plural(len(d.members), "member")
    state = d.state.value
    coordinated = any(m.in_layout(Layout.COORDINATOR) is not None for m in d.members)
    if d.state is GroupStatus.REBALANCING and st is not None and st.phase in (GroupPhase.STOPPING, GroupPhase.STARTING):
        state += f" (phase {st.phase.value}, attempt {st.attempt})"
    elif d.state is GroupStatus.REBALANCING:
        waiting = sum(p.pending is not None and p.owner is not None for p in d.partitions)  # the rest: unclaimed
        why = [f"{_plural(len(d.unclaimed), 'partition')} without a Kafka 0.8 owner znode"] if d.unclaimed else []
        why += [f"{_plural(waiting, 'partition')} waiting for a migrating member's claim"] if waiting else []
        state += f" ({'; '.join(why)})"
    only_0_8 = d.layouts == (Layout.ZK_CLIENT.value,)
    if st is None and not coordinated and (d.members or only_0_8):
        where = "Kafka 0.8's layout only" if only_0_8 else "no member of the coordinator's"
        lines = [f"group {d.group}: {state}, {count} ({where}: no coordinator state)"]
    elif st is None:
        lines = [f"group {d.group}: {state} (no rebalance state: never rebalanced), {count}"]
    else:
        line = f"group {d.group}: {state}, generation {st.generation}, coordinator epoch {st.epoch}, {count}"
        if st.updated_ms:
            line += f", updated {datetime.fromtimestamp(st.updated_ms / 1000, UTC):%Y-%m-%dT%H:%M:%SZ}"
        lines = [line]
        if d.state is GroupStatus.FAILED:
            lines.append(f"last error (attempt {st.attempt}): {st.error or '(none recorded)'}")
        if d.membership_changed and coordinated and d.state is not GroupStatus.REBALANCING:
            lines.append(f"note: the members changed since generation {st.generation} was formed; a rebalance is due")
    if d.protocols:
        lines.append("protocols: " + ", ".join(f"{name} {n}" for name, n in d.protocols.items()))
    if d.kip848 is not None:
        e = d.kip848.epochs
        epochs = "(unreadable)" if e is None else f"group epoch {e.group_epoch}, assignment epoch {e.assignment_epoch}"
        behind = [
            m.consumer_id
            for m in d.members
            if m.protocol.value == "consumer" and not d.kip848.reconciled(m.consumer_id)
        ]
        lines.append(
            f"consumer protocol (KIP-848): {epochs}" + (f"; reconciling: {', '.join(behind)}" if behind else "")
        )
    if d.classic is not None:
        lines.append(d.classic.line())
    lines.extend(_migration_lines(d))
    return lines


def _kip848_line(d: GroupDescription, view: Kip848View) -> str:
    """The consumer protocol's epochs, and the members not reconciled to the assignment epoch yet."""
    e = view.epochs
    line = "consumer protocol (KIP-848): "
    line += "(unreadable)" if e is None else f"group epoch {e.group_epoch}, assignment epoch {e.assignment_epoch}"
    behind = [m.consumer_id for m in d.members if m.protocol.value == "consumer" and not view.reconciled(m.consumer_id)]
    return line + (f"; reconciling: {', '.join(behind)}" if behind else "")


def _migration_lines(d: GroupDescription) -> list[str]:
    m = d.migration
    if m is None:
        return []
    total = len(m["to_move"]) + len(m["moved"])
    if not m["done"]:
        return [
            f"migration: {len(m['moved'])} of {_plural(total, 'member')} moved to the coordinator; "
            f"still to move (zk-client): {', '.join(m['to_move'])}"
        ]
    line = "migration: no zk-client member left"
    if d.persisted is not None and d.persisted.legacy:
        line += f" (the coordinator's state still counts {len(d.persisted.legacy)} as legacy: a rebalance is due)"
    migrating = d.protocols.get("migrating", 0)
    if migrating:
        line += f"; {_plural(migrating, 'member')} still --migrating may be restarted without it"
    return [line]


# --- describe: members and offsets --------------------------------------------------------------------------------


def _member_row(m: MemberView, pending: bool) -> list[str]:
    reg = m.registration
    head = [m.consumer_id, _dash(m.host), m.protocol.value, _dash(m.counted_as)]
    tail = [str(m.owned), *([str(m.pending)] if pending else [])]
    if reg is None:
        return [*head, "?", "(unreadable)", "-", *tail]
    if reg.pattern is Pattern.STATIC:
        subscription = ",".join(f"{t}:{n}" for t, n in sorted(reg.subscription.items()))
    else:
        subscription = next(iter(reg.subscription))
    return [*head, reg.pattern.value, subscription, str(m.threads), *tail]


def _print_members(d: GroupDescription) -> None:
    if not d.members:
        click.echo("(no members)")
        return
    pending = any(m.pending for m in d.members)
    headers = ["CONSUMER-ID", "HOST", "PROTOCOL", "COUNTED-AS", "PATTERN", "SUBSCRIPTION", "THREADS", "PARTITIONS"]
    _table([*headers, *(["PENDING"] if pending else [])], [_member_row(m, pending) for m in d.members])
    if d.kip848 is not None and d.kip848.members:
        extra = {m.consumer_id: (m.registration.instance_id, m.registration.rack) for m in d.members if m.registration}
        click.echo()
        headers = ["CONSUMER-ID", "INSTANCE-ID", "RACK", "EPOCH", "STATE", "ASSIGNED", "REVOKING", "TARGET"]
        _table(headers, member_rows(d.kip848, extra))


def _note(p: PartitionView) -> str:
    notes = []
    if p.pending is not None:
        wait = "waits for the 0.8 owner to let go" if p.owner else "not claimed in Kafka 0.8's layout yet"
        notes.append(f"assigned to {p.pending}: {wait}")
    theirs = p.owners.get(Layout.COORDINATOR.value)
    if theirs is not None and DOUBLE_OWNER in p.ownership:
        notes.append(f"DOUBLE OWNER: coordinator's registry: {theirs}")
    elif theirs is not None and theirs not in (p.owner, p.pending):
        notes.append(f"coordinator's registry: {theirs} (gone)")  # neither the owner nor waiting: registered nowhere
    return "; ".join(notes)


def _partition_row(p: PartitionView) -> list[str]:
    owner = "-" if p.owner is None else p.owner if p.owner_live else f"{p.owner} (gone)"
    if p.owner is None and p.pending is None and None in p.owners.values():
        owner = "(unreadable)"  # an owner znode holds it, whose value cannot be decoded
    lag = _dash(p.lag) + ("*" if p.lag_from == "log_start" else "")
    return [p.topic, str(p.partition), owner, _dash(p.protocol), _dash(p.committed), _dash(p.log_end), lag]


def _print_partitions(d: GroupDescription) -> None:
    if not d.partitions:
        click.echo("(no owned, committed or subscribed partitions)")
        return
    headers = ["TOPIC", "PARTITION", "OWNER", "PROTOCOL", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG"]
    notes = [_note(p) for p in d.partitions]
    rows = [_partition_row(p) for p in d.partitions]
    if any(notes):
        headers.append("NOTE")
        rows = [[*row, note] for row, note in zip(rows, notes, strict=True)]
    _table(headers, rows, red=[bool(p.problems) for p in d.partitions])
    if any(p.lag_from == "log_start" for p in d.partitions):
        click.echo("* no committed offset: lag counted from the log start")
    _print_resets(d)


def _print_resets(d: GroupDescription) -> None:
    """Positions out of range now, and the last reset recorded per partition (``--offset-reset``)."""
    lines = []
    for p in d.partitions:
        if p.out_of_range is not None:
            lines.append(
                f"{p.topic}-{p.partition}: committed offset {p.committed} is {p.out_of_range} "
                f"[{p.log_start}, {p.high_water}]; the next consumer applies its --offset-reset policy"
            )
        r = p.last_reset
        if r is not None:
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r.at_ms / 1000))
            moved = f"held at {r.from_offset}" if r.to is None else f"reset from {r.from_offset} to {r.to}"
            lines.append(f"{p.topic}-{p.partition}: {moved} ({r.policy}: {r.reason}) by {r.consumer} at {when}")
    if lines:
        click.echo()
        click.echo("OFFSETS OUT OF RANGE")
        for line in lines:
            click.echo(line)


def _json(d: GroupDescription, section: dict[str, Any], views: set[str], problems: list[str]) -> dict[str, Any]:
    """The ``--json`` object: everything, or the group's name and the parts the view flags select."""
    out: dict[str, Any] = {"group": d.group}
    if "state" in views:
        out.update(d.state_json(), config=section)
    if "members" in views:
        out["members"] = [m.to_json() for m in d.members]
    if "offsets" in views:
        out["partitions"] = [p.to_json() for p in d.partitions]
    return {**out, "problems": problems, "ownership_problems": list(d.ownership_problems)}


@group.command()
@click.argument("name", metavar="GROUP")
@click.option("--state", "show_state", is_flag=True, help="Show the group's state: protocols, migration, config.")
@click.option("--members", "show_members", is_flag=True, help="Show the members: protocol, host, partitions.")
@click.option("--offsets", "show_offsets", is_flag=True, help="Show the partitions: owner, offsets, lag.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option(
    "--check",
    is_flag=True,
    help=f"Exit {CHECK_FAILED} if a partition is owned in both layouts at once or by a member that is gone.",
)
@zk_options
@data_dir_option
def describe(
    name: str,
    show_state: bool,
    show_members: bool,
    show_offsets: bool,
    as_json: bool,
    check: bool,
    zk: str,
    session_timeout: float,
    data_dir: Path | None,
) -> None:
    """Show GROUP from every layout it lives in (the coordinator's, Kafka 0.8's, or both while it migrates): its
    state, protocols and migration progress, its dynamic config in effect; its members with the protocol each speaks;
    and per partition the owner, committed offset, log end and lag.  --state, --members and --offsets show only
    those views (combinable; all three by default)."""
    validate_group(name)  # before connecting: a typo is refused even when ZooKeeper is down
    with ZkClient(zk_config(zk, session_timeout), name="group-describe") as client:
        description = describe_group(client, name, resolve_data_dir(data_dir))
        section = effective_config(description, read_config(client, name))
    problems = [*description.problems, *([section["problem"]] if section["problem"] else [])]
    views = {v for v, on in (("state", show_state), ("members", show_members), ("offsets", show_offsets)) if on}
    views = views or {"state", "members", "offsets"}
    if as_json:
        echo_json(_json(description, section, views, problems))
    else:
        _print_description(description, config_lines(name, section), views)
        _warn(problems, description.ownership_problems)
    if check and description.ownership_problems:
        raise SystemExit(CHECK_FAILED)


def _print_description(d: GroupDescription, config: list[str], views: set[str]) -> None:
    for n, view in enumerate(v for v in ("state", "members", "offsets") if v in views):
        if n:
            click.echo()
        if view == "state":
            for line in [*_header(d), *config]:
                click.echo(line)
        elif view == "members":
            _print_members(d)
        else:
            _print_partitions(d)
