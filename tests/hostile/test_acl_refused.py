"""ZooKeeper refusing a running broker or consumer (``--zk-auth``; docs/security.md, "Refused while running"): an
admin client changes a znode's ACL under it (setACL), as an operator locking something down would.  Each refusal is
journalled once (``zk.refused``); a process refused its own work stops by itself (one ``Error:`` line, exit 4); a
group's znode refused fails only that group's rebalance; nothing retries a refusal in a loop."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.security import READ_ACL_UNSAFE, make_digest_acl

from tests.cli import run_cli
from tests.hostile.test_acl import COORD, MEMBER
from tests.ledger import Ledger
from zkcoord.admin.acl_setup import secure_tree
from zkcoord.layout import paths
from zkcoord.layout.group_state import GroupPhase, GroupState
from zkcoord.runtime.journal import JournalEvent, read_journal
from zkcoord.runtime.shutdown import EXIT_REFUSED
from zkcoord.testbed.procs import ChildProcess, wait_until
from zkcoord.zk import ZkClient, ZkConfig

pytestmark = pytest.mark.integration

ENV = {"ZK_MEMBER": "member:m-secret", "ZK_COORD": "coord:c-secret"}
#: what a locked znode's ACL becomes: everyone reads, only an identity no zkcoord process holds writes
LOCKED = [*READ_ACL_UNSAFE, make_digest_acl("root", "r-secret", all=True)]
#: what a znode's ACL becomes when an operator takes the members' rights on it away: the coordinator keeps its own
COORD_ONLY = [*READ_ACL_UNSAFE, make_digest_acl(COORD.user, COORD.password, all=True)]


@pytest.fixture
def secured(zk_hosts: str) -> str:
    secure_tree(ZkConfig.from_string(zk_hosts), COORD, MEMBER)
    return zk_hosts


@pytest.fixture
def admin(secured: str) -> Iterator[KazooClient]:
    """An operator's client with the coordinator identity (ADMIN on every znode): it changes ACLs by hand."""
    client = KazooClient(hosts=secured, auth_data=[("digest", f"{COORD.user}:{COORD.password}")])
    client.start()
    yield client
    client.stop()
    client.close()


def _events(journal: Path, kind: str) -> list[JournalEvent]:
    return [e for e in read_journal(journal) if e.event == kind] if journal.exists() else []


def _args(secured: str, journal: Path, role: str) -> list[str]:
    return ["--zk", secured, "--session-timeout", "2", "--journal", str(journal), "--zk-auth", f"env:ZK_{role}"]


