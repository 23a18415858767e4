"""ZooKeeper ACLs (``--zk-auth``, docs/security.md): who is refused what, against the suite's real ZooKeeper."""

from __future__ import annotations

import dataclasses
import subprocess
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.cli import run_cli
from tests.ledger import Ledger
from zkcoord.admin.acl_setup import secure_tree
from zkcoord.errors import AccessRefusedError, CodecError, ConfigurationError, ZkError
from zkcoord.layout import paths
from zkcoord.layout.acl import POLICY, AclPolicy, Credential
from zkcoord.layout.group_state import GroupPhase, GroupState
from zkcoord.testbed.procs import ChildProcess, wait_until
from zkcoord.zk import ZkClient, ZkConfig

pytestmark = pytest.mark.integration

COORD = Credential("coord", "c-secret")
MEMBER = Credential("member", "m-secret")
G = "g"
A, B = f"{G}_h-1-0000000a", f"{G}_h-1-0000000b"


@pytest.fixture
def secured(zk_hosts: str) -> str:
    secure_tree(ZkConfig.from_string(zk_hosts), COORD, MEMBER)
    return zk_hosts


@pytest.fixture
def clients(secured: str) -> Iterator[dict[str, ZkClient]]:
    """coordinator, member A (its own per-member id), member B's process acting against A, and no credentials."""
    base = ZkConfig.from_string(secured)
    with ExitStack() as stack:
        made = {
            "coord": ZkClient(dataclasses.replace(base, auth=COORD)),
            "a": ZkClient(dataclasses.replace(base, auth=MEMBER, consumer_id=A)),
            "b": ZkClient(dataclasses.replace(base, auth=MEMBER, consumer_id=B)),
            "anon": ZkClient(base),
        }
        yield {name: stack.enter_context(client) for name, client in made.items()}


def test_zk_secure_publishes_the_documented_policy_that_only_the_coordinator_may_change(
    clients: dict[str, ZkClient],
) -> None:
    """``/config/acl`` (docs/zookeeper-layout.md; the layout's live-cluster test runs without ACLs, so it is here)."""
    data, _ = clients["anon"].get(POLICY)
    policy = AclPolicy.decode(data)
    assert (policy.role_of(COORD), policy.role_of(MEMBER)) == ("coordinator", "member")
    for who in ("anon", "a"):
        with pytest.raises(AccessRefusedError):
            clients[who].set(POLICY, data)


def _group_with_a_command(c: dict[str, ZkClient]) -> str:
    """Member A registers and makes its channel; the coordinator writes the state, an owner and a command to A."""
    a, coord = c["a"], c["coord"]
    a.ensure_path(paths.channel(G, A))
    a.create(paths.member(G, A), b"{}", ephemeral=True, makepath=True)
    coord.ensure_path(paths.owners(G, "t"))
    coord.create(paths.owner(G, "t", 0), A.encode() + b"-0")
    coord.create(paths.group_state(G), b"{}")
    return coord.create(f"{paths.channel(G, A)}/cmd-1-1-stop-", b"{}", sequence=True)


@pytest.mark.parametrize("who", ["anon", "b"])
def test_a_stranger_or_another_member_is_refused_every_coordinator_write(
    clients: dict[str, ZkClient], who: str
) -> None:
    command = _group_with_a_command(clients)
    z = clients[who]
    refused = {
        "write a command": lambda: z.create(f"{paths.channel(G, A)}/cmd-9-9-start-", b"{}", sequence=True),
        "write group state": lambda: z.set(paths.group_state(G), b"{}"),
        "write an owner znode": lambda: z.set(paths.owner(G, "t", 0), b"x-0"),
        "create an owner znode": lambda: z.create(paths.owner(G, "t", 1), b"x-0"),
        "delete another member's command": lambda: z.delete(command),
        "delete another member's registration": lambda: z.delete(paths.member(G, A)),
        "overwrite another member's registration": lambda: z.set(paths.member(G, A), b"{}"),
        "write a topic": lambda: z.create(paths.topic("t"), b"{}"),
        "elect itself": lambda: z.create(paths.COORDINATOR, b"{}", ephemeral=True),
    }
    attempt: Callable[[], object]
    for what, attempt in refused.items():
        with pytest.raises(AccessRefusedError):
            attempt()
            pytest.fail(f"{who} could {what}")
    # ...and everyone reads everything
    assert z.get(paths.group_state(G))[0] == b"{}"
    assert z.get_children(paths.channel(G, A)) == [command.rpartition("/")[2]]


def test_a_member_registers_itself_and_acknowledges_its_own_commands(clients: dict[str, ZkClient]) -> None:
    command = _group_with_a_command(clients)
    a = clients["a"]
    a.set(paths.member(G, A), b'{"again":1}')  # its own registration, rewritten
    txn = a.transaction()  # its acknowledgement: the delete and the channel's record, as zkcoord.consumer.acks
    txn.delete(command)
    txn.set_data(paths.channel(G, A), command.rpartition("/")[2].encode())
    txn.commit()
    assert clients["coord"].get_children(paths.channel(G, A)) == []
    b = clients["b"]  # another member registers too, and commits offsets: members' rights
    b.ensure_path(paths.channel(G, B))
    b.create(paths.member(G, B), b"{}", ephemeral=True, makepath=True)
    b.ensure_path(paths.offsets(G, "t"))
    b.create(paths.offset(G, "t", 0), b"5")
    a.set(paths.offset(G, "t", 0), b"6")  # the partition moved to A: A commits it
    with pytest.raises(AccessRefusedError):
        clients["anon"].set(paths.offset(G, "t", 0), b"0")


