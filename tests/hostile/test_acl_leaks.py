"""Credentials never leak (docs/security.md): not in a command's debug log, its errors, or its journal."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli import run_cli
from zkcoord.admin.acl_setup import secure_tree
from zkcoord.layout.acl import Credential
from zkcoord.zk import ZkConfig

pytestmark = pytest.mark.integration

SECRET = "c-secret-9f3a"  # noqa: S105 -- a test credential
ENV = {"ZK_COORD": f"coord:{SECRET}", "ZK_MEMBER": "member:m-secret-77b1"}


def test_the_password_is_not_in_a_debug_log(zk_hosts: str, tmp_path: Path) -> None:
    secure_tree(ZkConfig.from_string(zk_hosts), Credential("coord", SECRET), Credential("member", "m-secret-77b1"))
    done = run_cli("-vv", "topic", "list", "--zk", zk_hosts, "--zk-auth", "env:ZK_COORD", env=ENV)
    assert done.returncode == 0, done.stderr
    assert "Sending request" in done.stderr  # kazoo's debug log is on: what it would show of the session is shown
    assert SECRET not in done.stderr + done.stdout
