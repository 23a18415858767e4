"""Prometheus metrics (issue 18, item 1), scraped over HTTP from real processes and checked against what happened:
the journals the same processes wrote, the partition logs, the ZooKeeper tree.

Real ZooKeeper (the suite's server, a chroot per test), real ``zkcoord broker``/``consume`` processes with
``--metrics-port``, real signals; in-process brokers and consumers where the test must hold the application still
(lag against the log) or serve two coordinators from one process (one registry each).
"""

from __future__ import annotations

import signal
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from tests.clusters import Cluster
from tests.integration.test_consumer import drain, produce
from tests.integration.test_consumer_e2e import Run
from tests.scrape import Scrape, scrape, try_scrape
from zkcoord.consumer import Consumer, ConsumerConfig, Subscription, TopicPartition
from zkcoord.consumer.legacy import LegacyConfig, LegacyConsumer
from zkcoord.consumer.metrics import ConsumerCollector
from zkcoord.data.partlog import log_offsets
from zkcoord.data.topics import TopicAdmin
from zkcoord.layout import paths
from zkcoord.layout.commands import Command, CommandOption
from zkcoord.layout.znodes import encode_int
from zkcoord.runtime.exposition import MetricsServer
from zkcoord.runtime.journal import Journal, read_journal
from zkcoord.testbed.procs import ChildProcess, wait_until
from zkcoord.zk import ZkClient, ZkConfig
from zkcoord.zkserver.util import free_ports

pytestmark = [pytest.mark.integration, pytest.mark.slow]

DEADLINE = 30.0


@pytest.fixture
def run(zk_hosts: str, tmp_path: Path) -> Iterator[Run]:
    with ExitStack() as stack:
        yield Run(zk_hosts, tmp_path, stack)


def _broker(run: Run, broker_id: int, port: int) -> ChildProcess:
    args = ["broker", "--id", str(broker_id), "--metrics-port", str(port), *run.common()]
    return run.stack.enter_context(ChildProcess(args, run.root / f"broker-{broker_id}.log"))


def _up(port: int) -> Scrape:
    """A scrape, once the endpoint answers (the process may still be starting)."""
    wait_until(lambda: try_scrape(port) is not None, DEADLINE, f"metrics on port {port}")
    return scrape(port)


def _counts(run: Run, pid: int) -> dict[str, Counter[str]]:
    """What the process ``pid`` journalled: rebalances by event, commands by event and option."""
    events = [e for e in read_journal(run.journal) if e.pid == pid]
    out: dict[str, Counter[str]] = {"rebalance": Counter(), "command": Counter()}
    for e in events:
        if e.event == "rebalance.started" and e.fields["attempt"] != 0:
            continue  # a retry's attempt, not a rebalance begun
        if e.event.startswith("rebalance."):
            out["rebalance"][e.event] += 1
        elif e.event in ("command.sent", "command.acked", "command.lost", "command.applied"):
            out["command"][f"{e.event}:{e.fields['option']}"] += 1
    return out


def _consumer_matches_journal(s: Scrape, run: Run, pid: int) -> None:
    """The consumer's command counters equal what it journalled (applied by option; refused in all)."""
    commands = _counts(run, pid)["command"]
    for option in ("stop-fetcher", "start-fetcher"):
        got = s.get("zkcoord_consumer_commands_applied_total", option=option)
        assert got == commands[f"command.applied:{option}"], option
    rejected = sum(1 for e in read_journal(run.journal) if e.pid == pid and e.event == "command.rejected")
    assert sum(s.labelled("zkcoord_consumer_commands_refused_total").values()) == rejected


def _matches_journal(s: Scrape, counts: dict[str, Counter[str]]) -> None:
    """Every coordinator counter equals what the same process journalled."""
    rebalances, commands = counts["rebalance"], counts["command"]
    assert s.get("zkcoord_coordinator_rebalances_started_total") == rebalances["rebalance.started"]
    assert s.get("zkcoord_coordinator_rebalances_completed_total") == rebalances["rebalance.completed"]
    assert s.get("zkcoord_coordinator_rebalances_skipped_total") == rebalances["rebalance.skipped"]
    assert s.get("zkcoord_coordinator_rebalances_failed_total") == rebalances["rebalance.failed"]
    assert s.get("zkcoord_coordinator_rebalance_attempts_retried_total") == rebalances["rebalance.retrying"]
    assert s.get("zkcoord_coordinator_rebalance_duration_seconds_count") == rebalances["rebalance.completed"]
    for option in ("stop-fetcher", "start-fetcher"):
        for event, metric in (("sent", "sent"), ("acked", "acknowledged"), ("lost", "lost")):
            got = s.get(f"zkcoord_coordinator_commands_{metric}_total", option=option)
            assert got == commands[f"command.{event}:{option}"], (metric, option)


