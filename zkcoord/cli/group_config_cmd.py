"""``zkcoord group config get|set|delete``: a group's dynamic config, ``/config/groups/<g>`` (seed 000's ZK mode).

Output contract: ``get`` prints the keys set, one ``key=value`` line each (``--json``: one JSON object); ``set`` and
``delete`` print the config stored afterwards the same way.  Bad input (an unknown key, a bad value, ``key=value``
malformed, a bad group name) is refused before connecting, in one ``Error: ...`` line with exit status 1; nothing
stored changes.  A stored config that cannot be decoded is one ``Error:`` line for ``get``, ``set`` and a ``delete``
of some keys (``delete GROUP`` without keys removes it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import click

from zkcoord.admin.group_config import StoredConfig, UnreadableConfigError, delete_config, read_config, set_config
from zkcoord.admin.group_reads import Layout
from zkcoord.admin.groups import GroupDescription
from zkcoord.cli.common import ZkCoordGroup, echo_json, zk_config, zk_options
from zkcoord.errors import ConfigurationError
from zkcoord.layout import paths
from zkcoord.layout.group_config import KEYS, MAX_GROUP_SIZE, MAX_SIZE, GroupConfig, check_keys
from zkcoord.layout.names import validate_group
from zkcoord.zk import ZkClient

_KEYS_HELP = f"""\b
Keys (unset: the coordinator's own setting applies):
  assignor=uniform|range      the group's assignor (default: the coordinator's
                              --assignor for eager groups, uniform for incremental ones)
  rebalance.timeout.ms=N      how long a rebalance step waits for its acknowledgements,
                              50..3600000 (default: the coordinator's --rebalance-timeout;
                              a stop step adds the members' poll intervals either way)
  max.size=N                  the most members the group has, 1..{MAX_GROUP_SIZE}: those
                              registered last beyond it are given nothing

A change is applied at the group's next examination, which it triggers: the group is rebalanced only if the new
config changes its assignment.
"""


@click.group(cls=ZkCoordGroup, epilog=_KEYS_HELP)
def config() -> None:
    """Get, set or delete a group's dynamic config (/config/groups/GROUP).

    The config may be set before the group exists, and outlives it.
    """


def _echo(group: str, stored: GroupConfig) -> None:
    if stored.empty:
        click.echo(f"(no dynamic config for group {group}: the coordinator's settings apply)")
    for key, value in stored.to_mapping().items():
        click.echo(f"{key}={value}")


def parse_pairs(pairs: Sequence[str]) -> GroupConfig:
    """``key=value`` arguments as a config.  :raises ConfigurationError: a malformed pair, a key given twice, an
    unknown key or a bad value (one line)."""
    values: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ConfigurationError(f"expected KEY=VALUE, got {pair[:60]!r} (keys: {', '.join(KEYS)})")
        if key in values:
            raise ConfigurationError(f"key {key[:60]!r} given twice")
        values[key] = value
    return GroupConfig.from_mapping(values)


@config.command("get")
@click.argument("name", metavar="GROUP")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object: group, config (the keys set), version.")
@zk_options
def get(name: str, as_json: bool, zk: str, session_timeout: float) -> None:
    """Show the keys set in GROUP's dynamic config."""
    validate_group(name)
    with ZkClient(zk_config(zk, session_timeout), name="group-config") as client:
        stored = read_config(client, name)
    if stored.problem is not None:
        raise UnreadableConfigError(name, stored.problem)
    if as_json:
        echo_json({"group": name, "config": stored.effective.to_mapping(), "version": stored.version})
        return
    _echo(name, stored.effective)


@config.command("set", epilog=_KEYS_HELP)
@click.argument("name", metavar="GROUP")
@click.argument("pairs", metavar="KEY=VALUE...", nargs=-1, required=True)
@zk_options
def set_(name: str, pairs: tuple[str, ...], zk: str, session_timeout: float) -> None:
    """Set keys of GROUP's dynamic config (the other keys keep their values).

    Every pair is validated before anything is written; the write is conditional on the config read, so two
    concurrent sets of different keys both land.
    """
    validate_group(name)
    changes = parse_pairs(pairs)
    with ZkClient(zk_config(zk, session_timeout), name="group-config") as client:
        stored = set_config(client, name, changes)
    _echo(name, stored)


@config.command("delete")
@click.argument("name", metavar="GROUP")
@click.argument("keys", metavar="[KEY]...", nargs=-1)
@zk_options
def delete(name: str, keys: tuple[str, ...], zk: str, session_timeout: float) -> None:
    """Unset KEYs of GROUP's dynamic config; without a KEY, delete the whole config (also one that cannot be read).

    The coordinator's own settings apply to every key unset.
    """
    validate_group(name)
    check_keys(keys)
    with ZkClient(zk_config(zk, session_timeout), name="group-config") as client:
        deleted, left = delete_config(client, name, keys)
    if not deleted:
        click.echo(f"nothing to delete at {paths.group_config(name)}")
    _echo(name, left)


# --- in ``zkcoord group describe`` ----------------------------------------------------------------------------------


def effective_config(description: GroupDescription, stored: StoredConfig) -> dict[str, Any]:
    """The ``config`` object of ``group describe --json``: ``stored`` (the keys set; null: none, or unreadable),
    ``effective`` (every key: its value, or null where the coordinator's own setting applies), ``over_max_size``
    (the members given nothing for it: the last registered readable ones beyond it, as the coordinator counts;
    none while zk-client members share the group, where the config is not applied) and ``problem``."""
    effective = stored.effective
    migrating = bool(description.persisted and description.persisted.legacy) or any(
        m.protocol.claims_0_8 for m in description.members
    )
    readable = {
        m.consumer_id: r.czxid
        for m in description.members
        if (r := m.in_layout(Layout.COORDINATOR)) is not None and r.registration is not None
    }
    return {
        "stored": None if stored.config is None else stored.config.to_mapping(),
        "effective": {key: effective.to_mapping().get(key) for key in KEYS},
        "over_max_size": [] if migrating else effective.over_max_size(readable),
        "applied": not migrating,
        "problem": None if stored.problem is None else str(stored.problem),
    }


def config_lines(group: str, section: dict[str, Any]) -> list[str]:
    """The text of ``section`` (:func:`effective_config`) for ``group describe``."""
    where = paths.group_config(group)
    if section["problem"] is not None:
        head = f"dynamic config ({where}): unreadable, the coordinator's settings apply"
    elif not section["stored"]:
        head = "dynamic config: none (the coordinator's settings apply)"
    else:
        head = f"dynamic config ({where}): " + ", ".join(f"{k}={v}" for k, v in section["stored"].items())
    if section["stored"] and not section["applied"]:
        head += " -- not applied while zk-client members share the group"
    lines = [head]
    if section["over_max_size"]:
        size = section["effective"][MAX_SIZE]
        lines.append(f"over max.size {size}, given nothing: {', '.join(section['over_max_size'])}")
    return lines
