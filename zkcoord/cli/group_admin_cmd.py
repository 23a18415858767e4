"""``zkcoord group reset-offsets|checkpoint|checkpoints|delete``: administering an empty group, in the spirit of
``kafka-consumer-groups.sh --reset-offsets`` and ``--delete``, and seed 003's named checkpoints.

Output contract: ``reset-offsets`` prints its plan as a table on stdout (``--json``: one JSON object) and, unless
``--execute`` is given, changes nothing (a dry run, as Kafka's tool); the notes (clamped offsets, partitions left
alone, members that joined during the reset) are ``warning:`` or ``note:`` lines on stderr.  Bad input (a bad or
unknown group, topic, partition, date or checkpoint, a group with live members, two modes, both ``--dry-run`` and
``--execute``), a concurrent change, or an unreachable ZooKeeper is one ``Error: ...`` line and exit status 1, with
nothing written.
"""

from __future__ import annotations

import time
from pathlib import Path

import click

from zkcoord.admin.checkpoints import list_checkpoints, read_checkpoint, save_checkpoint, when
from zkcoord.admin.group_delete import delete_group
from zkcoord.admin.offset_reset import ResetPlan, apply_reset, members_now, plan_reset
from zkcoord.admin.reset_spec import parse_spec, parse_topics
from zkcoord.cli.common import data_dir_option, echo_json, echo_table, resolve_data_dir, zk_config, zk_options
from zkcoord.errors import ConfigurationError
from zkcoord.layout import paths
from zkcoord.layout.checkpoints import Checkpoint, validate_checkpoint
from zkcoord.layout.names import validate_group
from zkcoord.runtime.faults import fault_point
from zkcoord.runtime.journal import Journal
from zkcoord.zk import ZkClient

_RESET_EPILOG = """\b
Modes (exactly one):
  --to-earliest          the log's start
  --to-latest            the log's high water (what is in the log is skipped)
  --to-offset N          offset N
  --shift-by N           the committed offset plus N (N may be negative; no
                         committed offset: from the log start)
  --to-datetime ISO      the first record with a timestamp at or after ISO
                         (2025-11-21T16:00:00.000, Z or +01:00; no zone: local
                         time); none: the high water
  --to-checkpoint NAME   the offsets saved by `zkcoord group checkpoint GROUP NAME`
                         (partitions it does not hold are left alone)

\b
Every new offset is clamped into [log start, high water] of the partition's
log in --data-dir. Only a group without members is reset. --execute writes
every offset in one ZooKeeper transaction, each conditional on the version
read: a commit or a rebalance in between fails it, and nothing is written.
"""


def _rows(plan: ResetPlan) -> list[list[str]]:
    def dash(v: int | None) -> str:
        return "-" if v is None else str(v)

    return [
        [r.topic, str(r.partition), dash(r.current), dash(r.new) if r.new is not None else "(unchanged)",
         str(r.log_start), str(r.high_water), r.note]
        for r in plan.rows
    ]  # fmt: skip


