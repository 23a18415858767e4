"""``zkcoord group reset-offsets|checkpoint|checkpoints|delete`` against a real ZooKeeper and real partition logs.

The group ``g`` (:func:`build`): no members, a coordinator state, topic ``orders`` with three partitions whose logs
hold records stamped one second apart from ``T0`` (``orders-2``: half a second apart), and committed offsets:

=========  ===========  =========  ==========================
partition  log          committed  timestamps
=========  ===========  =========  ==========================
orders-0   0..9 (10)    4          T0 + i s
orders-1   0..19 (20)   20         T0 + i s
orders-2   0..4 (5)     (none)     T0 + i/2 s
=========  ===========  =========  ==========================

The mode matrix runs in this process (click's runner: fast); the error contract, the dry run and the end-to-end
test run the real command line in processes of their own.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from tests.cli import run_cli
from tests.integration.test_consumer_e2e import Run
from tests.ledger import Ledger
from zkcoord.cli.group_cmd import group
from zkcoord.data.partlog import PartitionWriter
from zkcoord.data.topics import TopicAdmin
from zkcoord.layout import legacy_paths, paths
from zkcoord.layout.group_state import GroupPhase, GroupState
from zkcoord.layout.registrations import BrokerRegistration, MemberRegistration, Pattern
from zkcoord.layout.znodes import decode_int, encode_int
from zkcoord.testbed.procs import wait_until
from zkcoord.zk import ZkClient, ZkConfig

pytestmark = pytest.mark.integration

G = "g"
T0 = 1763740800000  # 2025-11-21T16:00:00Z
LOGS = {0: (10, 1000), 1: (20, 1000), 2: (5, 500)}  # partition -> (records, ms between timestamps)
COMMITTED = {0: 4, 1: 20}
MEMBER = "g_hostA-1763740800000-1a2b3c4d"


@pytest.fixture
def zk(zk_hosts: str) -> Iterator[ZkClient]:
    with ZkClient(ZkConfig.from_string(zk_hosts)) as client:
        client.ensure_paths(paths.COMMON_PATHS)
        client.create(paths.broker(0), BrokerRegistration("h0", 9092, T0).encode(), ephemeral=True)
        TopicAdmin(client).create("orders", 3)
        yield client


def build(zk: ZkClient, data: Path) -> None:
    state = GroupState(generation=3, phase=GroupPhase.STABLE, epoch=7, members={}, target={}, updated_ms=T0)
    zk.create(paths.group_state(G), state.encode(), makepath=True)
    for p, offset in COMMITTED.items():
        zk.create(paths.offset(G, "orders", p), encode_int(offset), makepath=True)
    for p, (count, step) in LOGS.items():
        with PartitionWriter(data, "orders", p) as writer:
            writer.append_batch([(None, b"v%d" % i, T0 + i * step) for i in range(count)])


def offsets(zk: ZkClient, group: str = G, path: object = paths.offset) -> dict[int, int | None]:
    out: dict[int, int | None] = {}
    for p in LOGS:
        stat = zk.exists(path(group, "orders", p))  # type: ignore[operator]
        out[p] = None if stat is None else decode_int("offset", zk.get(path(group, "orders", p))[0])  # type: ignore[operator]
    return out


def cli(*args: str) -> Result:
    return CliRunner().invoke(group, list(args), catch_exceptions=False)


def reset(zk_hosts: str, data: Path, *args: str) -> Result:
    return cli("reset-offsets", G, "--zk", zk_hosts, "--data-dir", str(data), "--json", *args)


@pytest.mark.parametrize(
    ("mode", "expected", "clamped"),
    [
        (("--to-earliest",), {0: 0, 1: 0, 2: 0}, []),
        (("--to-latest",), {0: 10, 1: 20, 2: 5}, []),
        (("--to-offset", "7"), {0: 7, 1: 7, 2: 5}, [2]),
        (("--shift-by", "-2"), {0: 2, 1: 18, 2: 0}, [2]),  # orders-2 has none: shifted from its start, clamped
        (("--shift-by", "+3"), {0: 7, 1: 20, 2: 3}, [1]),
        # the first record at or after T0 + 3.5 s; orders-2 has none (its last is T0 + 2 s): its high water
        (("--to-datetime", "2025-11-21T16:00:03.500Z"), {0: 4, 1: 4, 2: 5}, []),
        (("--to-datetime", "2025-11-21T17:00:03.500+01:00"), {0: 4, 1: 4, 2: 5}, []),
    ],
)
def test_every_mode_moves_exactly_the_offsets_it_says(
    zk: ZkClient, zk_hosts: str, tmp_path: Path, mode: tuple[str, ...], expected: dict[int, int], clamped: list[int]
) -> None:
    build(zk, tmp_path)
    result = reset(zk_hosts, tmp_path, "--topic", "orders", *mode, "--execute")
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)
    assert plan["executed"] and plan["layouts"] == ["coordinator"]
    assert {r["partition"]: r["new"] for r in plan["partitions"]} == expected
    assert {r["partition"]: r["current"] for r in plan["partitions"]} == {0: 4, 1: 20, 2: None}
    assert [r["partition"] for r in plan["partitions"] if r["clamped"]] == clamped
    if clamped:
        assert "clamped to the log's range" in result.stderr
    assert offsets(zk) == expected


def test_some_partitions_only_and_offset_beyond_the_log_is_clamped_with_a_message(
    zk: ZkClient, zk_hosts: str, tmp_path: Path
) -> None:
    build(zk, tmp_path)
    result = cli(
        "reset-offsets", G, "--topic", "orders:0,2", "--to-offset", "999", "--execute",
        "--zk", zk_hosts, "--data-dir", str(tmp_path),
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET", "LOG-START", "HIGH-WATER", "NOTE"]
    assert lines[1].split()[:6] == ["orders", "0", "4", "10", "0", "10"]
    assert "999 is outside the log: clamped to its high water 10" in lines[1]
    assert lines[2].split()[:6] == ["orders", "2", "-", "5", "0", "5"]
    assert "warning: 2 offsets clamped to the log's range" in result.stderr
    assert offsets(zk) == {0: 10, 1: 20, 2: 5}  # orders-1 was not chosen


def test_a_dry_run_changes_nothing(zk: ZkClient, zk_hosts: str, tmp_path: Path) -> None:
    build(zk, tmp_path)
    before = {p: zk.exists(paths.offset(G, "orders", p)) for p in LOGS}
    args = ("--topic", "orders", "--to-earliest", "--zk", zk_hosts, "--data-dir", str(tmp_path))
    run = run_cli("group", "reset-offsets", G, *args)  # no --execute: a dry run, as Kafka's tool
    explicit = cli("reset-offsets", G, *args, "--dry-run")
    for code, out, err in (
        (run.returncode, run.stdout, run.stderr),
        (explicit.exit_code, explicit.stdout, explicit.stderr),
    ):
        assert code == 0, err
        assert "orders  0          4               0" in out
        assert "note: dry run of --to-earliest: nothing changed (add --execute to apply)" in err
    assert {p: zk.exists(paths.offset(G, "orders", p)) for p in LOGS} == before  # same stats: not even rewritten


def test_checkpoint_and_restore_round_trip(zk: ZkClient, zk_hosts: str, tmp_path: Path) -> None:
    build(zk, tmp_path)
    saved = cli("checkpoint", G, "before-replay", "--zk", zk_hosts)
    assert saved.exit_code == 0, saved.output
    assert saved.stdout.startswith("checkpoint before-replay of group g: 2 partitions at 20")
    again = cli("checkpoint", G, "before-replay", "--zk", zk_hosts)
    assert again.exit_code == 1 and "already has a checkpoint 'before-replay'" in again.output
    assert reset(zk_hosts, tmp_path, "--all-topics", "--to-earliest", "--execute").exit_code == 0
    assert offsets(zk) == {0: 0, 1: 0, 2: None}

    listed = json.loads(cli("checkpoints", G, "--json", "--zk", zk_hosts).stdout)
    assert [(c["name"], c["offsets"]) for c in listed["checkpoints"]] == [
        ("before-replay", {"orders": {"0": 4, "1": 20}})
    ]
    shown = cli("checkpoints", G, "before-replay", "--zk", zk_hosts)
    assert shown.stdout.splitlines()[1:] == [
        "TOPIC   PARTITION  OFFSET",
        "orders  0          4",
        "orders  1          20",
    ]

    restored = reset(zk_hosts, tmp_path, "--topic", "orders", "--to-checkpoint", "before-replay", "--execute")
    assert restored.exit_code == 0, restored.output
    rows = {r["partition"]: (r["new"], r["note"]) for r in json.loads(restored.stdout)["partitions"]}
    assert rows == {0: (4, None), 1: (20, None), 2: (None, "not in checkpoint before-replay: unchanged")}
    assert offsets(zk) == {0: 4, 1: 20, 2: None}


def test_both_layouts_are_reset_and_a_0_8_only_group_stays_in_its_own(
    zk: ZkClient, zk_hosts: str, tmp_path: Path
) -> None:
    build(zk, tmp_path)
    for p, offset in {0: 6, 2: 1}.items():  # g migrated: Kafka 0.8's tree holds offsets too, orders-0's newer
        zk.create(legacy_paths.offset(G, "orders", p), encode_int(offset), makepath=True)
    zk.create(legacy_paths.offset("old", "orders", 1), encode_int(3), makepath=True)

    plan = json.loads(reset(zk_hosts, tmp_path, "--topic", "orders", "--shift-by", "1", "--execute").stdout)
    assert plan["layouts"] == ["coordinator", "zk-client"]
    assert {r["partition"]: r["current"] for r in plan["partitions"]} == {0: 6, 1: 20, 2: 1}  # as describe counts
    assert offsets(zk) == {0: 7, 1: 20, 2: 2}
    assert offsets(zk, G, legacy_paths.offset) == {0: 7, 1: 20, 2: 2}

    old = cli("reset-offsets", "old", "--topic", "orders:1", "--to-earliest", "--execute", "--json",
              "--zk", zk_hosts, "--data-dir", str(tmp_path))  # fmt: skip
    assert json.loads(old.stdout)["layouts"] == ["zk-client"]
    assert offsets(zk, "old", legacy_paths.offset) == {0: None, 1: 0, 2: None}
    assert zk.exists(paths.group("old")) is None


def test_delete_removes_the_group_in_both_layouts_its_checkpoints_and_config(
    zk: ZkClient, zk_hosts: str, tmp_path: Path
) -> None:
    build(zk, tmp_path)
    zk.create(legacy_paths.offset(G, "orders", 0), encode_int(6), makepath=True)
    assert cli("checkpoint", G, "cp", "--zk", zk_hosts).exit_code == 0
    assert cli("config", "set", G, "max.size=3", "--zk", zk_hosts).exit_code == 0
    zk.create(paths.group_config("other"), b'{"config":{"max.size":"2"},"version":1}', makepath=True)

    kept = cli("delete", G, "--keep-config", "--json", "--zk", zk_hosts)
    assert kept.exit_code == 0, kept.output
    report = json.loads(kept.stdout)
    assert report["removed"]["offsets"] == 3 and report["removed"]["checkpoints"] == 1
    assert report["removed"]["state"] == 1 and not report["config"] and report["transactions"] == 1
    assert report["roots"] == [paths.group(G), legacy_paths.group_dir(G)]
    assert zk.exists(paths.group(G)) is None and zk.exists(legacy_paths.group_dir(G)) is None
    assert zk.exists(paths.group_config(G)) is not None

    gone = cli("delete", G, "--zk", zk_hosts)
    assert gone.exit_code == 1 and "group 'g' does not exist" in gone.output

    build(zk, tmp_path / "again")
    deleted = cli("delete", G, "--zk", zk_hosts)
    assert deleted.exit_code == 0, deleted.output
    assert deleted.stdout.startswith("deleted group g: 2 committed offsets, its state, ")
    assert "its dynamic config" in deleted.stdout
    assert zk.exists(paths.group_config(G)) is None and zk.exists(paths.group_config("other")) is not None
    assert json.loads(cli("list", "--json", "--zk", zk_hosts).stdout)["groups"] == []


# Refused before connecting (parsing) run in this process; those that read ZooKeeper run as a user runs them.
_PARSED = [
    ((G, "--topic", "orders", "--to-datetime", "yesterday"), "Error: --to-datetime needs an ISO 8601 date-time"),
    ((G, "--topic", "orders", "--to-datetime", "0001-01-01"), "Error: --to-datetime must not be before 1970"),
    ((G, "--topic", "orders", "--to-offset", "ten"), "Error: --to-offset needs a whole number"),
    ((G, "--topic", "orders", "--to-earliest", "--dry-run", "--execute"), "Error: give --dry-run or --execute"),
    ((G, "--topic", "orders", "--to-earliest", "--to-latest"), "Error: one reset mode only, got 2"),
    ((G, "--topic", "orders"), "Error: no reset mode given"),
    ((G, "--to-earliest"), "Error: no partitions chosen"),
    ((G, "--topic", "orders:x", "--to-earliest"), "Error: --topic 'orders:x': expected T or T:P[,P...]"),
]
_READ = [
    (("nope", "--topic", "orders", "--to-earliest"), "Error: group 'nope' does not exist"),
    ((G, "--topic", "nope", "--to-earliest"), "Error: topic 'nope' does not exist"),
    ((G, "--topic", "orders:1,3", "--to-earliest"), "Error: topic 'orders' has 3 partitions (0..2): no partition 3"),
    ((G, "--topic", "orders", "--to-checkpoint", "nope"), "Error: group 'g' has no checkpoint 'nope' (it has none)"),
    ((G, "--topic", "orders", "--to-earliest", "--execute", "LIVE"), "Error: group 'g' has 1 live member"),
]


@pytest.mark.parametrize(
    ("args", "message", "real"), [(*case, False) for case in _PARSED] + [(*case, True) for case in _READ]
)
def test_bad_input_is_one_error_line_and_changes_nothing(
    zk: ZkClient, zk_hosts: str, tmp_path: Path, args: tuple[str, ...], message: str, real: bool
) -> None:
    build(zk, tmp_path)
    live = "LIVE" in args
    if live:  # a member's registration, as a consumer writes it (ephemeral: this session's)
        registration = MemberRegistration(Pattern.STATIC, {"orders": 1}, T0).encode()
        zk.create(paths.member(G, MEMBER), registration, ephemeral=True, makepath=True)
        args = tuple(a for a in args if a != "LIVE")
    before = offsets(zk)
    full = ("reset-offsets", *args, "--zk", zk_hosts, "--data-dir", str(tmp_path))
    if real:
        run = run_cli("group", *full)
        code, out, err = run.returncode, run.stdout, run.stderr
    else:
        result = CliRunner().invoke(group, list(full), catch_exceptions=False)
        code, out, err = result.exit_code, result.stdout, result.stderr
    assert code == 1
    assert out == ""
    assert err.startswith(message) and len(err.strip().splitlines()) == 1, err
    assert offsets(zk) == before
    if live:
        deleted = run_cli("group", "delete", G, "--zk", zk_hosts)
        assert deleted.returncode == 1 and deleted.stderr.startswith("Error: group 'g' has 1 live member")
        assert deleted.stderr.strip().endswith("stop it before deleting it (Kafka refuses too)")
        assert zk.exists(paths.group_state(G)) is not None


@pytest.fixture
def run(zk_hosts: str, tmp_path: Path) -> Iterator[Run]:
    with ExitStack() as stack:
        yield Run(zk_hosts, tmp_path, stack)


def test_a_consumer_started_after_a_reset_reads_from_the_reset_position(run: Run) -> None:
    run.broker()
    TopicAdmin(run.zk).create("t", 2)
    assert run.producer("t", 400, 4_000).wait(60) == 0
    first = run.consumer("e", "t")
    run.wait_members("e", 1)
    run.wait_consumed_all("e", {"t"})
    wait_until(lambda: run.zk.exists(paths.offset("e", "t", 0)) is not None, 10, "a commit of t-0")
    first.signal(signal.SIGTERM)
    assert first.wait(20) == 0
    wait_until(lambda: not run.zk.get_children(paths.group_ids("e")), 10, "the group to be empty")

    earlier = set(Ledger.read(run.journal, "e").deliveries)
    end = decode_int("offset", run.zk.get(paths.offset("e", "t", 0))[0])
    assert end > 60
    done = run_cli(
        "group", "reset-offsets", "e", "--topic", "t:0", "--to-offset", "50", "--execute",
        "--zk", run.hosts, "--data-dir", str(run.data),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert decode_int("offset", run.zk.get(paths.offset("e", "t", 0))[0]) == 50

    second = run.consumer("e", "t")

    def replayed() -> list[tuple[int, int]]:
        ledger = Ledger.read(run.journal, "e")
        theirs = [d for cid, ds in ledger.deliveries.items() if cid not in earlier for d in ds]
        return [(a, b) for _ts, _t, p, a, b in theirs if p == 0]

    wait_until(lambda: max((b for _a, b in replayed()), default=-1) == end - 1, 30, "t-0 replayed from 50")
    assert min(a for a, _b in replayed()) == 50  # from the reset position: nothing before it, nothing skipped
    second.signal(signal.SIGTERM)
    assert second.wait(20) == 0
