"""Stopping while ZooKeeper is down (issue 22): real processes, a real ZooKeeper of the test's own, real signals.

ZooKeeper is stopped (connections refused) or paused (SIGSTOP: connections accepted, nothing answered), then the
process under test gets SIGTERM: a broker (the coordinator), or a consumer of each protocol.  It must exit within
its ``--shutdown-timeout`` with status 3 and a ``shutdown.incomplete`` event; then ZooKeeper comes back (same port,
same data), the rest of the group converges, everything produced is consumed, and S1-S5 hold over the whole run
(the journal checkers of tests/ledger.py).
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.clusters import Cluster
from tests.integration.test_consumer import drain, produce
from tests.integration.test_consumer_e2e import Run, _id
from tests.ledger import Ledger, deposed_writes, stale_applied, uncommitted_tails
from zkcoord.admin.groups import describe_group, list_groups
from zkcoord.bench.rebalance.cluster import WorkerProcess, child_env, tail
from zkcoord.consumer import Consumer, ConsumerConfig, Subscription, TopicPartition
from zkcoord.consumer.client import PartitionsCallback
from zkcoord.data.topics import TopicAdmin
from zkcoord.errors import NoNodeError, ZkSessionExpiredError, ZkUnavailableError
from zkcoord.layout import paths
from zkcoord.layout.registrations import CoordinatorInfo
from zkcoord.runtime.journal import Journal, JournalEvent, read_journal
from zkcoord.runtime.shutdown import COMMIT, COMMIT_UNKNOWN, EXIT_CLEAN, EXIT_INCOMPLETE, Deadline
from zkcoord.testbed.procs import ChildProcess, wait_until
from zkcoord.zk import ZkClient, ZkConfig
from zkcoord.zkserver import ZkServer

pytestmark = [pytest.mark.integration, pytest.mark.slow]

#: --shutdown-timeout of the process under test (s), and what its exit may add (interpreter exit, the wait's poll)
SHUTDOWN_S = 2.0
EXIT_MARGIN_S = 0.8
#: every process's session timeout (s): the stopped process's znodes outlive it by this much once ZooKeeper is back
SESSION = "2"
LEGACY = ("--protocol", "zk-client", "--rebalance-backoff", "0.3", "--rebalance-max-retries", "30")
KINDS = {
    "eager": (),
    "incremental": ("--rebalance", "incremental"),
    "zk-client": LEGACY,
    "migrating": ("--migrating",),
}


class Outage:
    """ZooKeeper gone (``stopped``: the server exits, connections are refused) or frozen (``paused``)."""

    def __init__(self, server: ZkServer, how: str) -> None:
        self.server, self.how = server, how

    def __enter__(self) -> Outage:
        if self.how == "stopped":
            self.server.stop()
        else:
            self.server.pause()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.how == "stopped":
            self.server.start()
        else:
            self.server.resume()


@pytest.fixture
def run(server: ZkServer, tmp_path: Path) -> Iterator[Run]:
    with ExitStack() as stack:
        yield Run(server.connect_string, tmp_path, stack, session=SESSION)


def _consumer(run: Run, kind: str, shutdown: float | None = None) -> ChildProcess:
    extra = [*KINDS[kind], *(["--shutdown-timeout", str(shutdown)] if shutdown is not None else [])]
    return run.consumer("g", "t", extra=tuple(extra))


def _broker(run: Run, broker_id: int, shutdown: float | None = None) -> ChildProcess:
    args = ["broker", "--id", str(broker_id), *run.common(), "--rebalance-timeout", "3"]
    if shutdown is not None:
        args += ["--shutdown-timeout", str(shutdown)]
    proc = ChildProcess(args, run.root / f"broker-{broker_id}.log")
    run.stack.enter_context(proc)
    wait_until(lambda: run.zk.exists(paths.broker(broker_id)) is not None, 30, f"broker {broker_id}")
    return proc


def _coordinator(run: Run) -> int | None:
    try:
        return CoordinatorInfo.decode(run.zk.get(paths.COORDINATOR)[0], paths.COORDINATOR).broker_id
    except (NoNodeError, ZkSessionExpiredError, ZkUnavailableError):
        # absent between terms; or the test's own session expired in the outage (kazoo opens a new one)
        return None


def _events(run: Run, pid: int, kind: str) -> list[JournalEvent]:
    return [e for e in read_journal(run.journal) if e.pid == pid and e.event == kind]


def _stop_during(outage: Outage, victim: ChildProcess) -> tuple[int, float]:
    """SIGTERM ``victim`` while ZooKeeper is out; return its exit status and how long it took."""
    with outage:
        began = time.monotonic()
        victim.signal(signal.SIGTERM)
        status = victim.wait(SHUTDOWN_S + 10)  # measured below: a hang fails here, not at pytest's timeout
        took = time.monotonic() - began
    return status, took


def _assert_incomplete_stop(run: Run, victim: ChildProcess, status: int, took: float, *skipped: str) -> None:
    assert status == EXIT_INCOMPLETE, f"exit status {status}: {victim.tail(3)}"
    assert took < SHUTDOWN_S + EXIT_MARGIN_S, f"took {took:.2f} s to stop, allowed {SHUTDOWN_S} s"
    (event,) = _events(run, victim.pid, "shutdown.incomplete")
    assert set(skipped) <= set(event.fields["skipped"]), event.fields
    assert "forced" not in event.fields, "the watchdog had to cut the stop short"
    assert "stop incomplete" in victim.log_path.read_text(errors="replace")


def _assert_safe(run: Run) -> Ledger:
    """S1-S5 over the whole run, once everything produced was consumed.  Only records a consumer had not committed
    when its stop was incomplete (or its session was lost) may have been consumed twice (S4)."""
    ledger = run.wait_consumed_all("g", {"t"}, timeout=60)
    assert ledger.overlaps() == [], "S2: two consumers fetched a partition at the same time"
    assert deposed_writes(run.journal) == [], "S1"
    assert stale_applied(run.journal) == [], "S5"
    tails = uncommitted_tails(run.journal, "g")
    for tp, offsets in ledger.duplicates().items():
        assert offsets <= tails.get(tp, set()), f"S4: {tp} duplicated beyond an uncommitted tail"
    return ledger


def _consuming(run: Run, proc: ChildProcess) -> Callable[[], bool]:
    return lambda: bool(_id(run, proc)) and _id(run, proc) in Ledger.read(run.journal, "g").deliveries


@pytest.mark.parametrize("how", ["stopped", "paused"])
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_consumer_stops_within_its_deadline_while_zookeeper_is_out(
    run: Run, server: ZkServer, kind: str, how: str
) -> None:
    """The victim stops fetching at once, cannot commit or deregister, exits 3 in time; its member znode (and for
    zk-client and migrating members, its owner znodes) outlive it until its session expires once ZooKeeper is back,
    then the survivor takes everything and consumes it all: what the victim had not committed again, nothing else."""
    _broker(run, 1)
    TopicAdmin(run.zk).create("t", 4)
    survivor = _consumer(run, "zk-client" if kind == "migrating" else kind)  # a migration starts from zk-client
    # in the group before the outage begins (a consumer whose start meets the outage exits with one error line)
    wait_until(lambda: bool(_id(run, survivor)), 30, "the survivor joining")
    if kind not in ("zk-client", "migrating"):
        run.wait_members("g", 1)
    victim = _consumer(run, kind, shutdown=SHUTDOWN_S)
    producer = run.producer("t", 6_000, 1_000)  # produces through the outage (the log is local)
    wait_until(_consuming(run, victim), 30, "the victim consuming")
    victim_id = _id(run, victim)
    status, took = _stop_during(Outage(server, how), victim)
    _assert_incomplete_stop(run, victim, status, took, "deregister")
    assert producer.wait(30) == 0
    ledger = _assert_safe(run)
    assert victim_id in ledger.deliveries
    assert ledger.total_produced({"t"}) == 6_000
    began = time.monotonic()
    survivor.signal(signal.SIGTERM)  # ZooKeeper is back: a clean stop
    assert survivor.wait(10) == EXIT_CLEAN, survivor.tail(3)
    assert time.monotonic() - began < 2.0
    assert _events(run, survivor.pid, "shutdown.incomplete") == []


@pytest.mark.parametrize("how", ["stopped", "paused"])
def test_the_coordinating_broker_stops_within_its_deadline_while_zookeeper_is_out(
    run: Run, server: ZkServer, how: str
) -> None:
    """The coordinator cannot deregister nor close its session; it exits 3 in time.  Once ZooKeeper is back its
    znodes expire with its session, broker 2 takes over, and the group, joined by a third member, consumes everything
    (twice only what a member whose session the outage ended had not committed)."""
    first = _broker(run, 1, shutdown=SHUTDOWN_S)
    wait_until(lambda: _coordinator(run) == 1, 30, "broker 1 coordinating")
    _broker(run, 2)
    TopicAdmin(run.zk).create("t", 4)
    consumers = [_consumer(run, "eager") for _ in range(2)]
    run.wait_members("g", 2)
    producer = run.producer("t", 6_000, 1_000)
    wait_until(lambda: Ledger.read(run.journal, "g").consumed != {}, 30, "consumption to begin")
    status, took = _stop_during(Outage(server, how), first)
    _assert_incomplete_stop(run, first, status, took, "deregister", "session-close")
    wait_until(lambda: _coordinator(run) == 2, 30, "broker 2 coordinating")
    consumers.append(_consumer(run, "eager"))
    run.wait_members("g", 3)
    assert producer.wait(30) == 0
    _assert_safe(run)
    for c in consumers:
        c.signal(signal.SIGTERM)
        assert c.wait(10) == EXIT_CLEAN, c.tail(3)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_second_signal_exits_at_once(run: Run, server: ZkServer, signum: signal.Signals) -> None:
    """An operator who will not wait for the stop's deadline: the second signal ends the process at once, with
    128 + the signal's number."""
    _broker(run, 1)
    TopicAdmin(run.zk).create("t", 2)
    victim = _consumer(run, "eager", shutdown=30.0)
    wait_until(lambda: len(_events(run, victim.pid, "fetch.started")) == 2, 30, "the victim fetching")

    def stopping() -> bool:  # the first signal was handled
        return "consumer: stopping (within 30 s" in victim.log_path.read_text(errors="replace")

    with Outage(server, "stopped"):
        victim.signal(signum)
        wait_until(stopping, 10, "the stop to begin")
        began = time.monotonic()
        victim.signal(signum)
        status = victim.wait(10)
        took = time.monotonic() - began
    assert status == 128 + signum, victim.tail(3)
    assert took < 1.0, f"took {took:.2f} s after the second signal"
    assert "second signal, exiting now" in victim.tail(2)