def test_brokers_and_consumers_show_what_happened(run: Run) -> None:
    b1_port, b2_port, c1_port, c2_port = free_ports(4)
    brokers = {1: _broker(run, 1, b1_port), 2: _broker(run, 2, b2_port)}
    ports = {1: b1_port, 2: b2_port}
    _up(b1_port), _up(b2_port)

    def one_acting() -> bool:
        return sorted(scrape(ports[b]).get("zkcoord_coordinator_active") for b in ports) == [0, 1]

    wait_until(one_acting, DEADLINE, "one broker acting as the coordinator")
    acting = 1 if scrape(b1_port).get("zkcoord_coordinator_active") == 1 else 2
    standby = 3 - acting

    def epochs_agree() -> bool:
        a, b = scrape(ports[acting]), scrape(ports[standby])
        return a.get("zkcoord_coordinator_epoch") == b.get("zkcoord_coordinator_epoch") > 0

    wait_until(epochs_agree, DEADLINE, "the standby to see the acting coordinator's epoch")
    s = scrape(ports[acting])
    assert (s.get("zkcoord_coordinator_active"), scrape(ports[standby]).get("zkcoord_coordinator_active")) == (1, 0)
    assert s.get("zkcoord_coordinator_elections_total") == 1
    epoch = s.get("zkcoord_coordinator_epoch")
    assert s.types["process_cpu_seconds"] == "counter"  # the standard process collector rides along

    # A group with no members yet: examined, skipped, counted empty.
    run.zk.ensure_path(paths.group_ids("idle"))
    wait_until(lambda: scrape(ports[acting]).get("zkcoord_coordinator_groups", state="empty") == 1, DEADLINE, "idle")
    assert scrape(ports[acting]).get("zkcoord_coordinator_rebalances_skipped_total") == 1
    TopicAdmin(run.zk).create("t", 2)
    produce(run.data, "t", 2, 150)
    c1 = run.consumer("g", "t", extra=("--metrics-port", str(c1_port)))
    run.wait_members("g", 1)
    state = run.state("g")
    assert state is not None

    def consumed_all() -> bool:
        c = try_scrape(c1_port)
        lag = c.labelled("zkcoord_consumer_lag_records") if c else {}
        return c is not None and c.get("zkcoord_consumer_records_consumed_total") >= 300 and len(lag) == 2

    wait_until(consumed_all, DEADLINE, "consumer 1 to consume the 300 records")
    c = scrape(c1_port)
    for p in (0, 1):
        assert c.get("zkcoord_consumer_lag_records", group="g", topic="t", partition=str(p)) == 0
    assert c.get("zkcoord_consumer_assigned_partitions") == 2
    assert c.get("zkcoord_consumer_lease_valid") == 1
    assert c.get("zkcoord_consumer_commands_applied_total", option="start-fetcher") == 1
    info = c.labelled("zkcoord_consumer_info")
    assert [dict(labels)["group"] for labels in info] == ["g"] and dict(next(iter(info)))["protocol"] == "coordinator"
    wait_until(lambda: scrape(c1_port).get("zkcoord_consumer_commit_duration_seconds_count") >= 1, 10, "a commit")

    # Commands nobody should apply: two stale (S5), one for another group, two malformed.  Each is counted once.
    channel = paths.channel("g", dict(next(iter(info)))["consumer"])
    for command in (
        Command(CommandOption.STOP_FETCHER, state.epoch, state.generation - 1, "g"),
        Command(CommandOption.STOP_FETCHER, state.epoch - 1, state.generation + 5, "g"),
        Command(CommandOption.STOP_FETCHER, state.epoch, state.generation, "other"),
    ):
        run.zk.create(f"{channel}/{paths.COMMAND_PREFIX}x-", command.encode(), sequence=True)
    run.zk.create(f"{channel}/{paths.COMMAND_PREFIX}x-", b"{garbage", sequence=True)
    run.zk.create(f"{channel}/not-a-command", b"")
    wait_until(lambda: run.zk.get_children(channel) == [], DEADLINE, "every command refused and deleted")
    c = scrape(c1_port)
    refused = {dict(k)["reason"]: v for k, v in c.labelled("zkcoord_consumer_commands_refused_total").items()}
    assert refused == {"stale": 2, "misaddressed": 1, "malformed": 2, "forged": 0}
    assert c.get("zkcoord_consumer_assigned_partitions") == 2  # a refused stop stops nothing

    # A second member: one rebalance, counted on the acting broker exactly as its journal tells it.
    before = scrape(ports[acting])
    assert before.get("zkcoord_coordinator_members") == 1
    run.consumer("g", "t", extra=("--metrics-port", str(c2_port)))
    run.wait_members("g", 2)
    wait_until(lambda: scrape(c1_port).get("zkcoord_consumer_rebalances_total") >= 1, DEADLINE, "c1's rebalance")
    after = scrape(ports[acting])
    assert after.get("zkcoord_coordinator_rebalances_completed_total") > before.get(
        "zkcoord_coordinator_rebalances_completed_total"
    )
    _matches_journal(after, _counts(run, brokers[acting].pid))
    assert after.get("zkcoord_coordinator_members") == 2
    assert after.get("zkcoord_coordinator_groups", state="stable") == 1
    assert after.get("zkcoord_coordinator_rebalances_in_progress") == 0
    assert scrape(ports[standby]).get("zkcoord_coordinator_rebalances_completed_total") == 0
    c = scrape(c1_port)
    assert c.get("zkcoord_consumer_assigned_partitions") == 1
    assert c.get("zkcoord_consumer_last_rebalance_seconds_ago") >= 0
    assert c.get("zkcoord_consumer_commands_applied_total", option="stop-fetcher") >= 1
    _consumer_matches_journal(c, run, c1.pid)
    assert _up(c2_port).get("zkcoord_consumer_assigned_partitions") == 1

    # The acting broker stops: the standby takes over, under a higher epoch.
    brokers[acting].signal(signal.SIGTERM)
    assert brokers[acting].wait(20) == 0
    wait_until(lambda: scrape(ports[standby]).get("zkcoord_coordinator_active") == 1, DEADLINE, "the takeover")
    s = scrape(ports[standby])
    assert s.get("zkcoord_coordinator_epoch") > epoch
    assert s.get("zkcoord_coordinator_elections_total") == 1
    wait_until(lambda: scrape(ports[standby]).get("zkcoord_coordinator_members") == 2, DEADLINE, "members seen")
    c1.signal(signal.SIGTERM)
    assert c1.wait(20) == 0
    assert try_scrape(c1_port) is None, "a stopped consumer's endpoint is gone"


