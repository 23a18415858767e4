"""The classic protocol end to end (seed 001, issue 17): a real broker, producer and consumer processes, the journals
and the group's znodes as evidence.  A leader member computes each generation's assignment with the strategy the
members voted for; the coordinator refuses an invalid or stale one and retries the generation with another leader;
partitions move through the eager stop/start path, so S2-S5 hold as for any eager group."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from tests.cli import run_cli
from tests.integration.test_consumer_e2e import Run, _id
from tests.integration.test_incremental import events
from tests.ledger import Ledger
from zkcoord.admin.groups import describe_group
from zkcoord.data.topics import TopicAdmin
from zkcoord.layout import paths
from zkcoord.layout.classic import JoinRecord
from zkcoord.layout.group_state import GroupPhase
from zkcoord.runtime.journal import read_journal
from zkcoord.testbed.procs import ChildProcess, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

USER = "tests.classic_assignors:Flaky"


class ClassicRun(Run):
    """A run whose broker waits ``rebalance_timeout`` for a leader, and whose consumers speak the classic protocol."""

    rebalance_timeout = "2"

    def broker(self, broker_id: int = 1) -> ChildProcess:
        args = ["broker", "--id", str(broker_id), "--rebalance-timeout", self.rebalance_timeout, *self.common()]
        proc = ChildProcess(args, self.root / f"broker-{broker_id}.log")
        self.stack.enter_context(proc)
        wait_until(lambda: self.zk.exists(paths.COORDINATOR) is not None, 30, "a coordinator")
        return proc

    def classic(
        self, group: str, topic: str, assignors: str = "range", env: dict[str, str] | None = None, session: str = ""
    ) -> ChildProcess:
        self.n += 1
        args = ["consume", "--group", group, "--topic", topic, *self.common(), "--data-dir", str(self.data)]
        args += ["--auto-commit-interval", "0.5", "--protocol", "classic", "--assignors", assignors]
        if session:
            args += ["--session-timeout", session]
        proc = ChildProcess(args, self.root / f"consumer-{self.n}.log", env=env)
        self.stack.enter_context(proc)
        return proc


@pytest.fixture
def run(zk_hosts: str, tmp_path: Path) -> Iterator[ClassicRun]:
    with ExitStack() as stack:
        yield ClassicRun(zk_hosts, tmp_path, stack)


def join(run: Run, group: str) -> JoinRecord:
    return JoinRecord.decode(run.zk.get(paths.classic_join(group))[0])


def stable(run: Run, group: str, members: int) -> bool:
    state = run.state(group)
    return state is not None and state.phase is GroupPhase.STABLE and len(state.members) == members


def settled(run: Run, group: str, members: int) -> bool:
    """Stable with ``members`` members, on the assignment its last join's leader computed."""
    state = run.state(group)
    return stable(run, group, members) and state is not None and join(run, group).generation == state.generation


def member_id(run: Run, proc: ChildProcess) -> str:
    wait_until(lambda: bool(_id(run, proc)), 20, "the consumer's id")
    return _id(run, proc)


def generations(run: Run, group: str) -> dict[int, dict[str, Any]]:
    """Each completed generation's join (``classic.joined``), by generation."""
    done = {e["generation"] for e in events(run, group, "rebalance.completed")}
    return {e["generation"]: e for e in events(run, group, "classic.joined") if e["generation"] in done}


def safe(run: Run, group: str, topics: set[str]) -> Ledger:
    """S2, S3 and S4 from the journals (a clean run: no duplicates)."""
    ledger = run.wait_consumed_all(group, topics, timeout=60)
    assert ledger.overlaps() == [], "S2: a partition was fetched by two consumers at overlapping times"
    return ledger