# --- the benchmark worker: many consumers in one process, stopped as one ------------------------------------------


def _worker(run: Run, protocol: str, shutdown: float) -> WorkerProcess:
    """A benchmark worker (the driver's own class) with two consumers of group ``g`` joined."""
    args = ["--protocol", protocol, "--zk", run.hosts, "--data-dir", str(run.data), "--journal", str(run.journal)]
    args += ["--session-timeout", SESSION, "--shutdown-timeout", str(shutdown)]
    worker = WorkerProcess(0, args, run.root / "worker.log", child_env(run.root)).start()
    run.stack.callback(worker.stop, 1.0)
    assert len(worker.call({"op": "add", "group": "g", "topic": "t", "count": 2}, 30)["consumers"]) == 2
    return worker


def _members(run: Run) -> list[str] | None:
    """The group's member ids, or None while the test's own client cannot read them: its session may have expired
    in the outage (kazoo then opens a new one) and that is not what these tests judge."""
    try:
        return run.zk.get_children(paths.group_ids("g"))
    except NoNodeError:
        return []
    except (ZkSessionExpiredError, ZkUnavailableError):
        return None


@pytest.mark.parametrize(
    ("protocol", "how"), [("coordinator", "stopped"), ("coordinator", "paused"), ("zk-client", "stopped")]
)
def test_the_benchmark_worker_stops_within_its_deadline_while_zookeeper_is_out(
    run: Run, server: ZkServer, protocol: str, how: str
) -> None:
    """The worker closes its consumers within one budget: it exits 3 in time, each consumer journals what it skipped,
    and the registrations it could not delete go with its sessions once ZooKeeper is back."""
    _broker(run, 1)
    TopicAdmin(run.zk).create("t", 4)
    worker = _worker(run, protocol, SHUTDOWN_S)
    if protocol == "coordinator":
        run.wait_members("g", 2)
    with Outage(server, how):
        began = time.monotonic()
        worker.proc.send_signal(signal.SIGTERM)
        status = worker.proc.wait(SHUTDOWN_S + 10)
        took = time.monotonic() - began
    print(f"worker ({protocol}, ZooKeeper {how}): exit {status} after {took:.2f} s")
    assert status == EXIT_INCOMPLETE, tail(worker.log_path)
    assert took < SHUTDOWN_S + EXIT_MARGIN_S, f"took {took:.2f} s to stop, allowed {SHUTDOWN_S} s"
    events = _events(run, worker.pid, "shutdown.incomplete")
    assert len(events) == 2 and all("deregister" in e.fields["skipped"] for e in events), events
    assert all("forced" not in e.fields for e in events)
    assert [e.fields["reason"] for e in _events(run, worker.pid, "process.stopped")] == ["signal"]
    assert "stop incomplete" in worker.log_path.read_text(errors="replace")
    if protocol == "coordinator":
        wait_until(lambda: _members(run) == [], 30, "the worker's member znodes to expire with its sessions")