def test_lag_per_partition_is_the_log_beyond_the_position(zk_hosts: str, tmp_path: Path) -> None:
    """With the application holding still, each partition's lag is exactly its log's end less its position, and
    two coordinators in one process each show only their own metrics (a registry each)."""
    with ExitStack() as stack:
        cluster = Cluster(zk_hosts, tmp_path / "journal", stack)
        servers = {}
        for broker_id in (1, 2):
            cluster.broker(broker_id)
            registry = CollectorRegistry()
            registry.register(cluster.coordinator(broker_id).collector())
            servers[broker_id] = stack.enter_context(MetricsServer.start(registry))
        wait_until(lambda: len(cluster.acting()) == 1, DEADLINE, "a coordinator")
        TopicAdmin(cluster.admin_zk).create("t", 2)
        data = tmp_path / "data"
        produce(data, "t", 2, 40)
        config = ConsumerConfig(
            group="g",
            subscription=Subscription.static({"t": 1}),
            zk=zk_hosts,
            data_dir=data,
            session_timeout_s=4.0,
            max_poll_records=7,
            auto_commit=False,
        )
        consumer = stack.enter_context(Consumer(config, journal=Journal(cluster.journal_dir, "consumer")))
        registry = CollectorRegistry()
        registry.register(ConsumerCollector(consumer))
        server = stack.enter_context(MetricsServer.start(registry))
        drain(consumer, 21)  # then the application holds still: nothing is polled while we look
        positions = consumer.fetcher.positions()
        s = scrape(server.port)
        for tp in (TopicPartition("t", 0), TopicPartition("t", 1)):
            end = log_offsets(data, tp.topic, tp.partition)[1]
            assert s.get("zkcoord_consumer_lag_records", group="g", topic="t", partition=str(tp.partition)) == (
                end - positions[tp]
            )
        assert s.get("zkcoord_consumer_records_consumed_total") == sum(positions.values()) == 21
        produce(data, "t", 1, 5)  # five more records on partition 0: its lag grows by five, nothing else moves
        again = scrape(server.port)
        assert again.get("zkcoord_consumer_lag_records", group="g", topic="t", partition="0") == (
            s.get("zkcoord_consumer_lag_records", group="g", topic="t", partition="0") + 5
        )
        drain(consumer, 85 - 21)
        done = scrape(server.port)
        assert list(done.labelled("zkcoord_consumer_lag_records").values()) == [0, 0]
        assert done.get("zkcoord_consumer_records_consumed_total") == 85
        acting = cluster.acting()[0]
        shown = {b: scrape(servers[b].port) for b in servers}
        assert {b: s.get("zkcoord_coordinator_active") for b, s in shown.items()} == {
            b: float(b == acting) for b in servers
        }
        assert shown[acting].get("zkcoord_coordinator_members") == 1
        assert shown[3 - acting].get("zkcoord_coordinator_members") == 0


