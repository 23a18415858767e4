"""Every ``zkcoord`` command the README shows is a real subcommand with options that parse (the README is a contract:
a renamed option or command fails here, not in a new user's shell)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import click
import pytest

from tests.unit.test_compose import parse_command

README = Path(__file__).resolve().parents[2] / "README.md"


def readme_commands() -> list[list[str]]:
    """The ``zkcoord ...`` lines of the README's shell blocks, split as a shell would, comments and ``&`` dropped."""
    commands: list[list[str]] = []
    for block in re.findall(r"```sh\n(.*?)```", README.read_text(), flags=re.S):
        for line in block.splitlines():
            lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|")
            lexer.whitespace_split = True
            args: list[str] = []
            for word in [*lexer, ";"]:
                if word.strip(";&|"):
                    args.append(word)
                    continue
                if args[:1] == ["zkcoord"]:
                    commands.append(args[1:])
                args = []
    return commands


def test_the_readme_shows_commands() -> None:
    assert len(readme_commands()) >= 20


@pytest.mark.parametrize("args", readme_commands(), ids=lambda a: " ".join(a)[:60])
def test_readme_command_parses(args: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A placeholder such as runs/<run>/safe names a directory the reader has: make one, so that options which must
    # exist parse as they would for the reader.
    monkeypatch.chdir(tmp_path)
    concrete = [re.sub(r"<\w+>", "x", a) for a in args]
    for before, after in zip(args, concrete, strict=True):
        if before != after:
            (tmp_path / after).mkdir(parents=True)
    parse_command(concrete)  # raises click.UsageError / BadParameter on a wrong command or option


def test_the_check_can_fail() -> None:
    with pytest.raises(click.UsageError):
        parse_command(["group", "reset-offsets", "billing", "--to-yesterday"])
