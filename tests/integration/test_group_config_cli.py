"""``zkcoord group config get|set|delete`` and the config in ``zkcoord group describe``, against a real ZooKeeper.

The command line runs in process (click's runner: the same code as ``python -m zkcoord``; the refusals are run as
real processes in tests/hostile/test_cli_input.py).  A refused command is one ``Error:`` line, exit status 1, and
leaves ``/config/groups/<g>`` exactly as it was.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any, cast

import pytest
from click.testing import CliRunner, Result

from tests.integration.test_groups_cli import register
from zkcoord.admin.group_config import read_config, set_config
from zkcoord.cli.group_cmd import group
from zkcoord.errors import NoNodeError
from zkcoord.layout import paths
from zkcoord.layout.group_config import GroupConfig
from zkcoord.zk import Stat, ZkClient, ZkConfig

pytestmark = pytest.mark.integration


@pytest.fixture
def zk(zk_hosts: str) -> Iterator[ZkClient]:
    with ZkClient(ZkConfig.from_string(zk_hosts)) as client:
        client.ensure_paths(paths.COMMON_PATHS)
        yield client


def cli(zk_hosts: str, *args: str) -> Result:
    return CliRunner().invoke(group, [*args, "--zk", zk_hosts], catch_exceptions=False)


def stored(zk: ZkClient, name: str = "g") -> tuple[bytes, int] | None:
    try:
        data, stat = zk.get(paths.group_config(name))
    except NoNodeError:
        return None
    return data, stat.mzxid


def test_set_get_and_delete(zk: ZkClient, zk_hosts: str) -> None:
    empty = cli(zk_hosts, "config", "get", "g")
    assert (
        empty.exit_code == 0 and empty.stdout == "(no dynamic config for group g: the coordinator's settings apply)\n"
    )
    done = cli(zk_hosts, "config", "set", "g", "max.size=3", "assignor=range")
    assert done.exit_code == 0, done.output
    assert done.stdout == "assignor=range\nmax.size=3\n"
    assert json.loads(zk.get(paths.group_config("g"))[0]) == {
        "version": 1,
        "config": {"assignor": "range", "max.size": "3"},
    }
    # A set changes only the keys it names.
    assert cli(zk_hosts, "config", "set", "g", "rebalance.timeout.ms=500").stdout == (
        "assignor=range\nrebalance.timeout.ms=500\nmax.size=3\n"
    )
    assert cli(zk_hosts, "config", "get", "g").stdout == "assignor=range\nrebalance.timeout.ms=500\nmax.size=3\n"
    as_json = json.loads(cli(zk_hosts, "config", "get", "g", "--json").stdout)
    assert as_json == {
        "group": "g",
        "config": {"assignor": "range", "rebalance.timeout.ms": "500", "max.size": "3"},
        "version": 1,
    }
    assert cli(zk_hosts, "config", "delete", "g", "max.size", "assignor").stdout == "rebalance.timeout.ms=500\n"
    assert cli(zk_hosts, "config", "delete", "g", "assignor").stdout == (
        "nothing to delete at /config/groups/g\nrebalance.timeout.ms=500\n"
    )
    gone = cli(zk_hosts, "config", "delete", "g", "rebalance.timeout.ms")  # the last key: the znode goes
    assert gone.exit_code == 0 and stored(zk) is None
    cli(zk_hosts, "config", "set", "g", "max.size=1")
    assert cli(zk_hosts, "config", "delete", "g").exit_code == 0 and stored(zk) is None
    again = cli(zk_hosts, "config", "delete", "g")
    assert again.exit_code == 0 and again.stdout.startswith("nothing to delete at /config/groups/g")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["set", "g", "max_size=2"], "unknown group config key 'max_size' (known: assignor, rebalance.timeout.ms"),
        (["set", "g", "max.size=0"], "max.size must be an integer in 1..2147483647, got '0'"),
        (["set", "g", "max.size=2", "max.size=3"], "key 'max.size' given twice"),
        (["set", "g", "max.size"], "expected KEY=VALUE, got 'max.size'"),
        (["set", "g", "=2"], "expected KEY=VALUE, got '=2'"),
        (["set", "g", "max.size=2", "assignor=sticky"], "assignor must be one of uniform, range, got 'sticky'"),
        (["set", "g", "rebalance.timeout.ms=10"], "rebalance.timeout.ms must be an integer in 50..3600000"),
        (["set", "a/b", "max.size=2"], "invalid group name 'a/b'"),
        (["delete", "g", "max.size", "colour"], "unknown group config key 'colour'"),
        (["get", ".."], "invalid group name '..'"),
    ],
)
def test_bad_input_is_one_line_and_changes_nothing(zk: ZkClient, zk_hosts: str, args: list[str], message: str) -> None:
    set_config(zk, "g", GroupConfig(max_size=5))
    before = stored(zk)
    result = cli(zk_hosts, "config", *args)
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr.startswith("Error: ") and result.stderr.count("\n") == 1, result.stderr
    assert message in result.stderr
    assert stored(zk) == before


class Interleaved:
    """A client on which another operator's write lands between each read of the config and the write after it."""

    def __init__(self, zk: ZkClient, writes: list[Callable[[], object]]) -> None:
        self._zk, self._writes = zk, writes

    def get(self, path: str, watch: Any = None) -> tuple[bytes, Stat]:
        try:
            return self._zk.get(path, watch)
        finally:
            if self._writes and path == paths.group_config("g"):
                self._writes.pop(0)()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._zk, name)