def test_a_fenced_write_is_counted_and_the_broker_is_elected_again(zk_hosts: str, tmp_path: Path) -> None:
    """A newer epoch written behind the coordinator's back (as a newer coordinator's election would): its next write
    is refused by the fence, counted, and it resigns and wins a later term."""
    with ExitStack() as stack:
        cluster = Cluster(zk_hosts, tmp_path / "journal", stack)
        cluster.broker(1)
        registry = CollectorRegistry()
        registry.register(cluster.coordinator(1).collector())
        server = stack.enter_context(MetricsServer.start(registry))
        wait_until(lambda: scrape(server.port).get("zkcoord_coordinator_active") == 1, DEADLINE, "elected")
        epoch = scrape(server.port).get("zkcoord_coordinator_epoch")
        zk = cluster.admin_zk
        _data, stat = zk.get(paths.COORDINATOR_EPOCH)
        zk.set(paths.COORDINATOR_EPOCH, encode_int(int(epoch) + 10), stat.version)
        zk.ensure_path(paths.group("fresh"))  # a new group without ids: the coordinator creates them, fenced

        def re_elected() -> bool:
            s = scrape(server.port)
            return s.get("zkcoord_coordinator_elections_total") == 2 and s.get("zkcoord_coordinator_active") == 1

        wait_until(re_elected, DEADLINE, "the fenced write, the resignation and a new term")
        s = scrape(server.port)
        assert s.get("zkcoord_coordinator_fenced_writes_total") == 1
        assert s.get("zkcoord_coordinator_epoch") > epoch + 10
        assert len(cluster.events("coordinator.resigned")) == 1


def test_a_zk_client_consumer_shows_the_same_metrics(zk_hosts: str, tmp_path: Path) -> None:
    """Kafka 0.8's client-side protocol (no coordinator): the same families, its lease always valid, its commits
    timed, no commands."""
    with ExitStack() as stack:
        admin = stack.enter_context(ZkClient(ZkConfig.from_string(zk_hosts)))
        admin.create(paths.broker(0), b"{}", ephemeral=True, makepath=True)  # topics need a broker; none runs
        TopicAdmin(admin).create("t", 2)
        data = tmp_path / "data"
        produce(data, "t", 2, 15)
        config = ConsumerConfig(
            group="old", subscription=Subscription.static({"t": 1}), zk=zk_hosts, data_dir=data, session_timeout_s=4.0
        )
        consumer = stack.enter_context(LegacyConsumer(config, legacy=LegacyConfig(rebalance_backoff_s=0.1)))
        registry = CollectorRegistry()
        registry.register(ConsumerCollector(consumer, "zk-client"))
        server = stack.enter_context(MetricsServer.start(registry))
        got: list[object] = []

        def thirty() -> bool:
            got.extend(consumer.poll(0.05))
            return len(got) >= 30

        wait_until(thirty, DEADLINE, "30 records", interval=0)
        consumer.commit()
        s = scrape(server.port)
        assert [dict(labels)["protocol"] for labels in s.labelled("zkcoord_consumer_info")] == ["zk-client"]
        assert s.get("zkcoord_consumer_records_consumed_total") == 30
        assert list(s.labelled("zkcoord_consumer_lag_records").values()) == [0, 0]
        assert s.get("zkcoord_consumer_lease_valid") == 1
        assert s.get("zkcoord_consumer_commit_duration_seconds_count") >= 1
        assert s.get("zkcoord_consumer_commit_failures_total") == 0
        assert sum(s.labelled("zkcoord_consumer_commands_applied_total").values()) == 0
