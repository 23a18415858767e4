"""Hostile classic-protocol state: the sync record written by someone who is not the generation's leader, or not a
record at all.  A real broker and ZooKeeper; the test itself
plays a member and its leader (its own session holds the member's ephemeral registration), so it can write exactly
the bad state.  The coordinator refuses each one with a journal event and goes on (S7): the bad sync fails the
generation and the next one is joined; a stale sync is ignored and the valid one that follows is distributed."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_classic import ClassicRun, join
from tests.integration.test_incremental import events
from zkcoord.data.topics import TopicAdmin
from zkcoord.layout import paths
from zkcoord.layout.classic import SyncRecord
from zkcoord.layout.registrations import MemberRegistration, Pattern
from zkcoord.testbed.procs import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

MEMBER = "h_host-1-0000000a"


@pytest.fixture
def run(zk_hosts: str, tmp_path: Path) -> Iterator[ClassicRun]:
    with ExitStack() as stack:
        yield ClassicRun(zk_hosts, tmp_path, stack)


def joined(run: ClassicRun, after: int) -> dict[str, Any]:
    """The first ``classic.joined`` of a generation above ``after``."""
    found: list[dict[str, Any]] = []

    def seen() -> bool:
        found[:] = [e for e in events(run, "h", "classic.joined") if e["generation"] > after]
        return bool(found)

    wait_until(seen, 30, f"a join above generation {after}")
    return found[0]


def test_a_bad_or_stale_sync_record_is_refused_and_the_coordinator_goes_on(run: ClassicRun) -> None:
    broker = run.broker()
    TopicAdmin(run.zk).create("t", 2)
    registration = MemberRegistration(Pattern.STATIC, {"t": 1}, 1, assignors=("range",))
    run.zk.ensure_path(paths.channel("h", MEMBER))
    run.zk.create(paths.member("h", MEMBER), registration.encode(), ephemeral=True, makepath=True)
    first = joined(run, 0)
    assert first["leader"] == MEMBER and first["strategy"] == "range"
    run.zk.set(paths.classic_sync("h"), b"\xff not a record")
    wait_until(lambda: bool(events(run, "h", "classic.assignment_invalid")), 30, "the bad sync refused")
    [refused] = events(run, "h", "classic.assignment_invalid")
    assert refused["generation"] == first["generation"] and "malformed" in refused["reason"]
    second = joined(run, first["generation"])
    assert second["leader"] == MEMBER, "the only member leads again: every leader failed"
    record = join(run, "h")
    assert record.generation == second["generation"] and record.current == {}
    stale = SyncRecord(first["generation"], MEMBER, "range", {"t": {0: f"{MEMBER}-0", 1: f"{MEMBER}-0"}})
    run.zk.set(paths.classic_sync("h"), stale.encode())
    wait_until(lambda: bool(events(run, "h", "classic.sync_stale")), 30, "the stale sync ignored")
    assert [e["expected_generation"] for e in events(run, "h", "classic.sync_stale")] == [second["generation"]]
    good = SyncRecord(second["generation"], MEMBER, "range", stale.assignment)
    run.zk.set(paths.classic_sync("h"), good.encode())
    wait_until(lambda: bool(events(run, "h", "classic.synced")), 30, "the valid sync accepted")

    def stops() -> list[str]:
        return [e["option"] for e in events(run, "h", "command.sent") if e["generation"] == second["generation"]]

    wait_until(lambda: bool(stops()), 30, "the stop-fetcher of the accepted generation")
    assert stops() == ["stop-fetcher"], "distributed through the command channel"
    assert broker.alive()


def test_an_owner_znode_past_the_partition_limit_does_not_poison_the_join_record(run: ClassicRun) -> None:
    """An owner znode written by hand at a partition number past the codec's limit (``owners/t/10000``): the join
    record's ``current`` (the sticky assignors' input) holds only the topic's real partitions, so every member can
    read the record -- else each refused it and no leader ever answered: the group never rebalanced again."""
    run.broker()
    TopicAdmin(run.zk).create("t", 2)
    run.zk.create(paths.owner("h", "t", 10_000), f"{MEMBER}-0".encode(), makepath=True)
    run.zk.create(paths.owner("h", "t", 1), f"{MEMBER}-0".encode(), makepath=True)
    registration = MemberRegistration(Pattern.STATIC, {"t": 1}, 1, assignors=("range",))
    run.zk.ensure_path(paths.channel("h", MEMBER))
    run.zk.create(paths.member("h", MEMBER), registration.encode(), ephemeral=True, makepath=True)
    first = joined(run, 0)
    record = join(run, "h")  # what every member decodes (ClassicLeader.on_join)
    assert record.generation == first["generation"] and record.current == {"t": {1: f"{MEMBER}-0"}}
