"""``zkcoord group list|describe`` on groups of every protocol, run for real: a broker hosting the coordinator, real
``zk-client``, ``--migrating`` and coordinator consumer processes, and the real command line.

The scenario is ``docs/migration.md``'s procedure, step by step, on the issue's group (``old``, topic ``orders`` of
8 partitions): a pure ``zk-client`` group, then each consumer rolled onto the coordinator with ``--migrating``, the
migrated group, and its roll onto ``--rebalance incremental``.  At every step what ``list``, ``describe`` and
``--json`` show is checked against the znodes themselves, read independently (not through the code under test).
"""

from __future__ import annotations

import functools
import json
import signal
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tests.cli import run_cli
from tests.integration.test_consumer import produce
from tests.integration.test_consumer_e2e import Run
from zkcoord.cli.group_cmd import group
from zkcoord.data.topics import TopicAdmin
from zkcoord.errors import NoNodeError
from zkcoord.layout import legacy_paths, paths
from zkcoord.layout.group_state import GroupPhase, GroupState
from zkcoord.layout.registrations import MemberRegistration, Pattern
from zkcoord.testbed.procs import ChildProcess, wait_until
from zkcoord.zk import ZkClient, ZkConfig

pytestmark = [pytest.mark.integration, pytest.mark.slow]

GROUP, TOPIC, PARTITIONS = "old", "orders", 8
LEGACY = ("--protocol", "zk-client", "--rebalance-backoff", "0.3", "--rebalance-max-retries", "20")


@pytest.fixture
def run(zk_hosts: str, tmp_path: Path) -> Iterator[Run]:
    with ExitStack() as stack:
        yield Run(zk_hosts, tmp_path, stack)


# --- the znodes, read directly -------------------------------------------------------------------------------------


def children(run: Run, path: str) -> list[str]:
    try:
        return sorted(run.zk.get_children(path))
    except NoNodeError:
        return []


def values(run: Run, parent: str) -> dict[int, str]:
    """Partition -> the text of each child of ``parent`` (an owners or offsets directory of either layout)."""
    names = children(run, parent)
    got = run.zk.get_many([f"{parent}/{n}" for n in names])
    return {int(n): g[0].decode() for n, g in zip(names, got, strict=True) if g is not None}


def state(run: Run) -> GroupState | None:
    try:
        return GroupState.decode(run.zk.get(paths.group_state(GROUP))[0])
    except NoNodeError:
        return None


def settled(run: Run, migrated: int, legacy: int) -> bool:
    """``docs/migration.md`` step 2.3, from the znodes: every partition has a Kafka 0.8 owner znode, every member
    (all are in 0.8's registry; 8 partitions give each at least one) owns some, and the coordinator (if it has
    members) is stable over ``migrated`` members beside ``legacy`` zk-client ones."""
    owners = values(run, legacy_paths.owners(GROUP, TOPIC))
    members = children(run, legacy_paths.ids(GROUP))
    if len(owners) != PARTITIONS or len(members) != migrated + legacy:
        return False
    if {thread.rsplit("-", 1)[0] for thread in owners.values()} != set(members):
        return False
    if migrated == 0:
        return True
    st = state(run)
    return st is not None and st.phase is GroupPhase.STABLE and (len(st.members), len(st.legacy)) == (migrated, legacy)


def settled_and_listed_stable(run: Run, migrated: int, legacy: int) -> bool:
    """``settled`` and ``group list`` agreeing that the group is stable.  A zk-client member may rebalance once more
    after every owner znode is claimed (a second watch of the registry firing, or a retry after its backoff), so the
    znodes can be settled at one read and released at the next: the views are checked once both agree."""
    return settled(run, migrated, legacy) and listed(run)[GROUP]["state"] == "stable"


# --- the views -----------------------------------------------------------------------------------------------------


def describe(run: Run, *flags: str) -> dict[str, Any]:
    """``group describe --json`` through the real command line, bracketed by reads of both layouts' committed
    offsets, so that what it reports can be checked against commits that go on meanwhile."""
    before = {lay: values(run, p) for lay, p in offsets_dirs().items()}
    result = run_cli("group", "describe", GROUP, "--json", *flags, "--zk", run.hosts, "--data-dir", str(run.data))
    assert result.returncode == 0, result.stderr
    after = {lay: values(run, p) for lay, p in offsets_dirs().items()}
    out: dict[str, Any] = json.loads(result.stdout)
    out["_before"], out["_after"] = before, after
    return out


def offsets_dirs() -> dict[str, str]:
    return {"coordinator": paths.offsets(GROUP, TOPIC), "zk-client": legacy_paths.offsets(GROUP, TOPIC)}