@click.command("reset-offsets", epilog=_RESET_EPILOG)
@click.argument("name", metavar="GROUP")
@click.option("--topic", "topics", multiple=True, metavar="T[:P,...]", help="A topic, or some of its partitions.")
@click.option("--all-topics", is_flag=True, help="Every topic the group has committed offsets for.")
@click.option("--to-earliest", is_flag=True, help="To the log's start.")
@click.option("--to-latest", is_flag=True, help="To the log's high water.")
@click.option("--to-offset", metavar="N", help="To offset N.")
@click.option("--shift-by", metavar="N", help="By N from the committed offset (negative: back).")
@click.option("--to-datetime", metavar="ISO", help="To the first record at or after an ISO 8601 time.")
@click.option("--to-checkpoint", metavar="NAME", help="To the offsets of a checkpoint of the group.")
@click.option("--dry-run", is_flag=True, help="Show the plan only (the default).")
@click.option("--execute", is_flag=True, help="Apply the plan, in one transaction.")
@click.option("--json", "as_json", is_flag=True, help="Print the plan as one JSON object.")
@zk_options
@data_dir_option
def reset_offsets(
    name: str,
    topics: tuple[str, ...],
    all_topics: bool,
    to_earliest: bool,
    to_latest: bool,
    to_offset: str | None,
    shift_by: str | None,
    to_datetime: str | None,
    to_checkpoint: str | None,
    dry_run: bool,
    execute: bool,
    as_json: bool,
    zk: str,
    session_timeout: float,
    data_dir: Path | None,
) -> None:
    """Move GROUP's committed offsets of the partitions chosen (--topic T[:P,...] or --all-topics), in every layout
    the group lives in.  Refused while the group has members, as Kafka refuses it.  Without --execute, only shows
    what would be done."""
    validate_group(name)  # every argument is checked before connecting
    if dry_run and execute:
        raise ConfigurationError("give --dry-run or --execute, not both")
    spec = parse_spec(
        to_earliest=to_earliest,
        to_latest=to_latest,
        to_offset=to_offset,
        shift_by=shift_by,
        to_datetime=to_datetime,
        to_checkpoint=to_checkpoint,
    )
    selection = parse_topics(topics, all_topics)
    with ZkClient(zk_config(zk, session_timeout), name="group-reset") as client:
        saved = None if spec.checkpoint is None else read_checkpoint(client, name, spec.checkpoint)
        plan = plan_reset(client, name, spec, selection, data_dir=resolve_data_dir(data_dir), checkpoint=saved)
        written = 0
        joined: list[str] = []
        if execute:
            fault_point("admin.before_reset", Journal(None, "admin"))
            written = apply_reset(client, plan)
            joined = members_now(client, name)
    _report(plan, execute, written, joined, as_json)


def _report(plan: ResetPlan, executed: bool, written: int, joined: list[str], as_json: bool) -> None:
    layouts = [lay.value for lay in plan.layouts]
    if as_json:
        echo_json(
            {
                "group": plan.group,
                "mode": plan.spec.mode.value,
                "argument": plan.spec.text,
                "executed": executed,
                "layouts": layouts,
                "written": written,
                "partitions": [r.to_json() for r in plan.rows],
                "joined_during_reset": joined,
            }
        )
    else:
        headers = ["TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET", "LOG-START", "HIGH-WATER", "NOTE"]
        echo_table(headers, _rows(plan))
    clamped = sum(r.clamped for r in plan.rows)
    if clamped:
        click.echo(f"warning: {clamped} offset{'s' if clamped != 1 else ''} clamped to the log's range", err=True)
    if not executed:
        click.echo(f"note: dry run of {plan.spec.describe()}: nothing changed (add --execute to apply)", err=True)
    else:
        click.echo(
            f"note: reset {len(plan.changes)} partition{'s' if len(plan.changes) != 1 else ''} of group "
            f"{plan.group} in one transaction ({written} offset znodes written, layouts: {', '.join(layouts)})",
            err=True,
        )
    if joined:
        click.echo(f"warning: {', '.join(joined)} joined during the reset and may have read the old offsets", err=True)


@click.command("checkpoint")
@click.argument("name", metavar="GROUP")
@click.argument("checkpoint_name", metavar="NAME")
@click.option("--replace", is_flag=True, help="Replace a checkpoint of that name.")
@click.option("--json", "as_json", is_flag=True, help="Print the checkpoint as one JSON object.")
@zk_options
def checkpoint(name: str, checkpoint_name: str, replace: bool, as_json: bool, zk: str, session_timeout: float) -> None:
    """Save GROUP's committed offsets, merged across its members (and both layouts), as checkpoint NAME
    (/consumers/groups/GROUP/checkpoints/NAME); restore them with `group reset-offsets GROUP --all-topics
    --to-checkpoint NAME --execute`.  May be taken while the group consumes."""
    validate_group(name)
    validate_checkpoint(checkpoint_name)
    with ZkClient(zk_config(zk, session_timeout), name="group-checkpoint") as client:
        saved = save_checkpoint(client, name, checkpoint_name, int(time.time() * 1000), replace=replace)
    if as_json:
        echo_json({"group": name, "checkpoint": checkpoint_name, **_checkpoint_json(saved)})
        return
    plural = "s" if saved.partitions != 1 else ""
    click.echo(
        f"checkpoint {checkpoint_name} of group {name}: {saved.partitions} partition{plural} at "
        f"{when(saved.created_ms)} ({paths.checkpoint(name, checkpoint_name)})"
    )