def test_the_benchmark_worker_stops_cleanly_with_zookeeper_alive_and_at_once_on_a_second_signal(
    run: Run, server: ZkServer
) -> None:
    _broker(run, 1)
    TopicAdmin(run.zk).create("t", 4)
    worker = _worker(run, "coordinator", SHUTDOWN_S)
    run.wait_members("g", 2)
    began = time.monotonic()
    worker.proc.send_signal(signal.SIGTERM)
    status = worker.proc.wait(SHUTDOWN_S + 10)
    took = time.monotonic() - began
    print(f"worker (coordinator, ZooKeeper alive): exit {status} after {took:.2f} s")
    assert status == EXIT_CLEAN, tail(worker.log_path)
    assert _events(run, worker.pid, "shutdown.incomplete") == [] and _members(run) == []

    stubborn = _worker(run, "coordinator", 8.0)
    with Outage(server, "stopped"):
        stubborn.proc.send_signal(signal.SIGTERM)
        wait_until(lambda: "stopping (within 8 s" in stubborn.log_path.read_text(errors="replace"), 10, "the stop")
        began = time.monotonic()
        stubborn.proc.send_signal(signal.SIGTERM)
        status = stubborn.proc.wait(10)
        took = time.monotonic() - began
    assert status == 128 + signal.SIGTERM, tail(stubborn.log_path)
    assert took < 1.0, f"took {took:.2f} s after the second signal"


