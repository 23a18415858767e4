"""A deleted group's name used again while the coordinator that ran the group lives on: the new group converges and
consumes everything (the coordinator keeps nothing of the deleted group that stops it: S3, liveness)."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.cli import run_cli
from tests.integration.test_consumer_e2e import Run
from tests.ledger import Ledger
from zkcoord.data.topics import TopicAdmin
from zkcoord.layout import paths
from zkcoord.testbed.procs import ProcessError, wait_until

pytestmark = pytest.mark.integration


@pytest.fixture
def run(zk_hosts: str, tmp_path: Path) -> Iterator[Run]:
    with ExitStack() as stack:
        yield Run(zk_hosts, tmp_path, stack)


@pytest.mark.parametrize("protocol", ["coordinator", "consumer"])
def test_a_deleted_group_used_again_consumes_everything(run: Run, protocol: str) -> None:
    run.broker()
    TopicAdmin(run.zk).create("t", 2)
    assert run.producer("t", 200, 4_000).wait(60) == 0
    extra = ("--protocol", protocol)
    first = run.consumer("d", "t", extra=extra)
    run.wait_consumed_all("d", {"t"}, timeout=30)
    wait_until(lambda: run.zk.exists(paths.offset("d", "t", 1)) is not None, 10, "a commit of t-1")
    first.signal(signal.SIGTERM)
    assert first.wait(20) == 0
    wait_until(lambda: not run.zk.get_children(paths.group_ids("d")), 10, "the group to be empty")
    before = set(Ledger.read(run.journal, "d").deliveries)

    deleted = run_cli("group", "delete", "d", "--zk", run.hosts)
    assert deleted.returncode == 0, deleted.stderr
    # The coordinator that ran the group does not make it again (its members watch fires as the tree goes).
    with pytest.raises(ProcessError):  # the condition must never come true within the window
        wait_until(lambda: run.zk.exists(paths.group("d")) is not None, 2.0, "the deleted group to come back")
    assert run_cli("group", "list", "--json", "--zk", run.hosts).stdout.count('"d"') == 0

    second = run.consumer("d", "t", extra=extra)  # no committed offset now: from the log's start (--from earliest)

    def replayed() -> set[tuple[int, int]]:
        ledger = Ledger.read(run.journal, "d")
        return {(p, o) for cid, ds in ledger.deliveries.items() if cid not in before
                for _ts, _t, p, a, b in ds for o in range(a, b + 1)}  # fmt: skip

    wait_until(lambda: len(replayed()) == 200, 30, "the new group to consume all 200 records again")
    second.signal(signal.SIGTERM)
    assert second.wait(20) == 0
