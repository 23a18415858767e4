"""compose.yaml: every service built from this repository runs a real zkcoord subcommand with valid options."""

from __future__ import annotations

import subprocess
import sys
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


#: Runs zkcoord's command line with the spark extra's packages (and the dev extra's) made unimportable, as in the
#: image, which installs zkcoord without extras.
WITHOUT_EXTRAS = """
import importlib.abc, sys
class Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.partition(".")[0] in ("pyspark", "matplotlib", "numpy", "pandas", "yaml", "pytest"):
            raise ModuleNotFoundError(f"No module named {name!r}")
sys.meta_path.insert(0, Absent())
from zkcoord.cli import cli
cli(sys.argv[1:], prog_name="zkcoord")
"""


@pytest.mark.parametrize("command", sorted({spec["command"][1] for spec in SERVICES.values()}))
def test_the_image_commands_run_without_the_extras(command: str) -> None:
    out = subprocess.run(
        [sys.executable, "-c", WITHOUT_EXTRAS, command, "--help"], capture_output=True, text=True, timeout=60,
        check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]


def test_the_local_override_replaces_every_image_it_cannot_pull() -> None:
    """deploy/compose.local.yaml: the ZooKeeper servers on the image built from Debian's package, every zkcoord service
    built on the local base from the host's wheels; nothing else (prometheus stays the official image's)."""
    override = yaml.safe_load((ROOT / "deploy" / "compose.local.yaml").read_text())["services"]
    services = load_compose()["services"]
    zks = {name for name, s in services.items() if str(s.get("image", "")).startswith("zookeeper:")}
    assert {name for name, s in override.items() if s["image"] == "zkcoord-zookeeper:local"} == zks
    built = {name for name, s in override.items() if "build" in s}
    assert built == set(SERVICES)
    for name in built:
        assert override[name]["build"]["args"]["BASE"] == "zkcoord-base:bookworm"
        assert "--no-index" in override[name]["build"]["args"]["PIP_OPTIONS"]
    assert set(override) <= set(services)
