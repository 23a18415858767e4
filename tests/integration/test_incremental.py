"""Incremental rebalancing end to end: real broker, producer and consumer processes, real signals, the journals as
evidence.  Members that keep their partitions are never stopped; moved partitions are revoked before they are
assigned (S2); nothing is lost (S3) or duplicated by a clean change (S4); a fault falls back to safety."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_consumer_e2e import Run, _id
from tests.ledger import Ledger
from zkcoord.data.topics import TopicAdmin
from zkcoord.runtime.journal import read_journal
from zkcoord.testbed.procs import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

INCREMENTAL = ("--rebalance", "incremental")


@pytest.fixture
def run(zk_hosts: str, tmp_path: Path) -> Iterator[Run]:
    with ExitStack() as stack:
        yield Run(zk_hosts, tmp_path, stack)


def events(run: Run, group: str, *names: str) -> list[dict[str, Any]]:
    """The group's journal events called ``names``, in time order, each as its fields plus ``ev`` and ``ts``."""
    out = []
    for e in sorted(read_journal(run.journal), key=lambda ev: (ev.ts_ms, ev.pid, ev.seq)):
        if e.event in names and e.fields.get("group") == group:
            out.append({**e.fields, "ev": e.event, "ts": e.ts_ms})
    return out


def started(run: Run, group: str, mode: str) -> list[dict[str, Any]]:
    return [e for e in events(run, group, "rebalance.started") if e.get("mode") == mode]


def test_a_join_and_a_leave_move_only_what_changes_owner(run: Run) -> None:
    run.broker()
    TopicAdmin(run.zk).create("t", 12)
    consumers = [run.consumer("i", "t", extra=INCREMENTAL) for _ in range(3)]
    run.wait_members("i", 3)
    producer = run.producer("t", 30_000, 5_000)
    wait_until(lambda: Ledger.read(run.journal, "i").consumed != {}, 30, "consumption to begin")
    before = len(started(run, "i", "incremental"))
    consumers.append(run.consumer("i", "t", extra=INCREMENTAL))
    run.wait_members("i", 4)
    wait_until(lambda: len(started(run, "i", "incremental")) > before, 10, "an incremental rebalance")
    join = started(run, "i", "incremental")[-1]
    wait_until(lambda: bool(_id(run, consumers[3])), 10, "the new consumer's id")
    newcomer = _id(run, consumers[3])
    # 12 partitions over 3 -> 4 members: each old member gives up exactly one, to the newcomer alone.
    assert join["gaining"] == [newcomer]
    assert newcomer not in join["revoking"] and len(join["revoking"]) == 3
    assert join["moved"] == 3
    applied = [e for e in events(run, "i", "command.applied") if e["generation"] == join["generation"]]
    assert {(e["consumer"], e["option"]) for e in applied} == {
        *((m, "stop-fetcher") for m in join["revoking"]),
        (newcomer, "start-fetcher"),
    }
    assert all(e["partitions"] == 1 for e in applied if e["option"] == "stop-fetcher")

    consumers[0].signal(signal.SIGTERM)  # one leaves cleanly: its 3 partitions go to the others, nothing is stopped
    assert consumers[0].wait(20) == 0
    run.wait_members("i", 3)
    leave = started(run, "i", "incremental")[-1]
    assert leave["generation"] > join["generation"]
    assert leave["revoking"] == [] and leave["moved"] == 3
    assert producer.wait(60) == 0
    ledger = run.wait_consumed_all("i", {"t"})
    assert ledger.total_produced({"t"}) == 30_000
    assert ledger.duplicates() == {}, "a clean incremental rebalance must duplicate nothing"
    assert ledger.overlaps() == [], "two consumers owned a partition at the same time"
    # From the join on, the only fetches stopped by a command were the 3 moved partitions (the leaver stopped its
    # own as it closed; nobody was stopped for the leave).
    stops = [e for e in events(run, "i", "fetch.stopped") if e["ts"] >= join["ts"] and e["reason"] != "closing"]
    assert len(stops) == 3, stops
    for c in consumers[1:]:
        c.signal(signal.SIGTERM)
        assert c.wait(20) == 0


def test_a_paused_member_is_fenced_and_the_group_recovers_without_overlap(run: Run) -> None:
    run.broker()
    TopicAdmin(run.zk).create("t", 6)
    sleeper = run.consumer("p", "t", extra=INCREMENTAL)
    others = [run.consumer("p", "t", extra=INCREMENTAL) for _ in range(2)]
    run.wait_members("p", 3)
    producer = run.producer("t", 20_000, 2_000)
    wait_until(lambda: bool(_id(run, sleeper)), 10, "consumer id")
    sleeper_id = _id(run, sleeper)
    wait_until(lambda: sleeper_id in Ledger.read(run.journal, "p").deliveries, 30, "the sleeper consuming")
    sleeper.signal(signal.SIGSTOP)  # a real pause: its session expires while it holds partitions
    paused_at = time.time() * 1000
    run.wait_members("p", 2, timeout=30)
    sleeper.signal(signal.SIGCONT)
    run.wait_members("p", 3, timeout=30)  # it rejoined as a new incarnation
    assert producer.wait(60) == 0
    ledger = run.wait_consumed_all("p", {"t"})
    # The sleeper's partitions were free (its session had expired, S6): given to the others with no stop, and
    # given back to its new incarnation incrementally.
    after = [e for e in started(run, "p", "incremental") if e["ts"] > paused_at]
    assert after, "no incremental rebalance after the pause"
    assert all(sleeper_id not in e["revoking"] for e in after)
    assert ledger.overlaps() == [], "two consumers owned a partition at the same time"
    for c in (sleeper, *others):
        c.signal(signal.SIGTERM)
        assert c.wait(20) == 0


def test_a_group_with_an_eager_member_rebalances_eagerly(run: Run) -> None:
    run.broker()
    TopicAdmin(run.zk).create("t", 4)
    first = run.consumer("m", "t", extra=INCREMENTAL)
    run.wait_members("m", 1)
    second = run.consumer("m", "t")  # an older client: no incremental support
    run.wait_members("m", 2)
    last = events(run, "m", "rebalance.started")[-1]
    assert last["mode"] == "eager" and last["assignor"] == "range"
    for c in (first, second):
        c.signal(signal.SIGTERM)
        assert c.wait(20) == 0
