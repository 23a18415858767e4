"""compose.yaml: every service built from this repository runs a real zkcoord subcommand with valid options."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import pytest
import yaml

from zkcoord.cli import cli

ROOT = Path(__file__).resolve().parents[2]


def load_compose() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((ROOT / "compose.yaml").read_text())
    return doc


def parse_command(args: list[str]) -> click.Command:
    """Resolve ``args`` through the real click tree and parse every option, without running anything."""
    command: click.Command = cli
    name, rest = "zkcoord", list(args)
    while isinstance(command, click.Group):
        if not rest:
            raise click.UsageError(f"{name}: missing subcommand")
        name, *rest = rest
        sub = command.get_command(click.Context(command), name)
        if sub is None:
            raise click.UsageError(f"no such command {name!r}")
        command = sub
    command.make_context(name, rest)  # parses and converts every option; raises on any error
    return command


def test_ensemble_has_three_official_zookeeper_servers() -> None:
    services = load_compose()["services"]
    zks = [s for s in services.values() if str(s.get("image", "")).startswith("zookeeper:")]
    assert len(zks) == 3
    assert {s["environment"]["ZOO_MY_ID"] for s in zks} == {"1", "2", "3"}


SERVICES = {name: spec for name, spec in load_compose()["services"].items() if "build" in spec}


def test_brokers_producer_and_topic_init_are_present() -> None:
    roles = [spec["command"][1] for spec in SERVICES.values()]
    assert roles.count("broker") == 3
    assert "produce" in roles and "topic" in roles
    groups = {
        spec["command"][spec["command"].index("--group") + 1]
        for spec in SERVICES.values()
        if spec["command"][1] == "consume"
    }
    assert groups == {"billing", "audit"}


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_service_command_is_a_real_zkcoord_subcommand(name: str) -> None:
    command = SERVICES[name]["command"]
    assert command[0] == "zkcoord"
    parse_command([str(a) for a in command[1:]])  # raises click.UsageError/BadParameter if anything is off


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_service_shares_the_data_volume(name: str) -> None:
    assert any(v.startswith("zkcoord-data:") for v in SERVICES[name]["volumes"])


def test_the_checker_can_fail() -> None:
    with pytest.raises(click.UsageError):
        parse_command(["broker", "--id", "1", "--no-such-option"])
    with pytest.raises(click.UsageError):
        parse_command(["nosuchcommand"])
    with pytest.raises(click.BadParameter):
        parse_command(["broker", "--id", "minus-one"])
