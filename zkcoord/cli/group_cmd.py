"""``zkcoord group list|describe``: read-only views of consumer groups, like ``kafka-consumer-groups.sh --describe``
(and ``zkcoord group config``, the groups' dynamic configs: :mod:`zkcoord.cli.group_config_cmd`).

Output contract: ``--json`` prints exactly one JSON object on stdout (``GroupDescription.to_json()`` or
``{"groups": [...]}``), with the problems found inside it.  Otherwise stdout holds the tables and every problem (a
malformed znode, an unreadable log) is one ``warning: ...`` line on stderr; problems never change the exit status.
An unknown group, an invalid name or an unreachable ZooKeeper is one ``Error: ...`` line and exit status 1.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import click

from zkcoord.admin.group_config import read_config
from zkcoord.admin.groups import GroupDescription, GroupStatus, MemberView, PartitionView, consumer_of, describe_group
from zkcoord.admin.groups import list_groups as read_groups
from zkcoord.cli.common import ZkCoordGroup, data_dir_option, echo_json, resolve_data_dir, zk_config, zk_options
from zkcoord.cli.group_config_cmd import config, config_lines, effective_config
from zkcoord.layout.names import validate_group
from zkcoord.layout.registrations import Pattern
from zkcoord.zk import ZkClient


@click.group(cls=ZkCoordGroup)
def group() -> None:
    """List and describe consumer groups (/consumers/groups); get, set and delete their dynamic configs
    (/config/groups)."""


group.add_command(config)


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """Print left-aligned columns separated by two spaces, Kafka's tool style."""
    widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]
    for row in [headers, *rows]:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())


def _dash(value: object | None) -> str:
    return "-" if value is None else str(value)


@group.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@zk_options
def list_(as_json: bool, zk: str, session_timeout: float) -> None:
    """List groups with their member count, state and generation."""
    with ZkClient(zk_config(zk, session_timeout), name="group-list") as client:
        summaries = read_groups(client)
    if as_json:
        echo_json({"groups": [s.to_json() for s in summaries]})
        return
    _table(
        ["GROUP", "MEMBERS", "STATE", "GENERATION"],
        [[s.group, str(s.members), s.state.value, _dash(s.generation)] for s in summaries],
    )
    for s in summaries:
        for problem in s.problems:
            click.echo(f"warning: {problem}", err=True)


def _header(d: GroupDescription) -> list[str]:
    st = d.persisted
    count = f"{len(d.members)} member{'' if len(d.members) == 1 else 's'}"
    if st is None:
        return [f"group {d.group}: {d.state.value} (no rebalance state: never rebalanced), {count}"]
    state = d.state.value
    if d.state is GroupStatus.REBALANCING:
        state += f" (phase {st.phase.value}, attempt {st.attempt})"
    line = f"group {d.group}: {state}, generation {st.generation}, coordinator epoch {st.epoch}, {count}"
    if st.updated_ms:
        line += f", updated {datetime.fromtimestamp(st.updated_ms / 1000, UTC):%Y-%m-%dT%H:%M:%SZ}"
    lines = [line]
    if d.state is GroupStatus.FAILED:
        lines.append(f"last error (attempt {st.attempt}): {st.error or '(none recorded)'}")
    if d.membership_changed and d.state is GroupStatus.STABLE:
        lines.append(f"note: the members changed since generation {st.generation} was formed; a rebalance is due")
    return lines


def _member_row(m: MemberView, owned: Counter[str]) -> list[str]:
    reg = m.registration
    if reg is None:
        return [m.consumer_id, "?", "(unreadable)", "-", str(owned[m.consumer_id])]
    if reg.pattern is Pattern.STATIC:
        subscription = ",".join(f"{t}:{n}" for t, n in sorted(reg.subscription.items()))
    else:
        subscription = next(iter(reg.subscription))
    return [m.consumer_id, reg.pattern.value, subscription, str(m.threads), str(owned[m.consumer_id])]


def _partition_row(p: PartitionView) -> list[str]:
    owner = "-" if p.owner is None else p.owner if p.owner_live else f"{p.owner} (gone)"
    lag = _dash(p.lag) + ("*" if p.lag_from == "log_start" else "")
    return [p.topic, str(p.partition), owner, _dash(p.committed), _dash(p.log_end), lag]


def _print_description(d: GroupDescription, config: list[str]) -> None:
    for line in [*_header(d), *config]:
        click.echo(line)
    click.echo()
    owned = Counter(consumer_of(p.owner) for p in d.partitions if p.owner is not None)
    if d.members:
        headers = ["CONSUMER-ID", "PATTERN", "SUBSCRIPTION", "THREADS", "PARTITIONS"]
        _table(headers, [_member_row(m, owned) for m in d.members])
    else:
        click.echo("(no members)")
    click.echo()
    if d.partitions:
        headers = ["TOPIC", "PARTITION", "OWNER", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG"]
        _table(headers, [_partition_row(p) for p in d.partitions])
    else:
        click.echo("(no owned or committed partitions)")
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


@group.command()
@click.argument("name", metavar="GROUP")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@zk_options
@data_dir_option
def describe(name: str, as_json: bool, zk: str, session_timeout: float, data_dir: Path | None) -> None:
    """Show GROUP: its state, its dynamic config in effect, its members, and per partition the owner, committed
    offset, log end and lag."""
    validate_group(name)  # before connecting: a typo is refused even when ZooKeeper is down
    with ZkClient(zk_config(zk, session_timeout), name="group-describe") as client:
        description = describe_group(client, name, resolve_data_dir(data_dir))
        section = effective_config(description, read_config(client, name))
    problems = [*description.problems, *([section["problem"]] if section["problem"] else [])]
    if as_json:
        echo_json({**description.to_json(), "config": section, "problems": problems})
        return
    _print_description(description, config_lines(name, section))
    for problem in problems:
        click.echo(f"warning: {problem}", err=True)
