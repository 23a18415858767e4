"""A subscription regex outside the topic-pattern dialect (``zkcoord/layout/topic_regex.py``), typed on the command
line: one ``Error:`` line saying what and where, a non-zero exit, and nothing registered.  Both protocols' consumers
(``--protocol zk-client`` too) and both lists.

Real ZooKeeper (the suite's server, a chroot per test), real ``python -m zkcoord`` processes (tests/cli.py).
"""

from __future__ import annotations

import pytest
from kazoo.client import KazooClient

from tests.cli import run_cli
from zkcoord.layout import legacy_paths, paths

pytestmark = pytest.mark.integration

#: (arguments, what the error line says): each pattern compiles in Python, and Java reads it otherwise or not at all
CASES = [
    (["--whitelist", "(?i)orders"], "at position 0, inline flags"),
    (["--blacklist", "orders,payments"], "Kafka 0.8's TopicFilter read ',' as '|'"),
    (["--whitelist", "[[a]]rders", "--protocol", "zk-client"], "Java reads a nested class"),
    (["--whitelist", "a{,2}"], "Python reads {,n} as {0,n}, Java refuses it"),
]


@pytest.mark.parametrize(("args", "expect"), CASES, ids=[c[0][1] for c in CASES])
def test_a_pattern_outside_the_dialect_is_one_line_and_registers_nothing(
    zk_hosts: str, zk_client: KazooClient, args: list[str], expect: str
) -> None:
    out = run_cli("consume", "--group", "g", *args, "--zk", zk_hosts, timeout=60)
    assert out.returncode != 0 and "Traceback" not in out.stderr, out.stderr
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: invalid regex "), out.stderr
    assert expect in lines[0] and "docs/consumer.md" in lines[0], lines[0]
    assert zk_client.exists(paths.group_ids("g")) is None and zk_client.exists(legacy_paths.ids("g")) is None