def test_a_member_may_not_create_the_shared_parents(zk_hosts: str) -> None:
    secure_tree(ZkConfig.from_string(zk_hosts), COORD, MEMBER)
    a = ZkClient(ZkConfig.from_string(zk_hosts, auth=MEMBER, consumer_id=A))
    with a, pytest.raises(AccessRefusedError, match="coordinator side creates it"):
        a.ensure_path(paths.broker(7))


def test_credentials_without_a_policy_or_of_no_role_are_one_clear_error(zk_hosts: str) -> None:
    with pytest.raises(ConfigurationError, match="no ACL policy"):
        ZkClient(ZkConfig.from_string(zk_hosts, auth=MEMBER)).start()
    secure_tree(ZkConfig.from_string(zk_hosts), COORD, MEMBER)
    with pytest.raises(ConfigurationError, match="neither the coordinator nor the member"):
        ZkClient(ZkConfig.from_string(zk_hosts, auth=Credential("eve", "x"))).start()


def _one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 1, result.stderr
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    return lines[0]


def test_bad_credential_sources_are_one_error_line(zk_hosts: str, tmp_path: Path) -> None:
    line = _one_error_line(run_cli("topic", "list", "--zk", zk_hosts, "--zk-auth", str(tmp_path / "missing")))
    assert "cannot read the credentials file" in line
    (tmp_path / "bad").write_text("no-colon-here\n")
    line = _one_error_line(run_cli("topic", "list", "--zk", zk_hosts, "--zk-auth", str(tmp_path / "bad")))
    assert "expected one line user:password" in line and "no-colon" not in line
    line = _one_error_line(run_cli("topic", "list", "--zk", zk_hosts, "--zk-auth", "env:ZKCOORD_TEST_NOT_SET"))
    assert "ZKCOORD_TEST_NOT_SET is not set" in line


def test_a_refused_cli_write_is_one_error_line(secured: str) -> None:
    env = {"ZK_MEMBER": "member:m-secret", "ZK_COORD": "coord:c-secret"}
    args = ("group", "config", "set", G, "max.size=3", "--zk", secured)
    line = _one_error_line(run_cli(*args, "--zk-auth", "env:ZK_MEMBER", env=env))
    assert "refused" in line
    line = _one_error_line(run_cli(*args, env=env))
    assert "refused" in line
    ok = run_cli(*args, "--zk-auth", "env:ZK_COORD", env=env)
    assert ok.returncode == 0, ok.stderr


@pytest.mark.slow
def test_a_broker_and_two_consumers_with_credentials_rebalance_cleanly(secured: str, tmp_path: Path) -> None:
    env = {"ZK_MEMBER": "member:m-secret", "ZK_COORD": "coord:c-secret"}
    journal, data = tmp_path / "journal", tmp_path / "data"
    common = ["--zk", secured, "--session-timeout", "2", "--journal", str(journal)]
    coord = [*common, "--zk-auth", "env:ZK_COORD"]
    member = [*common, "--zk-auth", "env:ZK_MEMBER", "--data-dir", str(data), "--auto-commit-interval", "0.5"]
    reader = ZkClient(ZkConfig.from_string(secured))

    def stable(members: int) -> bool:
        try:
            state = GroupState.decode(reader.get(paths.group_state(G))[0])
        except (ZkError, CodecError):  # not written yet, or half-written
            return False
        return state.phase is GroupPhase.STABLE and len(state.members) == members

    with ExitStack() as stack:
        stack.enter_context(reader)
        stack.enter_context(ChildProcess(["broker", "--id", "1", *coord], tmp_path / "broker.log", env=env))
        wait_until(lambda: reader.exists(paths.COORDINATOR) is not None, 30, "a coordinator")
        made = run_cli(
            "topic", "create", "t", "--partitions", "4", "--zk", secured, "--zk-auth", "env:ZK_COORD", env=env
        )
        assert made.returncode == 0, made.stderr
        first = ["consume", "--group", G, "--topic", "t", *member]
        stack.enter_context(ChildProcess(first, tmp_path / "c1.log", env=env))
        wait_until(lambda: stable(1), 30, "one member, stable")
        producer = [
            "produce",
            "t",
            "--count",
            "2000",
            "--rate",
            "2000",
            "--size",
            "50",
            *coord,
            "--data-dir",
            str(data),
        ]
        stack.enter_context(ChildProcess(producer, tmp_path / "producer.log", env=env))
        stack.enter_context(
            ChildProcess(["consume", "--group", G, "--topic", "t", *member], tmp_path / "c2.log", env=env)
        )
        wait_until(lambda: stable(2), 30, "two members, stable")

        def consumed_all() -> bool:
            ledger = Ledger.read(journal, G)
            return ledger.total_produced({"t"}) == 2000 and not ledger.missing({"t"})

        wait_until(consumed_all, 60, "everything consumed", interval=0.25)
    ledger = Ledger.read(journal, G)
    assert ledger.overlaps() == [], "S2: two consumers owned a partition at the same time"
    assert not ledger.missing({"t"}), "S3: records lost"
    assert ledger.duplicates() == {}, "a clean rebalance duplicates nothing"
