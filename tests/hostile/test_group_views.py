"""Hostile state under ``zkcoord group list|describe``: groups of either layout damaged by hand, half deleted, or
changing under the reads.  Whatever the tree holds, the command prints its views with one ``warning:`` line per
problem (naming the znode), exits 0 (2 under ``--check`` when a partition's ownership is in doubt), and never shows
a traceback.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from tests.integration.test_consumer_e2e import Run
from zkcoord.admin.groups import describe_group, list_groups
from zkcoord.cli.group_cmd import group
from zkcoord.data.partlog import PartitionWriter
from zkcoord.data.topics import TopicAdmin
from zkcoord.layout import legacy_paths, paths
from zkcoord.layout.registrations import BrokerRegistration, MemberRegistration, Pattern
from zkcoord.layout.znodes import encode_int
from zkcoord.testbed.procs import wait_until
from zkcoord.zk import ZkClient, ZkConfig

pytestmark = [pytest.mark.integration]

A = "old_hostA-1763740800000-0000000a"
B = "old_hostB-1763740800000-0000000b"
GONE = "old_hostC-1763740800000-0000000c"


@pytest.fixture
def zk(zk_hosts: str) -> Iterator[ZkClient]:
    with ZkClient(ZkConfig.from_string(zk_hosts)) as client:
        client.ensure_paths(paths.COMMON_PATHS)
        client.create(paths.broker(0), BrokerRegistration("h0", 9092, 1763740800000).encode(), ephemeral=True)
        TopicAdmin(client).create("orders", 4)
        yield client


def cli(*args: str) -> Result:
    """The command in this process; an exception that escapes it fails the test (``catch_exceptions=False``)."""
    return CliRunner().invoke(group, list(args), catch_exceptions=False)


def child(*args: str) -> subprocess.CompletedProcess[str]:
    """The command as a user runs it, in a process of its own."""
    code = "from zkcoord.cli.group_cmd import group; group()"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=60, check=False)


def logs(data: Path) -> None:
    """Partition logs of ``orders``: 50 records each."""
    for p in range(4):
        with PartitionWriter(data, "orders", p) as writer:
            writer.append_batch([(None, b"r%d" % i) for i in range(50)])


def registration(**kw: object) -> bytes:
    return MemberRegistration(Pattern.STATIC, {"orders": 1}, 1763740800000, **kw).encode()  # type: ignore[arg-type]


def test_a_damaged_zk_client_group_is_described_problem_by_problem(zk: ZkClient, zk_hosts: str, tmp_path: Path) -> None:
    """A Kafka 0.8 group with one of each kind of damage: every problem is one warning naming its znode, the rest is
    shown, and only the partition owned by a consumer registered nowhere makes ``--check`` fail."""
    logs(tmp_path)
    zk.create(legacy_paths.member("old", A), registration(), makepath=True)
    zk.create(legacy_paths.member("old", B), b"{nope", makepath=True)  # unreadable registration
    zk.create(legacy_paths.owner("old", "orders", 0), f"{A}-0".encode(), makepath=True)
    zk.create(legacy_paths.owner("old", "orders", 1), b"\xff\xfe", makepath=True)  # unreadable owner
    zk.create(legacy_paths.owner("old", "orders", 2), f"{GONE}-0".encode(), makepath=True)  # registered nowhere
    zk.create(legacy_paths.offset("old", "orders", 0), encode_int(3), makepath=True)
    zk.create(legacy_paths.offset("old", "orders", 3), b"abc", makepath=True)  # unreadable offset
    zk.create(legacy_paths.offsets("old", "orders") + "/x", b"1")  # not a partition number
    zk.create(legacy_paths.owners_root("old") + "/bad topic!", b"")  # not a topic name

    d = describe_group(zk, "old", tmp_path)
    assert d.layouts == ("zk-client",)
    assert [(m.consumer_id, m.protocol.value, m.owned) for m in d.members] == [(A, "zk-client", 1), (B, "unknown", 0)]
    rows = {p.partition: p for p in d.partitions}
    assert (rows[0].owner, rows[0].committed, rows[0].committed_from) == (f"{A}-0", 3, "zk-client")
    assert (rows[1].owner, rows[1].owners) == (None, {"zk-client": None})
    assert (rows[2].owner, rows[2].owner_live) == (f"{GONE}-0", False)
    assert (rows[3].owner, rows[3].committed, rows[3].lag, rows[3].offsets) == (None, None, None, {"zk-client": None})
    assert len(d.ownership_problems) == 1 and GONE in d.ownership_problems[0]
    expected = [
        legacy_paths.member("old", B),
        legacy_paths.owner("old", "orders", 1),
        legacy_paths.offset("old", "orders", 3),
        legacy_paths.offsets("old", "orders") + "/x",
        legacy_paths.owners_root("old") + "/bad topic!",
        f"{GONE}-0",
    ]
    assert len(d.problems) == len(expected)
    for where in expected:
        assert sum(where in p for p in d.problems) == 1, (where, d.problems)

    common = ("--zk", zk_hosts, "--data-dir", str(tmp_path))
    plain = child("describe", "old", *common)
    assert plain.returncode == 0 and "Traceback" not in plain.stderr, plain.stderr
    warnings = plain.stderr.splitlines()
    assert len(warnings) == len(expected) and all(w.startswith("warning: ") for w in warnings)
    table = [ln.split() for ln in plain.stdout.splitlines()]
    assert ["orders", "1", "(unreadable)", "-", "-", "50", "50*"] in table
    assert ["orders", "2", f"{GONE}-0", "(gone)", "-", "-", "50", "50*"] in table
    assert [B, "hostB", "unknown", "-", "?", "(unreadable)", "-", "0"] in table
    checked = child("describe", "old", "--check", "--json", *common)
    assert checked.returncode == 2 and "Traceback" not in checked.stderr
    assert json.loads(checked.stdout)["ownership_problems"] == list(d.ownership_problems)
    listed = child("list", "--zk", zk_hosts)
    assert listed.returncode == 0 and listed.stdout.split("\n")[1].split() == [
        "old",
        "2",
        "zk-client:1,unknown:1",
        "rebalancing",
        "-",
    ]
    assert len(listed.stderr.splitlines()) == 3 and GONE not in listed.stderr  # no offsets read, no ownership checked


def test_half_deleted_and_leftover_groups(zk: ZkClient, zk_hosts: str, tmp_path: Path) -> None:
    """What a non-atomic delete (children first) or a group that ended leaves behind: each is a group of its own
    layout, described for what is left; owners of nobody are ownership problems, leftover offsets are not."""
    logs(tmp_path)
    # The coordinator's tree with its ids/ and state already gone, owners/ not yet.
    zk.create(paths.owner("half", "orders", 0), b"half_h-1-0000000a-0", makepath=True)
    # Kafka 0.8's leftovers of a group whose members all left: offsets only.
    zk.create(legacy_paths.offset("leftover", "orders", 0), encode_int(42), makepath=True)
    zk.create(legacy_paths.ids("leftover"))
    # A bare 0.8 group directory.
    zk.create(legacy_paths.group_dir("bare"))

    half = describe_group(zk, "half", tmp_path)
    assert (half.state.value, half.members, half.layouts) == ("empty", (), ("coordinator",))
    assert len(half.ownership_problems) == 1 and "half_h-1-0000000a-0" in half.ownership_problems[0]
    leftover = describe_group(zk, "leftover", tmp_path)
    assert (leftover.state.value, leftover.layouts, leftover.problems) == ("empty", ("zk-client",), ())
    assert [(p.partition, p.committed, p.committed_from) for p in leftover.partitions] == [(0, 42, "zk-client")]
    bare = cli("describe", "bare", "--zk", zk_hosts, "--data-dir", str(tmp_path))
    assert bare.exit_code == 0 and "(no members)" in bare.stdout and bare.stderr == ""
    assert bare.stdout.startswith("group bare: empty, 0 members (Kafka 0.8's layout only: no coordinator state)\n")

    rows = {s.group: s for s in list_groups(zk)}
    assert sorted(rows) == ["bare", "half", "leftover"]  # and never the coordinator's own znodes
    assert [(rows[g].state.value, rows[g].layouts) for g in sorted(rows)] == [
        ("empty", ("zk-client",)),
        ("empty", ("coordinator",)),
        ("empty", ("zk-client",)),
    ]
    assert cli("describe", "leftover", "--check", "--zk", zk_hosts, "--data-dir", str(tmp_path)).exit_code == 0
    assert cli("describe", "half", "--check", "--zk", zk_hosts, "--data-dir", str(tmp_path)).exit_code == 2

    # The coordinator's own znodes are not 0.8 groups: a group named like one exists only in the coordinator's tree.
    zk.ensure_path(paths.COORDINATOR_TERMS)
    missing = child("describe", "groups", "--zk", zk_hosts, "--data-dir", str(tmp_path))
    assert missing.returncode == 1 and missing.stderr.strip() == "Error: group 'groups' does not exist"
    assert "coordinator_terms" not in cli("list", "--zk", zk_hosts).stdout


def test_names_that_are_no_group_names_are_listed_with_a_warning(zk: ZkClient, zk_hosts: str) -> None:
    zk.create(f"{paths.CONSUMERS}/bad name")
    zk.create(legacy_paths.member("fine", A.replace("old", "fine")), registration(), makepath=True)
    result = cli("list", "--zk", zk_hosts)
    assert result.exit_code == 0
    assert [ln.split()[0] for ln in result.stdout.splitlines()[1:]] == ["bad", "fine"]
    assert result.stderr.startswith("warning: /consumers/bad name: invalid group name 'bad name'"), result.stderr


def test_a_subscribed_topic_that_cannot_be_read_is_left_out(zk: ZkClient, zk_hosts: str, tmp_path: Path) -> None:
    zk.create(legacy_paths.member("old", A), registration(), makepath=True)
    zk.set(paths.topic("orders"), b"not json")
    d = describe_group(zk, "old", tmp_path)
    assert d.partitions == () and d.state.value == "stable"
    assert len(d.problems) == 1 and "subscribed topic 'orders' left out" in d.problems[0]
    assert paths.topic("orders") in d.problems[0]


@pytest.fixture
def run(zk_hosts: str, tmp_path: Path) -> Iterator[Run]:
    with ExitStack() as stack:
        yield Run(zk_hosts, tmp_path, stack)


def test_a_live_zk_client_group_damaged_while_it_rebalances(run: Run) -> None:
    """Real zk-client consumers; one's registration is overwritten with garbage while they run, so the group churns
    (the others leave it out, conflicts, retries) while it is described: every description exits 0 with the damaged
    member shown as unknown and its registration named in a warning; none shows a traceback."""
    run.zk.ensure_paths(paths.COMMON_PATHS)
    run.zk.create(paths.broker(0), BrokerRegistration("h0", 9092, 1763740800000).encode(), ephemeral=True)
    TopicAdmin(run.zk).create("orders", 4)
    legacy = ("--protocol", "zk-client", "--rebalance-backoff", "0.2", "--rebalance-max-retries", "50")
    procs = [run.consumer("old", "orders", extra=legacy) for _ in range(3)]

    def owned() -> bool:
        try:
            return len(run.zk.get_children(legacy_paths.owners("old", "orders"))) == 4
        except Exception:  # noqa: BLE001 (not there yet)
            return False

    wait_until(owned, 30, "the group to own every partition")
    victim = sorted(run.zk.get_children(legacy_paths.ids("old")))[0]
    run.zk.set(legacy_paths.member("old", victim), b'{"version":1,"pattern":"static"}')
    for _ in range(3):
        result = child("describe", "old", "--zk", run.hosts, "--data-dir", str(run.data))
        assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
        assert any(victim in w and "subscription" in w for w in result.stderr.splitlines()), result.stderr
        row = next(ln.split() for ln in result.stdout.splitlines() if ln.startswith(victim))
        assert row[2] == "unknown", row
    for proc in procs:
        proc.signal(signal.SIGTERM)
    for proc in procs:
        assert proc.wait(20) == 0


def test_a_coordinator_owner_that_left_beside_a_live_0_8_owner_is_gone_not_double(
    zk: ZkClient, zk_hosts: str, tmp_path: Path
) -> None:
    """The coordinator's registry still names a consumer that left (registered nowhere) while a zk-client member
    holds the partition's 0.8 owner znode: the 0.8 owner counts, the stale name is an ownership problem of its own
    (gone), not a double owner."""
    logs(tmp_path)
    zk.create(legacy_paths.member("old", A), registration(), makepath=True)
    zk.create(legacy_paths.owner("old", "orders", 0), f"{A}-0".encode(), makepath=True)
    zk.create(paths.owner("old", "orders", 0), f"{GONE}-0".encode(), makepath=True)
    d = describe_group(zk, "old", tmp_path)
    row = d.partitions[0]
    assert (row.owner, row.owner_live, row.protocol, row.ownership) == (f"{A}-0", True, "zk-client", ("owner gone",))
    assert len(d.ownership_problems) == 1 and f"{GONE}-0" in d.ownership_problems[0]
    result = cli("describe", "old", "--offsets", "--check", "--zk", zk_hosts, "--data-dir", str(tmp_path))
    assert result.exit_code == 2
    first = result.stdout.splitlines()[1].split()
    assert first[:3] == ["orders", "0", f"{A}-0"] and first[-3:] == ["registry:", f"{GONE}-0", "(gone)"], first
    assert "DOUBLE" not in result.stdout
