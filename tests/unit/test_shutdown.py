"""The stop budget and report (zkcoord/runtime/shutdown.py), and the configs that validate the timeout."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.cli import run_cli
from zkcoord.bench.rebalance.worker import parse_args as worker_args
from zkcoord.broker import BrokerConfig
from zkcoord.consumer import ConsumerConfig, Subscription
from zkcoord.consumer.commits import FinalCommit
from zkcoord.errors import ConfigurationError, ZkNotSentError, ZkSessionExpiredError, ZkUnavailableError
from zkcoord.runtime.journal import Journal, read_journal
from zkcoord.runtime.shutdown import (
    COMMIT,
    COMMIT_UNKNOWN,
    DEFAULT_BROKER_TIMEOUT_S,
    DEFAULT_CONSUMER_TIMEOUT_S,
    DEREGISTER,
    EXIT_CLEAN,
    EXIT_GRACE_S,
    EXIT_INCOMPLETE,
    KILL_GRACE_S,
    StopBudget,
    StopReport,
    hard_bound,
)
from zkcoord.zk import ZkConfig


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(("timeout", "zookeeper", "session"), [(8.0, 7.0, 7.7), (2.0, 1.5, 1.8), (0.5, 0.375, 0.45)])
def test_the_budget_keeps_its_last_quarter_for_the_close_and_the_exit(
    timeout: float, zookeeper: float, session: float
) -> None:
    clock = Clock()
    budget = StopBudget.start(timeout, clock)
    assert budget.zookeeper.remaining() == pytest.approx(zookeeper)
    assert budget.session.remaining() == pytest.approx(session)
    assert budget.deadline.remaining() == pytest.approx(timeout)
    clock.now += timeout + 1
    assert budget.zookeeper.expired() and budget.deadline.remaining() == 0.0
    assert budget.elapsed() == pytest.approx(timeout + 1)


def test_a_report_says_what_was_skipped_once_and_journals_it(tmp_path: Path) -> None:
    report = StopReport()
    assert report.complete and report.exit_code == EXIT_CLEAN
    report.skip(COMMIT, "lease expired", uncommitted=2)
    report.skip(DEREGISTER, "no answer")
    report.skip(DEREGISTER, "a later error")  # the first reason stays
    assert report.exit_code == EXIT_INCOMPLETE
    line = report.summary(8.0)
    assert "\n" not in line and line.startswith("stop incomplete within 8 s (lease expired)")
    assert "delivered again" in line and "until the session expires" in line
    journal = Journal(tmp_path, "consumer-g")
    report.journal(journal, StopBudget.start(8.0), group="g", consumer="g_c")
    journal.close()
    (event,) = [e for e in read_journal(tmp_path) if e.event == "shutdown.incomplete"]
    assert event.fields["skipped"] == ["commit", "deregister"] and event.fields["uncommitted"] == 2
    with pytest.raises(ValueError, match="unknown stop step"):
        report.skip("nap", "why")


@pytest.mark.parametrize("seconds", [0.0, 0.49, 601.0])
def test_configs_refuse_a_shutdown_timeout_out_of_range(seconds: float, tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="shutdown timeout"):
        BrokerConfig(broker_id=1, zk=ZkConfig.from_string("127.0.0.1:2181"), shutdown_timeout_s=seconds)
    with pytest.raises(ConfigurationError, match="shutdown timeout"):
        ConsumerConfig("g", Subscription.static({"t": 1}), "127.0.0.1:2181", tmp_path, shutdown_timeout_s=seconds)


@pytest.mark.parametrize("command", [["broker", "--id", "1"], ["consume", "--group", "g", "--topic", "t"]])
def test_the_cli_refuses_a_shutdown_timeout_out_of_range_and_documents_the_flag(command: list[str]) -> None:
    refused = run_cli(*command, "--shutdown-timeout", "0.1", "--zk", "127.0.0.1:1")
    assert refused.returncode == 2 and "--shutdown-timeout" in refused.stderr
    helped = run_cli(*command[:1], "--help")
    assert "--shutdown-timeout" in helped.stdout and "exits 3" in helped.stdout.replace("\n", " ")


def test_a_merged_report_holds_what_each_skipped() -> None:
    ours, theirs, clean = StopReport(), StopReport(), StopReport()
    ours.skip(COMMIT, "lease expired", uncommitted=1)
    theirs.skip(COMMIT_UNKNOWN, "no answer", uncommitted=2)
    theirs.skip(DEREGISTER, "no answer")
    ours.merge(theirs)
    ours.merge(clean)
    assert list(ours.skipped) == [COMMIT, COMMIT_UNKNOWN, DEREGISTER] and ours.uncommitted == 3
    assert ours.skipped[COMMIT] == "lease expired"
    assert "may not have been committed" in ours.summary(8.0)


def test_every_default_stop_ends_before_a_supervisor_kills() -> None:
    """The supervisors' SIGKILL (ChildProcess, the benchmark driver, Docker Compose) comes after KILL_GRACE_S: every
    default stop, watchdog margin included, is over by then; and the worker refuses a timeout that would not be."""
    for timeout in (DEFAULT_BROKER_TIMEOUT_S, DEFAULT_CONSUMER_TIMEOUT_S, worker_args(_WORKER).shutdown_timeout):
        assert hard_bound(timeout) < KILL_GRACE_S
    with pytest.raises(SystemExit):
        worker_args([*_WORKER, "--shutdown-timeout", str(KILL_GRACE_S)])


_WORKER = ["--protocol", "coordinator", "--zk", "127.0.0.1:1", "--data-dir", "d", "--journal", "j"]

#: A process whose stop finishes late in its budget, then whose exit hangs (a non-daemon thread that never ends).
_HANGS_AFTER_FINISH = """
import sys, threading, time
from zkcoord.runtime.stopping import SignalStop
from zkcoord.runtime.shutdown import StopReport
stop = SignalStop("hang", float(sys.argv[1]))
stop.begin()
time.sleep(float(sys.argv[2]))
stop.finish(StopReport())
threading.Thread(target=threading.Event().wait).start()
"""


@pytest.mark.parametrize("finish_after", [0.1, 1.7])
def test_the_watchdog_ends_a_hung_exit_at_the_deadline_plus_its_grace(finish_after: float) -> None:
    """However late in the budget finish() came, the process is gone by the deadline plus EXIT_GRACE_S (counted from
    the stop's start: the line begin() prints), with the status finish() decided."""
    timeout = 2.0
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    with subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(_HANGS_AFTER_FINISH), str(timeout), str(finish_after)],
        stderr=subprocess.PIPE,
        env=env,
        text=True,
    ) as proc:
        assert proc.stderr is not None
        assert "stopping (within 2 s" in proc.stderr.readline()
        began = time.monotonic()
        status = proc.wait(timeout + 5)
        took = time.monotonic() - began
    assert status == EXIT_CLEAN
    assert timeout - 0.1 < took < timeout + EXIT_GRACE_S + 0.15, f"exited {took:.2f} s after the stop began"