# --- the final commit: reported as it happened ----------------------------------------------------------------------


def _polled(
    server: ZkServer, root: Path, stack: ExitStack, session_s: float, on_revoked: PartitionsCallback | None
) -> tuple[Cluster, Consumer]:
    """A broker and an in-process consumer of ``t`` (2 partitions, 20 records each) that polled everything,
    committed nothing yet (auto-commit on, its interval longer than the test: the close's final commit is the first),
    and has no command left to apply."""
    cluster = Cluster(server.connect_string, root / "journal", stack)
    cluster.broker(1)
    TopicAdmin(cluster.admin_zk).create("t", 2)
    produce(root / "data", "t", 2, 20)
    config = ConsumerConfig(
        "g", Subscription.static({"t": 1}), cluster.hosts, root / "data", session_timeout_s=session_s,
        auto_commit_interval_s=3600,
    )  # fmt: skip
    consumer = Consumer(config, journal=Journal(cluster.journal_dir, "consumer"), on_partitions_revoked=on_revoked)
    stack.enter_context(consumer)
    assert len(drain(consumer, 40)) == 40
    # Quiet: every command applied and acknowledged, so the close is the next thing the command thread does.
    cluster.wait_stable("g", 1)
    channel = paths.channel("g", consumer.consumer_id)
    wait_until(lambda: cluster.admin_zk.get_children(channel) == [], 10, "every command acknowledged")
    return cluster, consumer