def test_the_rolling_upgrade_switches_strategy_once_every_member_supports_it(run: ClassicRun) -> None:
    """Two members on ``range`` are restarted one by one with ``roundrobin,range``: the group keeps ``range`` while
    one member supports only it, and switches to ``roundrobin`` in the rebalance where the last one joins; each
    generation's leader is a member of it (the oldest, kept while it stays); nothing is lost or fetched twice."""
    run.broker()
    TopicAdmin(run.zk).create("t", 6)
    a = run.classic("r", "t")
    b = run.classic("r", "t")
    wait_until(lambda: stable(run, "r", 2), 30, "two range members stable")
    producer = run.producer("t", 6_000, 1_500)
    upgraded: list[ChildProcess] = []
    for old in (a, b):
        old.signal(signal.SIGTERM)
        assert old.wait(20) == 0
        upgraded.append(run.classic("r", "t", "roundrobin,range"))
        wait_until(lambda: settled(run, "r", 2), 30, "two members stable again")
    strategies = [(g, e["strategy"]) for g, e in sorted(generations(run, "r").items())]
    used = [s for _, s in strategies]
    switch = used.index("roundrobin")
    assert set(used[:switch]) == {"range"} and set(used[switch:]) == {"roundrobin"}, f"one switch: {strategies}"
    # The switch is the first generation in which every member supports roundrobin: the last range-only one is gone.
    new = {member_id(run, p) for p in upgraded}
    for g, strategy in strategies:
        assert (strategy == "roundrobin") == (join_members(run, "r", g) <= new), strategies
    assert "vote" in generations(run, "r")[strategies[switch][0]]["reason"]
    assert "not everyone supports: roundrobin" in generations(run, "r")[strategies[switch - 1][0]]["reason"]
    for g, e in generations(run, "r").items():
        assert e["leader"] in join_members(run, "r", g), "a leader is a member of its generation"
    state = run.state("r")
    assert state is not None and state.assignor == "roundrobin"
    assert producer.wait(60) == 0
    ledger = safe(run, "r", {"t"})
    assert ledger.duplicates() == {}, "S4: a clean rolling upgrade consumed something twice"
    modes = {e.get("mode") for e in events(run, "r", "rebalance.started")}
    assert modes == {"classic"}, modes
    # group describe shows the protocol, the generation's strategy and why, and its leader.
    record = join(run, "r")
    text = run_cli("group", "describe", "r", "--zk", run.hosts).stdout
    assert f"classic protocol: generation {record.generation}, strategy roundrobin (voted" in text, text
    assert f"leader {record.leader}" in text and "protocols: classic 2" in text, text
    described = describe_group(run.zk, "r", run.data).to_json()["classic"]  # what --json prints
    assert (described["strategy"], described["leader"]) == ("roundrobin", record.leader), described
    assert described["sync"]["generation"] == record.generation


def join_members(run: Run, group: str, generation: int) -> set[str]:
    """The members the coordinator planned generation ``generation`` with (its ``rebalance.started``)."""
    for e in events(run, group, "rebalance.started"):
        if e["generation"] == generation:
            return set(e["members"])
    return set()


def test_an_invalid_or_failing_assignor_fails_the_leader_and_the_next_leader_computes(run: ClassicRun) -> None:
    """A user assignor loaded by name (``module:Class``).  When the group's leader leaves, the next oldest member
    leads: its assignor raises (``classic.assignor_failed`` on the leader, refused by the coordinator); the next one's
    leaves a partition out (``classic.assignment_invalid``); the third computes a valid one, which the group runs."""
    run.broker()
    TopicAdmin(run.zk).create("t", 4)
    first = run.classic("u", "t", USER)
    wait_until(lambda: stable(run, "u", 1), 30, "the first member stable")
    raising = run.classic("u", "t", USER, env={"CLASSIC_TEST_ASSIGNOR": "raise"})
    wait_until(lambda: stable(run, "u", 2), 30, "two members stable")
    invalid = run.classic("u", "t", USER, env={"CLASSIC_TEST_ASSIGNOR": "invalid"})
    wait_until(lambda: stable(run, "u", 3), 30, "three members stable")
    good = run.classic("u", "t", USER)
    wait_until(lambda: stable(run, "u", 4), 30, "four members stable")
    assert {e["leader"] for e in generations(run, "u").values()} == {member_id(run, first)}, "the leader is kept"
    producer = run.producer("t", 2_000, 2_000)
    first.signal(signal.SIGTERM)
    assert first.wait(20) == 0
    wait_until(lambda: stable(run, "u", 3), 30, "three members stable again")
    failed = events(run, "u", "classic.assignor_failed")
    assert [e["consumer"] for e in failed] == [member_id(run, raising)]
    assert "broken on purpose" in failed[0]["error"]
    refused = events(run, "u", "classic.assignment_invalid")
    assert [e["leader"] for e in refused] == [member_id(run, raising), member_id(run, invalid)], refused
    assert "assigned to nobody" in refused[1]["reason"]
    last = max(generations(run, "u").items())[1]
    assert last["leader"] == member_id(run, good) and set(last["passed_over"]) == {
        member_id(run, raising),
        member_id(run, invalid),
    }
    assert producer.wait(60) == 0
    ledger = safe(run, "u", {"t"})
    assert ledger.duplicates() == {}
    for proc in (raising, invalid, good):
        assert proc.alive(), "an assignor's failure never crashes its consumer"