def test_two_concurrent_sets_both_land(zk: ZkClient, zk_hosts: str) -> None:
    with ZkClient(ZkConfig.from_string(zk_hosts)) as other:
        # Absent when read, created by the other operator before our create; then changed again before our set.
        writes: list[Callable[[], object]] = [
            lambda: set_config(other, "g", GroupConfig(max_size=4)),
            lambda: set_config(other, "g", GroupConfig(rebalance_timeout_ms=700)),
        ]
        result = set_config(cast(ZkClient, Interleaved(zk, writes)), "g", GroupConfig(assignor="uniform"))
    assert not writes  # both writes landed between a read and a write of ours
    assert result == GroupConfig("uniform", 700, 4) == read_config(zk, "g").config


def test_describe_shows_the_config_in_effect_and_who_is_over_max_size(zk: ZkClient, zk_hosts: str) -> None:
    first = register(zk, "g", "g_a-1-0000000a", {"t": 1})
    register(zk, "g", "g_b-1-0000000b", {"t": 1})
    register(zk, "g", "g_c-1-0000000c", {"t": 1})
    assert first > 0
    plain = cli(zk_hosts, "describe", "g")
    assert "dynamic config: none (the coordinator's settings apply)" in plain.stdout.splitlines()
    set_config(zk, "g", GroupConfig(max_size=1, assignor="uniform"))
    lines = cli(zk_hosts, "describe", "g").stdout.splitlines()
    assert "dynamic config (/config/groups/g): assignor=uniform, max.size=1" in lines
    assert "over max.size 1, given nothing: g_b-1-0000000b, g_c-1-0000000c" in lines
    section = json.loads(cli(zk_hosts, "describe", "g", "--json").stdout)["config"]
    assert section == {
        "stored": {"assignor": "uniform", "max.size": "1"},
        "effective": {"assignor": "uniform", "rebalance.timeout.ms": None, "max.size": "1"},
        "over_max_size": ["g_b-1-0000000b", "g_c-1-0000000c"],
        "applied": True,
        "problem": None,
    }
    zk.set(paths.group_config("g"), b'{"version":1,"config":{"max.size":"many"}}')
    damaged = cli(zk_hosts, "describe", "g")
    assert damaged.exit_code == 0
    assert "dynamic config (/config/groups/g): unreadable, the coordinator's settings apply" in damaged.stdout
    assert damaged.stderr.startswith("warning: malformed group config at /config/groups/g: max.size must be")
