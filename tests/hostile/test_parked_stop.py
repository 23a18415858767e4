"""A stop parked for the application (issue 25: acknowledged only after ``on_partitions_revoked`` ran inside
``poll()``) when ZooKeeper goes away: the application's ``poll()`` runs the callback while ZooKeeper is down, and the
command thread, handed the stop back with no session to finish it in, must finish it once ZooKeeper is back -- not
drop it.  A parked stop never finished blocks every later command of that member, and the group with it (the demo's
``zk-restart`` fault found this: 104 229 records of one group never consumed).

Real ZooKeeper (the test's own server, stopped and started again on the same port and data, within the session
timeout), a real coordinator, two in-process consumers; S2 (no partition fetched by two at once), S3 (everything
consumed), S4 (nothing twice) and convergence are checked afterwards.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.clusters import Cluster
from tests.integration.test_consumer import make, polling, produce
from tests.ledger import Ledger
from zkcoord.consumer import Consumer, TopicPartition
from zkcoord.data.topics import TopicAdmin
from zkcoord.testbed.procs import wait_until
from zkcoord.zkserver import ZkServer

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PER_PARTITION = 20


@pytest.fixture
def cluster(server: ZkServer, tmp_path: Path) -> Iterator[Cluster]:
    with ExitStack() as stack:
        cluster = Cluster(server.connect_string, tmp_path / "journal", stack)
        cluster.broker(1)
        TopicAdmin(cluster.admin_zk).create("t", 2)
        yield cluster


def _consumed(cluster: Cluster) -> Ledger:
    return Ledger.read(cluster.journal_dir, "g")


def _drain(consumers: list[Consumer], cluster: Cluster, total: int) -> None:
    def done() -> bool:
        return sum(len(c) for c in _consumed(cluster).consumed.values()) >= total

    wait_until(polling(consumers, done), 30, f"{total} records consumed", interval=0)


def test_a_stop_parked_when_zookeeper_restarts_is_finished_once_it_is_back(
    cluster: Cluster, server: ZkServer, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    produce(data, "t", 2, PER_PARTITION)
    revoked: list[list[TopicPartition]] = []
    called = threading.Event()

    def on_revoked(partitions: list[TopicPartition]) -> None:
        if partitions:
            revoked.append(partitions)
            called.set()

    with ExitStack() as stack:
        # Sessions long enough to outlive the server's restart on a loaded machine (a JVM start took over 4 s at a
        # load of 7, and the sessions expired): the case under test is the restart *within* the session timeout.
        first = make(cluster, data, stack, on_revoked=on_revoked, auto_commit=False, session_timeout_s=15.0)
        _drain([first], cluster, 2 * PER_PARTITION)
        first.commit()  # what the application finished: everything so far
        second = make(cluster, data, stack, auto_commit=False, session_timeout_s=15.0)

        # The join's stop reaches the first member, which stops fetching and parks it for its application: nobody
        # polls it, so it stays parked (and the rebalance waits).
        def parked() -> bool:
            return bool(cluster.events("command.parked", consumer=first.consumer_id, partitions=2))

        wait_until(parked, 20, "the first member's stop parked for its application")
        server.stop()
        # The application polls while ZooKeeper is down: its callback runs, and the stop is handed back to the
        # command thread, which finds no session to finish it in.
        wait_until(polling([first, second], called.is_set), 10, "the revoke callback inside poll()", interval=0)
        assert revoked == [[TopicPartition("t", 0), TopicPartition("t", 1)]]
        server.start()  # within the session timeout: both sessions live on

        one_each = polling(
            [first, second], lambda: cluster.is_stable("g", 2) and len(first.assignment()) == len(second.assignment())
        )
        wait_until(one_each, 30, "the group stable with one partition each after ZooKeeper came back", interval=0)
        produce(data, "t", 2, PER_PARTITION)
        _drain([first, second], cluster, 4 * PER_PARTITION)

    ledger = _consumed(cluster)
    assert {tp: sorted(c) for tp, c in ledger.consumed.items()} == {
        ("t", p): list(range(2 * PER_PARTITION)) for p in range(2)
    }, "S3: not every record was consumed"
    assert ledger.duplicates() == {}, "S4: a record was consumed twice"
    assert ledger.overlaps() == [], "S2: a partition was fetched by two consumers at overlapping times"
    applied = cluster.events("command.applied", consumer=first.consumer_id, option="stop-fetcher", partitions=2)
    assert applied, "the parked stop was never finished"