def test_a_stalled_leader_is_replaced_and_its_late_assignment_refused(run: ClassicRun) -> None:
    """The leader stops (SIGSTOP, at the point where it has computed the assignment and not written it) past the
    rebalance timeout: the coordinator retries the generation with the other member as leader; resumed, the old
    leader's write is refused by the fence on the join record's version (``classic.sync_refused``), and the group
    completes with both members; S2, S3 hold."""
    run.broker()
    TopicAdmin(run.zk).create("t", 4)
    stalled = run.classic("s", "t", session="20", env={"ZKCOORD_FAULTS": "consumer.classic_before_sync=pause@2"})
    wait_until(lambda: stable(run, "s", 1), 30, "the first member stable")
    producer = run.producer("t", 2_000, 1_000)
    other = run.classic("s", "t", session="20")
    wait_until(lambda: any(e.event == "fault.injected" for e in read_journal(run.journal)), 30, "the leader paused")
    old, new = member_id(run, stalled), member_id(run, other)
    wait_until(lambda: any(e["leader"] == new for e in events(run, "s", "classic.joined")), 30, "a new leader")
    os.kill(stalled.pid, signal.SIGCONT)
    wait_until(lambda: stable(run, "s", 2) and join(run, "s").leader == new, 30, "both members stable")
    refused = events(run, "s", "classic.sync_refused")
    assert [e["consumer"] for e in refused] == [old], refused
    retried = events(run, "s", "rebalance.retrying")
    assert any("timed out in syncing" in e["reason"] and old in e["reason"] for e in retried), retried
    assert producer.wait(60) == 0
    safe(run, "s", {"t"})


def test_a_leader_killed_before_it_writes_is_replaced(run: ClassicRun) -> None:
    """The leader is killed (SIGKILL, after computing, before writing): the next generation has the other member as
    leader and the group runs with it alone; nothing is lost and nothing is fetched twice at once."""
    run.broker()
    TopicAdmin(run.zk).create("t", 4)
    doomed = run.classic("d", "t", env={"ZKCOORD_FAULTS": "consumer.classic_before_sync=kill@2"})
    wait_until(lambda: stable(run, "d", 1), 30, "the first member stable")
    producer = run.producer("t", 2_000, 1_000)
    survivor = run.classic("d", "t")
    assert doomed.wait(30) == -signal.SIGKILL
    wait_until(lambda: stable(run, "d", 1) and join(run, "d").leader == member_id(run, survivor), 30, "the survivor")
    assert producer.wait(60) == 0
    safe(run, "d", {"t"})


@pytest.mark.parametrize("mode", ["hang", "exit", "huge"])
def test_an_assignor_that_never_returns_or_exits_fails_the_leader_not_its_consumer(run: ClassicRun, mode: str) -> None:
    """The leader's assignor hangs (never returns) or raises SystemExit: the leader gives up at the join record's
    rebalance timeout (or at once) with ``classic.assignor_failed``, and its consumer goes on obeying commands -- else
    its command thread was stuck in (or killed by) the assignor: no stop-fetcher acknowledged, the group stuck."""
    run.broker()
    TopicAdmin(run.zk).create("t", 4)
    first = run.classic("x", "t", USER)
    wait_until(lambda: stable(run, "x", 1), 30, "the first member stable")
    broken = run.classic("x", "t", USER, env={"CLASSIC_TEST_ASSIGNOR": mode})
    wait_until(lambda: stable(run, "x", 2), 30, "two members stable")
    good = run.classic("x", "t", USER)
    wait_until(lambda: stable(run, "x", 3), 30, "three members stable")
    first.signal(signal.SIGTERM)
    assert first.wait(20) == 0
    wait_until(lambda: any(e["leader"] == member_id(run, broken) for e in events(run, "x", "classic.joined")), 30, "")
    wait_until(lambda: settled(run, "x", 2) and join(run, "x").leader == member_id(run, good), 30, "two settled")
    failed = events(run, "x", "classic.assignor_failed")
    assert [e["consumer"] for e in failed] == [member_id(run, broken)], failed
    assert broken.alive() and good.alive()