def in_process(*args: str) -> str:
    """The command line run in this process (``describe --json`` runs as a child process; the rest need not)."""
    result = CliRunner().invoke(group, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.stdout


def text(run: Run, *flags: str) -> list[list[str]]:
    out = in_process("describe", GROUP, *flags, "--zk", run.hosts, "--data-dir", str(run.data))
    return [line.split() for line in out.splitlines()]


def listed(run: Run) -> dict[str, dict[str, Any]]:
    return {g["group"]: g for g in json.loads(in_process("list", "--json", "--zk", run.hosts))["groups"]}


def check_against_znodes(run: Run, d: dict[str, Any]) -> None:
    """Members, owners and committed offsets of ``d`` as the znodes hold them (the group is settled: owners and
    registrations do not move; offsets only grow, so each lies between the reads before and after)."""
    coordinator_ids, legacy_ids = children(run, paths.group_ids(GROUP)), children(run, legacy_paths.ids(GROUP))
    assert sorted(m["consumer_id"] for m in d["members"]) == sorted(set(coordinator_ids) | set(legacy_ids))
    for m in d["members"]:
        assert set(m["registered"]) == {
            lay for lay, ids in (("coordinator", coordinator_ids), ("zk-client", legacy_ids)) if m["consumer_id"] in ids
        }
    zk_owners = values(run, legacy_paths.owners(GROUP, TOPIC))
    coordinator_owners = values(run, paths.owners(GROUP, TOPIC))
    protocol = {m["consumer_id"]: m["protocol"] for m in d["members"]}
    rows = {p["partition"]: p for p in d["partitions"] if p["topic"] == TOPIC}
    assert sorted(rows) == list(range(PARTITIONS))
    for p, row in rows.items():
        owner = zk_owners.get(p, coordinator_owners.get(p))
        assert owner is not None and row["owner"] == owner, (p, row)
        assert row["owners"] == {
            lay: v for lay, v in (("coordinator", coordinator_owners.get(p)), ("zk-client", zk_owners.get(p))) if v
        }
        assert row["protocol"] == protocol[owner.rsplit("-", 1)[0]] and row["owner_live"]
        # The offset that counts: the 0.8 path for a zk-client owner, the coordinator's for a coordinator member,
        # the newer of both for a migrating one.
        layouts = {"zk-client": ["zk-client"], "migrating": ["coordinator", "zk-client"]}.get(
            row["protocol"], ["coordinator"]
        )
        low = max((int(d["_before"][lay][p]) for lay in layouts if p in d["_before"][lay]), default=None)
        high = max((int(d["_after"][lay][p]) for lay in layouts if p in d["_after"][lay]), default=None)
        if low is None:
            assert row["committed"] is None or row["committed"] <= (high or 0)
        else:
            assert high is not None and low <= row["committed"] <= high, (p, row, low, high)
            assert row["committed_from"] in layouts
    assert d["problems"] == [] and d["ownership_problems"] == []


def member_rows(lines: list[list[str]]) -> dict[str, list[str]]:
    """The members table of the text output: consumer id -> its cells."""
    start = next(i for i, ln in enumerate(lines) if ln[:1] == ["CONSUMER-ID"])
    rows: dict[str, list[str]] = {}
    for ln in lines[start + 1 :]:
        if not ln:
            break
        rows[ln[0]] = ln
    return rows


# --- the scenario --------------------------------------------------------------------------------------------------


def test_a_group_is_one_view_through_every_step_of_the_migration(run: Run) -> None:
    run.broker()  # step 1: a broker with the coordinator
    TopicAdmin(run.zk).create(TOPIC, PARTITIONS)
    produce(run.data, TOPIC, PARTITIONS, 50)
    # Beside it, a coordinator group that has nothing to do with the migration: list shows both kinds.
    run.consumer("billing", TOPIC)
    old = [run.consumer(GROUP, TOPIC, extra=LEGACY) for _ in range(2)]
    wait_until(lambda: settled_and_listed_stable(run, 0, 2), 40, "the zk-client group to own every partition")
    run.wait_members("billing", 1)

    # A pure zk-client group: listed, described, its members zk-client, every owner a 0.8 owner znode.
    groups = listed(run)
    assert groups[GROUP]["protocols"] == {"zk-client": 2} and groups[GROUP]["state"] == "stable"
    assert groups[GROUP]["layouts"] == ["zk-client"] and groups[GROUP]["generation"] is None
    assert groups["billing"]["protocols"] == {"eager": 1} and groups["billing"]["layouts"] == ["coordinator"]
    d = describe(run)
    check_against_znodes(run, d)
    assert (d["state"], d["layouts"], d["protocols"]) == ("stable", ["zk-client"], {"zk-client": 2})
    assert d["migration"] == {"to_move": sorted(m["consumer_id"] for m in d["members"]), "moved": [], "done": False}
    assert all(p["protocol"] == "zk-client" and p["committed_from"] in (None, "zk-client") for p in d["partitions"])
    lines = text(run)
    assert lines[0][:4] == ["group", f"{GROUP}:", "stable,", "2"], lines[0]
    assert all(row[2:4] == ["zk-client", "-"] for row in member_rows(lines).values())

    migrated: list[ChildProcess] = []
    for i, proc in enumerate(old):
        proc.signal(signal.SIGTERM)  # step 2.1: stop one cleanly
        assert proc.wait(20) == 0
        wait_until(functools.partial(settled, run, i, 1 - i), 40, "the group settled without it")
        d = describe(run)
        check_against_znodes(run, d)
        assert d["protocols"] == {k: v for k, v in (("zk-client", 1 - i), ("migrating", i)) if v}
        migrated.append(run.consumer(GROUP, TOPIC, extra=("--migrating",)))  # step 2.2: its successor
        rolled = functools.partial(settled_and_listed_stable, run, i + 1, 1 - i)
        wait_until(rolled, 40, f"settled after rolling consumer {i + 1}")

        d = describe(run)
        check_against_znodes(run, d)
        st = state(run)
        assert st is not None
        assert d["state"] == "stable" and d["layouts"] == ["coordinator", "zk-client"]
        assert d["persisted_state"]["legacy"] == dict(st.legacy) and d["persisted_state"]["members"] == dict(st.members)
        assert d["persisted_state"]["generation"] == st.generation == d["generation"]
        still = [m["consumer_id"] for m in d["members"] if m["protocol"] == "zk-client"]
        assert len(still) == 1 - i and sorted(still) == sorted(st.legacy)
        assert {m["consumer_id"]: m["counted_as"] for m in d["members"]} == {
            **dict.fromkeys(st.members, "member"),
            **dict.fromkeys(st.legacy, "legacy"),
        }
        assert d["protocols"] == {k: v for k, v in (("zk-client", 1 - i), ("migrating", i + 1)) if v}
        assert d["migration"]["to_move"] == still and d["migration"]["done"] == (i == 1)
        # The text: the remaining zk-client member is listed as legacy (docs/migration.md step 2.3).
        lines = text(run)
        rows = member_rows(lines)
        assert {cid: row[2:4] for cid, row in rows.items()} == {
            **{cid: ["migrating", "member"] for cid in st.members},
            **{cid: ["zk-client", "legacy"] for cid in st.legacy},
        }
        assert lines[0][:3] == ["group", f"{GROUP}:", "stable,"]
        assert ["protocols:", *(["zk-client", "1,"] if i == 0 else []), "migrating", str(i + 1)] in lines
        # list says the same.
        assert listed(run)[GROUP]["protocols"] == d["protocols"]

    # Step 3: migrated.  Step 4: rolled once more onto the incremental protocol, without --migrating.
    for i, proc in enumerate(migrated):
        proc.signal(signal.SIGTERM)
        assert proc.wait(20) == 0
        run.consumer(GROUP, TOPIC, extra=("--rebalance", "incremental"))

        def incremental(i: int = i) -> bool:
            st = state(run)
            return st is not None and st.phase is GroupPhase.STABLE and len(st.members) == 2 and not st.legacy

        wait_until(incremental, 40, f"the group stable after rolling consumer {i + 1} onto incremental")
    wait_until(lambda: not children(run, legacy_paths.owners(GROUP, TOPIC)), 20, "the 0.8 owner znodes released")
    d = describe(run)
    check_against_znodes(run, d)
    assert (d["state"], d["protocols"], d["migration"]) == ("stable", {"incremental": 2}, None)
    assert all(p["protocol"] == "incremental" and p["committed_from"] in (None, "coordinator") for p in d["partitions"])


def test_check_fails_on_a_double_owner_made_by_hand(run: Run) -> None:
    """A coordinator group; then a zk-client member, played by hand, claims a partition the coordinator gave to an
    eager member: owned in both layouts at once.  ``--check`` exits 2 and names it; without the double, exit 0."""
    run.broker()
    TopicAdmin(run.zk).create(TOPIC, 2)
    run.consumer(GROUP, TOPIC)
    run.wait_members(GROUP, 1)
    common = ("--zk", run.hosts, "--data-dir", str(run.data))
    assert run_cli("group", "describe", GROUP, "--check", *common).returncode == 0

    intruder = f"{GROUP}_rogue-1-0000beef"
    run.zk.create(legacy_paths.member(GROUP, intruder), b'{"pattern":"static","subscription":{"orders":1},'
                  b'"timestamp":"1","version":1}', ephemeral=True, makepath=True)  # fmt: skip
    run.zk.create(legacy_paths.owner(GROUP, TOPIC, 1), f"{intruder}-0".encode(), ephemeral=True, makepath=True)
    owner = values(run, paths.owners(GROUP, TOPIC))[1]
    checked = run_cli("group", "describe", GROUP, "--check", *common)
    assert checked.returncode == 2, checked.stderr
    warnings = [ln for ln in checked.stderr.splitlines() if "both layouts" in ln]
    assert len(warnings) == 1 and owner in warnings[0] and f"{intruder}-0" in warnings[0], checked.stderr
    row = next(ln.split() for ln in checked.stdout.splitlines() if ln.startswith(f"{TOPIC} ") and ln.split()[1] == "1")
    assert row[2] == f"{intruder}-0" and "DOUBLE" in row
    as_json = run_cli("group", "describe", GROUP, "--check", "--json", *common)
    assert as_json.returncode == 2
    obj = json.loads(as_json.stdout)
    assert len(obj["ownership_problems"]) == 1 and obj["ownership_problems"][0] in obj["problems"]
    assert obj["partitions"][1]["owners"] == {"coordinator": owner, "zk-client": f"{intruder}-0"}


def test_a_migrating_member_waiting_for_its_zk_client_predecessor_is_pending(run: Run) -> None:
    """A zk-client member (played by hand, in a session of its own) holds both partitions' 0.8 owner znodes and
    never rebalances.  A real migrating consumer joins: the coordinator gives it one partition, which it cannot claim
    yet.  describe shows that partition still owned by the zk-client member and pending for the migrating one, and
    the group rebalancing; once the zk-client member lets go, owned by the migrating member and stable."""
    run.broker()
    TopicAdmin(run.zk).create(TOPIC, 2)
    ghost_zk = run.stack.enter_context(ZkClient(ZkConfig.from_string(run.hosts)))
    ghost = f"{GROUP}_ghost-1-0000abcd"
    registration = MemberRegistration(Pattern.STATIC, {TOPIC: 1}, 1).encode()
    ghost_zk.create(legacy_paths.member(GROUP, ghost), registration, ephemeral=True, makepath=True)
    for p in range(2):
        ghost_zk.create(legacy_paths.owner(GROUP, TOPIC, p), f"{ghost}-0".encode(), ephemeral=True, makepath=True)

    run.consumer(GROUP, TOPIC, extra=("--migrating",))

    def counted() -> bool:
        st = state(run)
        return st is not None and st.phase is GroupPhase.STABLE and list(st.legacy) == [ghost] and len(st.members) == 1

    wait_until(counted, 30, "the coordinator stable over the migrating member beside the zk-client one")
    st = state(run)
    assert st is not None
    ((mine, thread),) = st.target[TOPIC].items()
    d = describe(run)
    assert d["state"] == "rebalancing" and d["unclaimed"] == []
    row = d["partitions"][mine]
    assert (row["owner"], row["protocol"], row["pending"]) == (f"{ghost}-0", "zk-client", thread)
    assert row["owners"] == {"coordinator": thread, "zk-client": f"{ghost}-0"} and d["ownership_problems"] == []
    members = {m["consumer_id"]: m for m in d["members"]}
    assert (members[ghost]["partitions"], members[ghost]["counted_as"]) == (2, "legacy")
    migrating = members[thread.rsplit("-", 1)[0]]
    assert (migrating["protocol"], migrating["partitions"], migrating["pending"]) == ("migrating", 0, 1)
    lines = [" ".join(ln) for ln in text(run)]
    assert lines[0].startswith(f"group {GROUP}: rebalancing (1 partition waiting for a migrating member's claim)")
    assert any(ln.endswith(f"assigned to {thread}: waits for the 0.8 owner to let go") for ln in lines), lines

    ghost_zk.delete(legacy_paths.owner(GROUP, TOPIC, mine))  # the zk-client member lets go
    wait_until(lambda: values(run, legacy_paths.owners(GROUP, TOPIC)).get(mine) == thread, 20, "the claim")
    d = describe(run)
    assert d["state"] == "stable"
    row = d["partitions"][mine]
    assert (row["owner"], row["protocol"], row["pending"]) == (thread, "migrating", None)
