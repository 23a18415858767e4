"""The stop budget and report (zkcoord/shutdown.py), and the configs that validate the timeout."""

from __future__ import annotations

from pathlib import Path

import pytest

from consumer import ConsumerConfig, Subscription
from tests.cli import run_cli
from zkcoord.broker import BrokerConfig
from zkcoord.errors import ConfigurationError
from zkcoord.journal import Journal, read_journal
from zkcoord.shutdown import COMMIT, DEREGISTER, EXIT_CLEAN, EXIT_INCOMPLETE, StopBudget, StopReport
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
