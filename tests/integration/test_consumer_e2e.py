"""The consumer end to end: real broker, producer and consumer processes, real signals, journals as evidence."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.ledger import Ledger
from zkcoord.data.topics import TopicAdmin
from zkcoord.layout import paths
from zkcoord.layout.group_state import GroupPhase, GroupState
from zkcoord.testbed.procs import ChildProcess, run_command, wait_until
from zkcoord.zk import ZkClient, ZkConfig

pytestmark = [pytest.mark.integration, pytest.mark.slow]


class Run:
    def __init__(self, hosts: str, root: Path, stack: ExitStack, session: str = "2") -> None:
        self.hosts, self.root, self.stack, self.session = hosts, root, stack, session
        self.journal, self.data = root / "journal", root / "data"
        self.zk = stack.enter_context(ZkClient(ZkConfig.from_string(hosts)))
        self.n = 0

    def common(self) -> list[str]:
        return ["--zk", self.hosts, "--session-timeout", self.session, "--journal", str(self.journal)]

    def broker(self, broker_id: int = 1) -> ChildProcess:
        proc = ChildProcess(["broker", "--id", str(broker_id), *self.common()], self.root / f"broker-{broker_id}.log")
        self.stack.enter_context(proc)
        wait_until(lambda: self.zk.exists(paths.COORDINATOR) is not None, 30, "a coordinator")
        return proc

    def consumer(self, group: str, *topics: str, extra: tuple[str, ...] = ()) -> ChildProcess:
        self.n += 1
        args = ["consume", "--group", group, *[a for t in topics for a in ("--topic", t)], *self.common()]
        proc = ChildProcess(
            [*args, "--data-dir", str(self.data), "--auto-commit-interval", "0.5", *extra],
            self.root / f"consumer-{self.n}.log",
        )
        self.stack.enter_context(proc)
        return proc

    def producer(self, topic: str, count: int, rate: int) -> ChildProcess:
        args = ["produce", topic, "--count", str(count), "--rate", str(rate), "--size", "50", *self.common()]
        proc = ChildProcess([*args, "--data-dir", str(self.data)], self.root / f"producer-{topic}.log")
        self.stack.enter_context(proc)
        return proc

    def state(self, group: str) -> GroupState | None:
        try:
            return GroupState.decode(self.zk.get(paths.group_state(group))[0])
        except Exception:  # noqa: BLE001 (not there yet)
            return None

    def wait_members(self, group: str, members: int, timeout: float = 30) -> None:
        def ok() -> bool:
            state = self.state(group)
            return state is not None and state.phase is GroupPhase.STABLE and len(state.members) == members

        wait_until(ok, timeout, f"group {group} stable with {members} members")

    def wait_consumed_all(self, group: str, topics: set[str], timeout: float = 60) -> Ledger:
        def done() -> bool:
            ledger = Ledger.read(self.journal, group)
            return ledger.total_produced(topics) > 0 and not ledger.missing(topics)

        wait_until(done, timeout, f"group {group} to consume everything", interval=0.25)
        return Ledger.read(self.journal, group)


@pytest.fixture
def run(zk_hosts: str, tmp_path: Path) -> Iterator[Run]:
    with ExitStack() as stack:
        yield Run(zk_hosts, tmp_path, stack)


def test_a_group_consumes_everything_once_through_joins_leaves_and_growth(run: Run) -> None:
    run.broker()
    admin = TopicAdmin(run.zk)
    admin.create("a", 8)
    admin.create("b", 8)
    consumers = [run.consumer("g", "a", "b") for _ in range(3)]
    run.wait_members("g", 3)
    producers = [run.producer("a", 25_000, 5_000), run.producer("b", 25_000, 5_000)]
    wait_until(lambda: Ledger.read(run.journal, "g").consumed != {}, 30, "consumption to begin")
    consumers.append(run.consumer("g", "a", "b"))  # a consumer joins
    run.wait_members("g", 4)
    consumers[0].signal(signal.SIGTERM)  # one leaves cleanly
    assert consumers[0].wait(20) == 0
    run.wait_members("g", 3)
    admin.alter("a", 12)  # partitions added while producing (if the first producers are still at it)...
    producers.append(run.producer("a", 1_200, 1_200))  # ...and certainly by one started after it
    for p in producers:
        assert p.wait(60) == 0
    ledger = run.wait_consumed_all("g", {"a", "b"})
    assert ledger.total_produced({"a", "b"}) == 51_200
    assert any(tp == ("a", 11) for tp in ledger.produced)  # the new partitions were written to...
    assert ledger.consumed.get(("a", 11))  # ...and consumed
    assert ledger.duplicates() == {}, "a clean rebalance must duplicate nothing"
    assert ledger.overlaps() == []
    for c in consumers[1:]:
        c.signal(signal.SIGTERM)
        assert c.wait(20) == 0


def test_a_killed_consumer_duplicates_at_most_its_uncommitted_records(run: Run) -> None:
    run.broker()
    TopicAdmin(run.zk).create("t", 4)
    victim = run.consumer("k", "t", extra=("--auto-commit-interval", "3600"))  # commits only on stop
    survivor = run.consumer("k", "t")
    run.wait_members("k", 2)
    producer = run.producer("t", 6_000, 3_000)
    wait_until(lambda: len(Ledger.read(run.journal, "k").deliveries.get(_id(run, victim), [])) > 3, 30, "victim busy")
    victim.signal(signal.SIGKILL)
    victim.wait(10)
    assert producer.wait(60) == 0
    ledger = run.wait_consumed_all("k", {"t"})
    victim_id = _id(run, victim)
    uncommitted: set[tuple[tuple[str, int], int]] = set()
    for _ts, topic, partition, first, last in ledger.deliveries[victim_id]:
        floor = ledger.committed.get((victim_id, (topic, partition)), 0)
        uncommitted.update(((topic, partition), o) for o in range(max(first, floor), last + 1))
    dups = {(tp, o) for tp, offsets in ledger.duplicates().items() for o in offsets}
    assert dups <= uncommitted, f"{len(dups - uncommitted)} duplicates were not the killed consumer's uncommitted"
    survivor.signal(signal.SIGTERM)
    assert survivor.wait(20) == 0


def _id(run: Run, proc: ChildProcess) -> str:
    text = proc.log_path.read_text(errors="replace")
    for line in text.splitlines():
        if line.startswith("consumer ") and " joined group " in line:
            return line.split()[1]
    return ""


def test_a_paused_consumer_wakes_up_fenced(run: Run) -> None:
    run.broker()
    TopicAdmin(run.zk).create("t", 4)
    sleeper = run.consumer("s", "t")
    other = run.consumer("s", "t")
    run.wait_members("s", 2)
    producer = run.producer("t", 20_000, 2_000)
    wait_until(lambda: bool(_id(run, sleeper)), 10, "consumer id")
    sleeper_id = _id(run, sleeper)
    wait_until(lambda: sleeper_id in Ledger.read(run.journal, "s").deliveries, 30, "the sleeper consuming")
    sleeper.signal(signal.SIGSTOP)
    paused_at = time.time() * 1000
    run.wait_members("s", 1, timeout=30)  # its session expired; the other consumer took every partition
    wait_until(lambda: run.state("s") is not None, 5, "state")
    sleeper.signal(signal.SIGCONT)
    resumed_at = time.time() * 1000
    run.wait_members("s", 2, timeout=30)  # it rejoined cleanly
    assert producer.wait(60) == 0
    ledger = run.wait_consumed_all("s", {"t"})
    restarts = [iv[0] for ivs in ledger.intervals.values() for iv in ivs if iv[2] == sleeper_id and iv[0] > paused_at]
    assert restarts, "the sleeper did not get partitions back after rejoining"
    assert min(restarts) > resumed_at
    # S6: between its pause and its next start-fetcher the sleeper handed out nothing, although its fetchers had
    # records buffered when it was stopped; and no partition ever had two owners at once (S2).
    late = [d for d in ledger.deliveries[sleeper_id] if paused_at < d[0] < min(restarts)]
    assert late == [], f"the paused consumer handed out {len(late)} batches after waking, before being re-assigned"
    assert ledger.overlaps() == [], "two consumers owned a partition at the same time"
    for c in (sleeper, other):
        c.signal(signal.SIGTERM)
        assert c.wait(20) == 0
    run_command(["group", "describe", "s", "--zk", run.hosts, "--data-dir", str(run.data)], run.root / "d.log", 30)
