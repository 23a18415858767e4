"""Issue 25's scenario with real processes: a slow application with auto-commit off, killed (SIGKILL, from a fault
point) right after its ``on_partitions_revoked`` ran, while a second member joins.  Nothing may be lost: the next owner
starts at the application's own last commit, and every record is processed by someone."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.integration.test_consumer import produce
from tests.integration.test_consumer_e2e import Run, _id
from zkcoord.data.topics import TopicAdmin
from zkcoord.runtime.journal import JournalEvent, read_journal
from zkcoord.testbed.procs import ChildProcess, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PER_PARTITION = 200


@pytest.fixture
def run(zk_hosts: str, tmp_path: Path) -> Iterator[Run]:
    with ExitStack() as stack:
        yield Run(zk_hosts, tmp_path, stack)


def _events(run: Run, kind: str, consumer: str | None = None) -> list[JournalEvent]:
    return [
        e
        for e in read_journal(run.journal)
        if e.event == kind and (consumer is None or e.fields.get("consumer") == consumer)
    ]


def _processed(run: Run) -> dict[int, set[int]]:
    done: dict[int, set[int]] = {0: set(), 1: set()}
    for e in _events(run, "records.processed"):
        done[int(e.fields["partition"])].update(range(int(e.fields["first"]), int(e.fields["last"]) + 1))
    return done


def test_a_slow_application_killed_after_its_revoke_callback_loses_nothing(run: Run) -> None:
    run.broker()
    TopicAdmin(run.zk).create("t", 2)
    produce(run.data, "t", 2, PER_PARTITION)
    slow = ("--no-auto-commit", "--work-ms", "20", "--max-poll-records", "50")
    # hit 1 is the empty revoke of its own join; hit 2 the revoke when the second member joins
    first = ChildProcess(
        ["consume", "--group", "slow", "--topic", "t", *run.common(), "--data-dir", str(run.data), *slow],
        run.root / "consumer-slow.log",
        env={"ZKCOORD_FAULTS": "consumer.after_revoke=kill@2"},
    )
    run.stack.enter_context(first)
    wait_until(lambda: any(o >= 60 for o in _processed(run)[0]), 30, "the slow member mid-way through partition 0")
    second = run.consumer("slow", "t")
    assert first.wait(30) == -9, "the fault did not kill the slow member after its revoke callback"
    first_id, second_id = _id(run, first), _id(run, second)
    wait_until(lambda: all(len(v) == PER_PARTITION for v in _processed(run).values()), 60, "everything processed")
    # S3 on what the application finished: nothing lost, even the batch it was in the middle of.
    assert _processed(run) == {0: set(range(PER_PARTITION)), 1: set(range(PER_PARTITION))}
    # The next owner of each partition starts where the killed application's own commits left it.
    committed: dict[int, int] = {}
    for e in _events(run, "offsets.committed", first_id):
        committed[int(e.fields["partition"])] = int(e.fields["offset"])
    for e in _events(run, "fetch.started", second_id):
        partition = int(e.fields["partition"])
        assert e.fields["offset"] == committed.get(partition, 0), (partition, committed)
    # Its callback ran on the thread that calls poll(), and the stop was acknowledged only after it: parked first.
    assert _events(run, "command.parked", first_id), "the slow member's stop was not parked for its application"
    second.signal(15)
    assert second.wait(20) == 0