def _refused_alone(child: ChildProcess, journal: Path, path: str, timeout: float = 15.0) -> JournalEvent:
    """``child`` exits 4 within ``timeout`` with one ``Error:`` line naming ``path`` (or a znode below it); its one
    ``zk.refused`` event of it."""
    assert child.wait(timeout) == EXIT_REFUSED, child.tail(20)
    log = child.log_path.read_text(errors="replace")
    errors = [line for line in log.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and path in errors[0], log
    assert "Traceback" not in log and "m-secret" not in log and "c-secret" not in log, log
    refused = [e for e in _events(journal, "zk.refused") if e.pid == child.pid]
    refused = [e for e in refused if e.fields["path"].startswith(path)]
    assert len(refused) == 1, refused  # once, however often it was tried
    stopped = [e for e in _events(journal, "process.stopped") if e.pid == child.pid]
    assert [e.fields["reason"] for e in stopped] == ["refused"], stopped
    return refused[0]


def _topic(secured: str, name: str, partitions: int) -> None:
    made = run_cli(
        "topic", "create", name, "-p", str(partitions), "--zk", secured, "--zk-auth", "env:ZK_COORD", env=ENV
    )
    assert made.returncode == 0, made.stderr


def test_a_standby_refused_the_election_journals_it_and_exits_4(
    secured: str, admin: KazooClient, tmp_path: Path
) -> None:
    journal = tmp_path / "journal"
    common = _args(secured, journal, "COORD")
    with ExitStack() as stack:
        first = stack.enter_context(ChildProcess(["broker", "--id", "1", *common], tmp_path / "b1.log", env=ENV))
        wait_until(lambda: bool(_events(journal, "coordinator.elected")), 30, "broker 1 elected")
        second = stack.enter_context(ChildProcess(["broker", "--id", "2", *common], tmp_path / "b2.log", env=ENV))
        wait_until(lambda: bool(_events(journal, "coordinator.standby")), 30, "broker 2 on standby")
        admin.set_acls(paths.COORDINATOR_EPOCH, LOCKED)  # an operator locks the election's epoch
        first.signal(signal.SIGTERM)
        assert first.wait(10) == 0, first.tail()
        event = _refused_alone(second, journal, paths.COORDINATOR_EPOCH)
    assert event.fields == {
        "path": paths.COORDINATOR_EPOCH,
        "op": "set",
        "acl_role": "coordinator",
        "user": "coord",
        "action": "stop",
        "broker": 2,
    }
    assert not [e for e in _events(journal, "coordinator.elected") if e.pid == second.pid]


def _stable(reader: ZkClient, group: str, members: int) -> bool:
    got = reader.get_many([paths.group_state(group)])[0]
    if got is None:
        return False
    state = GroupState.decode(got[0])
    return state.phase is GroupPhase.STABLE and len(state.members) == members


def test_a_group_whose_state_is_locked_fails_alone_and_the_broker_goes_on(
    secured: str,
    admin: KazooClient,
    tmp_path: Path,
) -> None:
    journal = tmp_path / "journal"
    coord, member = _args(secured, journal, "COORD"), _args(secured, journal, "MEMBER")
    member += ["--data-dir", str(tmp_path / "data")]
    with ExitStack() as stack:
        reader = stack.enter_context(ZkClient(ZkConfig.from_string(secured)))
        broker = stack.enter_context(ChildProcess(["broker", "--id", "1", *coord], tmp_path / "b.log", env=ENV))
        wait_until(lambda: bool(_events(journal, "coordinator.elected")), 30, "a coordinator")
        _topic(secured, "t", 2)
        for group in ("g", "h"):
            args = ["consume", "--group", group, "--topic", "t", *member]
            stack.enter_context(ChildProcess(args, tmp_path / f"{group}1.log", env=ENV))
        wait_until(lambda: _stable(reader, "g", 1) and _stable(reader, "h", 1), 30, "g and h stable")
        admin.set_acls(paths.group_state("g"), LOCKED)  # an operator locks g (or a member forged its state)
        for group in ("g", "h"):
            args = ["consume", "--group", group, "--topic", "t", *member]
            stack.enter_context(ChildProcess(args, tmp_path / f"{group}2.log", env=ENV))
        wait_until(lambda: _stable(reader, "h", 2), 30, "h rebalanced to its second member")
        wait_until(
            lambda: any(e.fields["group"] == "g" for e in _events(journal, "rebalance.failed")), 30, "g's failure"
        )
        refused = [e.fields for e in _events(journal, "zk.refused")]
        assert refused == [
            {
                "path": paths.group_state("g"),
                "op": "set",
                "acl_role": "coordinator",
                "user": "coord",
                "action": "group",
                "broker": 1,
            }
        ], refused
        started = [e for e in _events(journal, "rebalance.started") if e.fields["group"] == "g"]
        assert len(started) == 2, started  # the first member's, then the one refused: not retried
        assert broker.alive(), broker.tail()
        assert not _events(journal, "rebalance.retrying"), "a refusal is not retried"


def test_a_consumer_refused_its_acknowledgement_stops_and_the_group_goes_on(
    secured: str,
    admin: KazooClient,
    tmp_path: Path,
) -> None:
    journal, data = tmp_path / "journal", tmp_path / "data"
    coord, member = _args(secured, journal, "COORD"), _args(secured, journal, "MEMBER")
    member += ["--data-dir", str(data), "--auto-commit-interval", "0.3"]
    a_id = "g_a-0000000001"
    with ExitStack() as stack:
        reader = stack.enter_context(ZkClient(ZkConfig.from_string(secured)))
        stack.enter_context(ChildProcess(["broker", "--id", "1", *coord], tmp_path / "b.log", env=ENV))
        wait_until(lambda: bool(_events(journal, "coordinator.elected")), 30, "a coordinator")
        _topic(secured, "t", 2)
        args = ["consume", "--group", "g", "--topic", "t", *member]
        a = stack.enter_context(ChildProcess([*args, "--consumer-id", a_id], tmp_path / "a.log", env=ENV))
        wait_until(lambda: _stable(reader, "g", 1), 30, "a alone, stable")
        produce = ["produce", "t", "--count", "600", "--rate", "2000", "--size", "20", *coord, "--data-dir", str(data)]
        stack.enter_context(ChildProcess(produce, tmp_path / "p.log", env=ENV))
        wait_until(lambda: bool(_events(journal, "offsets.committed")), 30, "a commits")
        admin.set_acls(paths.channel("g", a_id), COORD_ONLY)  # a can no longer delete its commands: acknowledge
        stack.enter_context(ChildProcess(args, tmp_path / "b2.log", env=ENV))
        event = _refused_alone(a, journal, paths.channel("g", a_id))
        assert event.fields["acl_role"] == "member" and event.fields["action"] == "stop", event
        assert event.fields["consumer"] == a_id and event.fields["group"] == "g", event
        wait_until(lambda: _stable(reader, "g", 1), 30, "the other member alone, stable")

        def consumed_all() -> bool:
            ledger = Ledger.read(journal, "g")
            return ledger.total_produced({"t"}) == 600 and not ledger.missing({"t"})

        wait_until(consumed_all, 30, "everything consumed", interval=0.25)
    ledger = Ledger.read(journal, "g")
    assert ledger.overlaps() == [], "S2: two consumers owned a partition at the same time"
    assert not ledger.missing({"t"}), "S3: records lost"
    assert [e.pid for e in _events(journal, "zk.refused")] == [a.pid], "only a was refused"