def _committed(cluster: Cluster) -> list[bytes | None]:
    def offset(p: int) -> bytes | None:
        try:
            return cluster.admin_zk.get(paths.offset("g", "t", p))[0]
        except NoNodeError:
            return None

    return [offset(p) for p in range(2)]


def test_a_slow_revoke_callback_does_not_turn_a_landed_commit_into_a_skipped_one(
    server: ZkServer, tmp_path: Path
) -> None:
    """The application's on_partitions_revoked (run by close() on the closing thread, after the final commit landed)
    is still running at the deadline: the report says what was left undone (deregistering, which comes after the
    callback), not that the commit was.  close() returns once the callback does: the application's own time."""
    never = threading.Event()

    def slow(partitions: list[TopicPartition]) -> None:  # the join's stop revokes nothing: only the close's is slow
        if partitions:
            never.wait(1.5)

    with ExitStack() as stack:
        cluster, consumer = _polled(server, tmp_path, stack, 4.0, slow)
        began = time.monotonic()
        report = consumer.close(timeout=1.0)
        assert time.monotonic() - began < 1.5 + 0.5
        # The callback held the command thread past the ZooKeeper deadline, so deregistering came too late: that is
        # reported; the commit, which landed, is not.
        assert COMMIT not in report.skipped and COMMIT_UNKNOWN not in report.skipped, report.skipped
        assert report.uncommitted == 0 and "deregister" in report.skipped
        assert _committed(cluster) == [b"20", b"20"]


def test_a_final_commit_unanswered_at_the_deadline_may_not_have_been_committed(
    server: ZkServer, tmp_path: Path
) -> None:
    """ZooKeeper paused while the lease still holds: the final commit is sent and not answered by the deadline.  The
    report says it may not have been committed (not that it was not): once ZooKeeper resumes, it lands."""
    with ExitStack() as stack:
        cluster, consumer = _polled(server, tmp_path, stack, 6.0, None)
        with Outage(server, "paused"):
            report = consumer.close(timeout=1.0)
        assert COMMIT_UNKNOWN in report.skipped and COMMIT not in report.skipped, report.skipped
        assert report.uncommitted == 2 and "may not have been committed" in report.summary(1.0)
        (event,) = [e for e in read_journal(cluster.journal_dir) if e.event == "shutdown.incomplete"]
        assert "commit-unknown" in event.fields["skipped"] and event.fields["uncommitted"] == 2
        wait_until(lambda: _committed(cluster) == [b"20", b"20"], 20, "the commit sent before the deadline to land")


# --- every call through the boundary respects the stop deadline ------------------------------------------------------


def test_a_transaction_with_its_own_timeout_and_the_group_reads_give_up_at_the_stop_deadline(
    server: ZkServer, tmp_path: Path
) -> None:
    """ZooKeeper paused: a transaction committed with a long timeout of its own, and the pipelined reads of ``group
    describe`` / ``list`` (30 s each otherwise), end at the client's stop deadline."""
    with ZkClient(ZkConfig.from_string(server.connect_string)) as zk:
        zk.ensure_path(paths.GROUPS)
        txn = zk.transaction()
        txn.create("/stop-test", b"x")
        with Outage(server, "paused"):
            for call in (
                lambda: txn.commit(timeout=30),
                lambda: list_groups(zk),
                lambda: describe_group(zk, "g", tmp_path),
            ):
                began = time.monotonic()
                zk.bound(Deadline.after(0.5))
                with pytest.raises(ZkUnavailableError):
                    call()
                assert time.monotonic() - began < 1.0
