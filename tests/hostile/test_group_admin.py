"""Group administration against state it did not expect: a commit landing between a reset's read and its
transaction, an offset znode that cannot be decoded, a checkpoint written by hand."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from tests.integration.test_group_admin import G, build, offsets
from zkcoord.cli.group_cmd import group
from zkcoord.data.topics import TopicAdmin
from zkcoord.layout import paths
from zkcoord.layout.registrations import BrokerRegistration
from zkcoord.layout.znodes import encode_int
from zkcoord.runtime.faults import ENV
from zkcoord.testbed.procs import wait_until
from zkcoord.zk import ZkClient, ZkConfig

pytestmark = pytest.mark.integration


@pytest.fixture
def zk(zk_hosts: str) -> Iterator[ZkClient]:
    with ZkClient(ZkConfig.from_string(zk_hosts)) as client:
        client.ensure_paths(paths.COMMON_PATHS)
        client.create(paths.broker(0), BrokerRegistration("h0", 9092, 1763740800000).encode(), ephemeral=True)
        TopicAdmin(client).create("orders", 3)
        yield client


def cli(*args: str) -> Result:
    return CliRunner().invoke(group, list(args), catch_exceptions=False)


def _stopped(pid: int) -> bool:
    """Whether process ``pid`` is stopped (SIGSTOP: state ``T`` in /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "T"


def test_a_commit_between_the_plan_and_its_transaction_is_not_overwritten(
    zk: ZkClient, zk_hosts: str, tmp_path: Path
) -> None:
    """The reset stops itself after reading (a fault point), a consumer-like commit lands, the reset goes on: its
    transaction fails on the committed znode's version, nothing of the plan is written, and it says so."""
    build(zk, tmp_path)
    args = ["group", "reset-offsets", G, "--topic", "orders", "--to-earliest", "--execute", "--zk", zk_hosts]
    proc = subprocess.Popen(
        [sys.executable, "-m", "zkcoord", *args, "--data-dir", str(tmp_path)],
        env={**os.environ, ENV: "admin.before_reset=pause"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_until(lambda: _stopped(proc.pid), 60, "the reset paused before its transaction")
        zk.set(paths.offset(G, "orders", 0), encode_int(9))  # the commit of a consumer the reset did not see
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, err
    assert out == ""
    assert err.startswith(f"Error: znode {paths.offset(G, 'orders', 0)} changed while the reset was planned"), err
    assert len(err.strip().splitlines()) == 1
    assert offsets(zk) == {0: 9, 1: 20, 2: None}  # the commit stands; orders-1 and -2 were not reset either


def test_an_unreadable_offset_is_shown_and_overwritten_by_a_reset_but_refused_by_a_checkpoint(
    zk: ZkClient, zk_hosts: str, tmp_path: Path
) -> None:
    build(zk, tmp_path)
    zk.set(paths.offset(G, "orders", 1), b"twenty")
    taken = cli("checkpoint", G, "cp", "--zk", zk_hosts)
    assert taken.exit_code == 1
    assert taken.stderr.startswith("Error: the committed offset of orders-1 cannot be read"), taken.stderr
    assert zk.exists(paths.checkpoint(G, "cp")) is None

    fixed = cli("reset-offsets", G, "--topic", "orders:1", "--to-latest", "--execute",
                "--zk", zk_hosts, "--data-dir", str(tmp_path))  # fmt: skip
    assert fixed.exit_code == 0, fixed.output
    assert "committed offset unreadable" in fixed.stdout
    assert offsets(zk) == {0: 4, 1: 20, 2: None}


def test_a_checkpoint_written_by_hand_is_refused_with_its_path(zk: ZkClient, zk_hosts: str, tmp_path: Path) -> None:
    build(zk, tmp_path)
    path = paths.checkpoint(G, "forged")
    zk.create(path, b'{"created_ms":1,"offsets":{"orders":{"0":-5}},"version":1}', makepath=True)
    restored = cli("reset-offsets", G, "--all-topics", "--to-checkpoint", "forged", "--execute",
                   "--zk", zk_hosts, "--data-dir", str(tmp_path))  # fmt: skip
    assert restored.exit_code == 1
    assert restored.stderr.startswith("Error: ") and path in restored.stderr and "bad offset -5" in restored.stderr
    assert len(restored.stderr.strip().splitlines()) == 1
    assert offsets(zk) == {0: 4, 1: 20, 2: None}
    listed = cli("checkpoints", G, "--zk", zk_hosts)
    assert listed.exit_code == 0
    assert listed.stdout.splitlines()[1].split() == ["forged", "(unreadable)", "-"]
    assert listed.stderr.startswith("warning: ") and path in listed.stderr