def _checkpoint_json(saved: Checkpoint) -> dict[str, object]:
    return {
        "created_ms": saved.created_ms,
        "generation": saved.generation,
        "offsets": {t: {str(p): o for p, o in sorted(ps.items())} for t, ps in sorted(saved.offsets.items())},
    }


@click.command("checkpoints")
@click.argument("name", metavar="GROUP")
@click.argument("checkpoint_name", metavar="[NAME]", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@zk_options
def checkpoints(name: str, checkpoint_name: str | None, as_json: bool, zk: str, session_timeout: float) -> None:
    """List GROUP's checkpoints, or show the offsets of checkpoint NAME."""
    validate_group(name)
    if checkpoint_name is not None:
        validate_checkpoint(checkpoint_name)
    with ZkClient(zk_config(zk, session_timeout), name="group-checkpoints") as client:
        if checkpoint_name is not None:
            one = read_checkpoint(client, name, checkpoint_name)
            if as_json:
                echo_json({"group": name, "checkpoint": checkpoint_name, **_checkpoint_json(one)})
                return
            click.echo(f"checkpoint {checkpoint_name} of group {name}, taken {when(one.created_ms)}")
            rows = [[t, str(p), str(o)] for t, ps in sorted(one.offsets.items()) for p, o in sorted(ps.items())]
            echo_table(["TOPIC", "PARTITION", "OFFSET"], rows)
            return
        listed = list_checkpoints(client, name)
    if as_json:
        echo_json(
            {
                "group": name,
                "checkpoints": [
                    {"name": c.name, "problem": c.problem}
                    | ({} if c.checkpoint is None else _checkpoint_json(c.checkpoint))
                    for c in listed
                ],
            }
        )
        return
    if not listed:
        click.echo(f"(group {name} has no checkpoints)")
    rows = [
        [c.name, "(unreadable)", "-"] if c.checkpoint is None
        else [c.name, when(c.checkpoint.created_ms), str(c.checkpoint.partitions)]
        for c in listed
    ]  # fmt: skip
    if rows:
        echo_table(["CHECKPOINT", "TAKEN", "PARTITIONS"], rows)
    for c in listed:
        if c.problem:
            click.echo(f"warning: {c.problem}", err=True)


@click.command("delete")
@click.argument("name", metavar="GROUP")
@click.option("--keep-config", is_flag=True, help="Keep the group's dynamic config (/config/groups/GROUP).")
@click.option("--json", "as_json", is_flag=True, help="Print what was removed as one JSON object.")
@zk_options
def delete(name: str, keep_config: bool, as_json: bool, zk: str, session_timeout: float) -> None:
    """Delete GROUP, which must have no members: its offsets, state, checkpoints and every other znode of it in
    both layouts, and its dynamic config unless --keep-config; in one transaction, conditional on what was read."""
    validate_group(name)
    with ZkClient(zk_config(zk, session_timeout), name="group-delete") as client:
        report = delete_group(client, name, keep_config=keep_config)
    if as_json:
        echo_json(report.to_json())
        return
    kinds = report.kinds
    parts = [f"{kinds[k]} {label}" for k, label in (("offsets", "committed offsets"), ("checkpoints", "checkpoints"),
                                                     ("owners", "owner znodes")) if kinds[k]]  # fmt: skip
    parts += ["its state"] if kinds["state"] else []
    parts += [f"{kinds['other']} other znodes"] if kinds["other"] else []
    parts += ["its dynamic config"] if report.config else []
    click.echo(f"deleted group {name}: {', '.join(parts)} ({report.znodes + report.config} znodes under "
               f"{', '.join(report.roots)}{' and ' + paths.group_config(name) if report.config else ''})")  # fmt: skip


ADMIN_COMMANDS = (reset_offsets, checkpoint, checkpoints, delete)