def test_the_final_commit_is_reported_as_it_went() -> None:
    """Not run: skipped; sent and unanswered (or still in flight when close() stops waiting): may not have been
    committed; landed: nothing; and once settled, a late outcome changes nothing and a commit not begun is not sent."""

    def settled(final: FinalCommit) -> StopReport:
        report = StopReport()
        final.settle(report, lambda: 5)
        return report

    assert settled(FinalCommit()).skipped.keys() == {COMMIT} and settled(FinalCommit()).uncommitted == 5
    in_flight = FinalCommit()
    assert in_flight.begin(2)
    report = settled(in_flight)
    assert report.skipped.keys() == {COMMIT_UNKNOWN} and report.uncommitted == 2
    in_flight.end(FinalCommit.LANDED)  # too late to change the report: it was journalled
    assert in_flight.outcome == FinalCommit.SENT and not in_flight.begin(2)
    for error, step in [
        (ZkUnavailableError("no answer"), COMMIT_UNKNOWN),
        (ZkNotSentError("not sent"), COMMIT),
        (ZkSessionExpiredError("expired"), COMMIT),
    ]:
        final = FinalCommit()
        assert final.begin(2)
        final.failed(error)
        assert settled(final).skipped.keys() == {step}
    landed = FinalCommit()
    assert landed.begin(2)
    landed.end(FinalCommit.LANDED)
    assert settled(landed).complete
