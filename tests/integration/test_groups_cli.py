"""``zkcoord group list|describe`` against a real ZooKeeper, on groups built znode by znode with the project's codecs.

The group ``g1`` (see :func:`build_group`): two members, generation 3 under coordinator epoch 7, topics ``orders``
(3 partitions) and ``clicks`` (1), and partition logs written with :class:`PartitionWriter`:

=========  ======  =========  ========  ===  =========================
partition  owner   committed  log end   lag  why
=========  ======  =========  ========  ===  =========================
orders-0   C1-0    3          5         2    log_end - committed
orders-1   C1-1    10         10        0    caught up
orders-2   C2-0    (none)     4         4    log_end - log_start
clicks-0   (none)  1          2         1    committed but not owned
=========  ======  =========  ========  ===  =========================
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from zkcoord.admin.groups import GroupNotFoundError, GroupStatus, PartitionView, describe_group, list_groups
from zkcoord.cli.group_cmd import group
from zkcoord.data.partlog import PartitionWriter
from zkcoord.data.topics import TopicAdmin
from zkcoord.errors import InvalidNameError
from zkcoord.layout import paths
from zkcoord.layout.group_state import GroupPhase, GroupState, encode_owner
from zkcoord.layout.registrations import BrokerRegistration, MemberRegistration, Pattern
from zkcoord.layout.znodes import encode_int
from zkcoord.zk import ZkClient, ZkConfig

pytestmark = pytest.mark.integration

G = "g1"
C1 = "g1_hostA-1763740800000-1a2b3c4d"
C2 = "g1_hostB-1763740800001-5e6f7a8b"
LOG_ENDS = {("orders", 0): 5, ("orders", 1): 10, ("orders", 2): 4, ("clicks", 0): 2}
OWNERS = {("orders", 0): f"{C1}-0", ("orders", 1): f"{C1}-1", ("orders", 2): f"{C2}-0"}
COMMITTED = {("orders", 0): 3, ("orders", 1): 10, ("clicks", 0): 1}


def view(
    topic: str, p: int, owner: str | None, committed: int | None, end: int, lag: int, **kw: object
) -> PartitionView:
    """The view of a partition of g1, whose members are eager coordinator members and whose logs start at 0."""
    return PartitionView(
        topic,
        p,
        owner,
        owner is not None,
        committed,
        0,
        end,
        lag,
        "committed" if committed is not None else "log_start",
        high_water=end,
        protocol=None if owner is None else "eager",
        owners={} if owner is None else {"coordinator": owner},
        offsets={} if committed is None else {"coordinator": committed},
        committed_from=None if committed is None else "coordinator",
        **kw,  # type: ignore[arg-type]
    )


EXPECTED = (
    view("clicks", 0, None, 1, 2, 1),
    view("orders", 0, f"{C1}-0", 3, 5, 2),
    view("orders", 1, f"{C1}-1", 10, 10, 0),
    view("orders", 2, f"{C2}-0", None, 4, 4),
)


@pytest.fixture
def zk(zk_hosts: str) -> Iterator[ZkClient]:
    with ZkClient(ZkConfig.from_string(zk_hosts)) as client:
        client.ensure_paths(paths.COMMON_PATHS)
        client.create(paths.broker(0), BrokerRegistration("h0", 9092, 1763740800000).encode(), ephemeral=True)
        yield client


def register(zk: ZkClient, group_name: str, consumer_id: str, subscription: dict[str, int]) -> int:
    """Register a member (ephemeral, as a consumer does); return its incarnation (czxid)."""
    path = paths.member(group_name, consumer_id)
    reg = MemberRegistration(Pattern.STATIC, subscription, 1763740800000)
    zk.create(path, reg.encode(), ephemeral=True, makepath=True)
    stat = zk.exists(path)
    assert stat is not None
    return stat.czxid


def write_state(zk: ZkClient, group_name: str, members: dict[str, int], phase: GroupPhase, **kw: object) -> None:
    state = GroupState(
        generation=3,
        phase=phase,
        epoch=7,
        members=members,
        target={"orders": {p: th for (_, p), th in OWNERS.items()}},
        updated_ms=1763740800123,
        **kw,  # type: ignore[arg-type]
    )
    path = paths.group_state(group_name)
    if zk.exists(path) is None:
        zk.create(path, state.encode(), makepath=True)
    else:
        zk.set(path, state.encode())


def build_group(zk: ZkClient, data_dir: Path, phase: GroupPhase = GroupPhase.STABLE, **kw: object) -> None:
    admin = TopicAdmin(zk)
    admin.create("orders", 3)
    admin.create("clicks", 1)
    members = {C1: register(zk, G, C1, {"orders": 2}), C2: register(zk, G, C2, {"orders": 1, "clicks": 1})}
    write_state(zk, G, members, phase, **kw)
    for (t, p), thread in OWNERS.items():
        zk.create(paths.owner(G, t, p), encode_owner(thread), makepath=True)
    for (t, p), offset in COMMITTED.items():
        zk.create(paths.offset(G, t, p), encode_int(offset), makepath=True)
    for (t, p), end in LOG_ENDS.items():
        with PartitionWriter(data_dir, t, p) as writer:
            writer.append_batch([(None, b"v%d" % i) for i in range(end)])


def cli(*args: str) -> Result:
    return CliRunner().invoke(group, list(args), catch_exceptions=False)


def test_describe_numbers_are_exact(zk: ZkClient, tmp_path: Path) -> None:
    build_group(zk, tmp_path)
    d = describe_group(zk, G, tmp_path)
    assert d.partitions == EXPECTED
    assert (d.state, d.generation, d.membership_changed, d.problems) == (GroupStatus.STABLE, 3, False, ())
    assert d.persisted is not None and d.persisted.epoch == 7
    assert [(m.consumer_id, m.threads) for m in d.members] == [(C1, 2), (C2, 2)]
    assert all(m.czxid > 0 and m.ctime_ms > 1_600_000_000_000 for m in d.members)


def test_cli_describe_human_and_json(zk: ZkClient, zk_hosts: str, tmp_path: Path) -> None:
    build_group(zk, tmp_path)
    result = cli("describe", G, "--zk", zk_hosts, "--data-dir", str(tmp_path))
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].startswith("group g1: stable, generation 3, coordinator epoch 7, 2 members, updated 2025-")
    members = lines[lines.index(next(ln for ln in lines if ln.startswith("CONSUMER-ID"))) + 1 :][:2]
    assert [m.split() for m in members] == [
        [C1, "hostA", "eager", "member", "static", "orders:2", "2", "2"],
        [C2, "hostB", "eager", "member", "static", "clicks:1,orders:1", "2", "1"],
    ]
    table = lines.index(next(ln for ln in lines if ln.startswith("TOPIC")))
    headers = ["TOPIC", "PARTITION", "OWNER", "PROTOCOL", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG"]
    assert lines[table].split() == headers
    assert [ln.split() for ln in lines[table + 1 : table + 5]] == [
        ["clicks", "0", "-", "-", "1", "2", "1"],
        ["orders", "0", f"{C1}-0", "eager", "3", "5", "2"],
        ["orders", "1", f"{C1}-1", "eager", "10", "10", "0"],
        ["orders", "2", f"{C2}-0", "eager", "-", "4", "4*"],
    ]
    assert lines[table + 5] == "* no committed offset: lag counted from the log start"
    assert result.stderr == ""

    as_json = cli("describe", G, "--json", "--zk", zk_hosts, "--data-dir", str(tmp_path))
    obj = json.loads(as_json.stdout)
    assert obj["partitions"] == [p.to_json() for p in EXPECTED]
    assert obj["persisted_state"]["coordinator_epoch"] == 7
    assert (obj["state"], obj["generation"], obj["problems"]) == ("stable", 3, [])


def test_list(zk: ZkClient, zk_hosts: str, tmp_path: Path) -> None:
    build_group(zk, tmp_path)
    zk.create(paths.group_ids("idle"), makepath=True)  # no members, never rebalanced
    register(zk, "fresh", "fresh_h-1-00000000", {"orders": 1})  # a member, never rebalanced
    summaries = list_groups(zk)
    assert [(s.group, s.members, s.state, s.generation) for s in summaries] == [
        ("fresh", 1, GroupStatus.UNKNOWN, None),
        (G, 2, GroupStatus.STABLE, 3),
        ("idle", 0, GroupStatus.EMPTY, None),
    ]
    human = cli("list", "--zk", zk_hosts)
    assert [ln.split() for ln in human.stdout.splitlines()] == [
        ["GROUP", "MEMBERS", "PROTOCOLS", "STATE", "GENERATION"],
        ["fresh", "1", "eager:1", "unknown", "-"],
        [G, "2", "eager:2", "stable", "3"],
        ["idle", "0", "-", "empty", "-"],
    ]
    assert json.loads(cli("list", "--json", "--zk", zk_hosts).stdout)["groups"][1] == {
        "group": G,
        "members": 2,
        "state": "stable",
        "generation": 3,
        "problems": [],
        "protocols": {"eager": 2},
        "layouts": ["coordinator"],
    }


@pytest.mark.parametrize(
    ("phase", "expected", "header"),
    [
        (
            GroupPhase.STOPPING,
            GroupStatus.REBALANCING,
            "group g1: rebalancing (phase stopping, attempt 2), generation 3",
        ),
        (GroupPhase.STARTING, GroupStatus.REBALANCING, "group g1: rebalancing (phase starting, attempt 2)"),
        (GroupPhase.FAILED, GroupStatus.FAILED, "group g1: failed, generation 3, coordinator epoch 7, 2 members"),
    ],
)
def test_derived_states(
    zk: ZkClient, zk_hosts: str, tmp_path: Path, phase: GroupPhase, expected: GroupStatus, header: str
) -> None:
    build_group(zk, tmp_path, phase, attempt=2, error="assignor range: no partitions for topic ghost")
    assert describe_group(zk, G, tmp_path).state is expected
    lines = cli("describe", G, "--zk", zk_hosts, "--data-dir", str(tmp_path)).stdout.splitlines()
    assert lines[0].startswith(header)
    if expected is GroupStatus.FAILED:
        assert lines[1] == "last error (attempt 2): assignor range: no partitions for topic ghost"


def test_empty_unknown_and_departed_members(zk: ZkClient, zk_hosts: str, tmp_path: Path) -> None:
    build_group(zk, tmp_path)
    zk.delete(paths.member(G, C2))  # C2 left: membership changed, its partition's owner is gone
    d = describe_group(zk, G, tmp_path)
    assert (d.state, d.membership_changed) == (GroupStatus.STABLE, True)
    assert [p.owner_live for p in d.partitions] == [False, True, True, False]
    out = cli("describe", G, "--zk", zk_hosts, "--data-dir", str(tmp_path)).stdout
    assert f"{C2}-0 (gone)" in out and "a rebalance is due" in out

    zk.delete(paths.member(G, C1))
    assert describe_group(zk, G, tmp_path).state is GroupStatus.EMPTY
    register(zk, G, C1, {"orders": 2})
    zk.delete(paths.group_state(G))
    d = describe_group(zk, G, tmp_path)
    assert (d.state, d.generation) == (GroupStatus.UNKNOWN, None)
    gone = f"orders-2 is owned by {C2}-0 (the coordinator's registry), whose consumer is registered nowhere"
    assert d.partitions == (
        *EXPECTED[:3],
        dataclasses.replace(EXPECTED[3], owner_live=False, protocol=None, problems=(gone,), ownership=("owner gone",)),
    )
    assert d.ownership_problems == (gone,) and gone in d.problems
    out = cli("describe", G, "--zk", zk_hosts, "--data-dir", str(tmp_path)).stdout
    assert out.startswith("group g1: unknown (no rebalance state: never rebalanced), 1 member\n")


def test_malformed_znodes_are_problems_not_failures(zk: ZkClient, zk_hosts: str, tmp_path: Path) -> None:
    build_group(zk, tmp_path)
    bad_member = paths.member(G, "g1_evil-1-deadbeef")
    zk.create(bad_member, b"{garbage", ephemeral=True)
    zk.set(paths.offset(G, "orders", 0), b"-12")
    zk.create(paths.offset(G, "orders", 0).rsplit("/", 1)[0] + "/x", b"1")  # not a partition number
    d = describe_group(zk, G, tmp_path)
    assert [m.registration is None for m in d.members] == [True, False, False]  # g1_evil sorts first
    assert d.partitions[1] == dataclasses.replace(
        EXPECTED[1], committed=None, lag=None, lag_from=None, offsets={"coordinator": None}, committed_from=None
    )
    assert d.partitions[2:] == EXPECTED[2:]
    assert len(d.problems) == 3
    assert any(bad_member in p and "not JSON" in p for p in d.problems)
    assert any(paths.offset(G, "orders", 0) in p for p in d.problems)
    assert any(p.endswith("/offsets/orders/x: not a partition number") for p in d.problems)

    # The real command line in a child process: tables on stdout, one warning per problem on stderr, exit 0.
    run = _run_group("describe", G, "--zk", zk_hosts, "--data-dir", str(tmp_path))
    assert run.returncode == 0, run.stderr
    rows = [ln.split() for ln in run.stdout.splitlines()]
    assert ["g1_evil-1-deadbeef", "evil", "unknown", "-", "?", "(unreadable)", "-", "0"] in rows
    assert ["orders", "0", f"{C1}-0", "eager", "-", "5", "-"] in rows
    warnings = run.stderr.splitlines()
    assert len(warnings) == 3 and all(w.startswith("warning: ") for w in warnings)

    zk.set(paths.group_state(G), b'{"version":2}')
    d = describe_group(zk, G, tmp_path)
    assert d.state is GroupStatus.UNKNOWN and any("unsupported version 2" in p for p in d.problems)
    # list reads the state and the registrations (not the offsets): it reports what it read
    assert list_groups(zk)[0].problems == (d.problems[0], next(p for p in d.problems if bad_member in p))


def _run_group(*args: str) -> subprocess.CompletedProcess[str]:
    code = "from zkcoord.cli.group_cmd import group; group()"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.parametrize(
    ("name", "message"),
    [("nope", "Error: group 'nope' does not exist"), ("bad name", "Error: invalid group name 'bad name'")],
)
def test_cli_errors_are_one_line_exit_1(zk: ZkClient, zk_hosts: str, tmp_path: Path, name: str, message: str) -> None:
    run = _run_group("describe", name, "--zk", zk_hosts, "--data-dir", str(tmp_path))
    assert run.returncode == 1
    assert run.stdout == ""
    assert run.stderr.startswith(message) and len(run.stderr.strip().splitlines()) == 1, run.stderr
    with pytest.raises(GroupNotFoundError if name == "nope" else InvalidNameError):
        describe_group(zk, name, tmp_path)
