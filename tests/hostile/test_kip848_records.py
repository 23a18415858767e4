"""Hostile state in a consumer-protocol group's records (``kip848``, ``target/``, ``current/``), read by a coordinator
that takes the group over: records it cannot decode, or that break KIP-848's rules, make it rebuild the group (and say
why), stopping whoever may be fetching first; it never grants a partition twice, and the group converges."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.clusters import Cluster
from tests.integration.test_coordinator import all_owned
from zkcoord.data.topics import TopicAdmin
from zkcoord.layout import paths
from zkcoord.layout.kip848 import CurrentAssignment
from zkcoord.testbed.procs import wait_until

pytestmark = pytest.mark.integration


def _unreadable(_bad: CurrentAssignment) -> bytes:
    return b"{not json"


def _double_ownership(bad: CurrentAssignment) -> bytes:
    return bad.encode()  # claims the other member's partitions as its own too


DAMAGE: dict[str, Callable[[CurrentAssignment], bytes]] = {
    "unreadable": _unreadable,
    "double-ownership": _double_ownership,
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_damaged_records_read_by_a_new_coordinator_are_rebuilt_not_trusted(
    zk_hosts: str, tmp_path: Path, damage: str
) -> None:
    with ExitStack() as stack:
        cluster = Cluster(zk_hosts, tmp_path / "journal", stack)
        cluster.broker(1)
        wait_until(lambda: cluster.acting() == [1], 10, "broker 1 coordinating")
        cluster.broker(2)
        TopicAdmin(cluster.admin_zk).create("t", 4)
        a = cluster.consumer("g", {"t": 1}, consumer_protocol=True)
        b = cluster.consumer("g", {"t": 1}, consumer_protocol=True)
        wait_until(lambda: all_owned({"t": 4})([a, b]) and len(a.partitions()) == 2, 20, "two each")
        wait_until(lambda: cluster.state("g").phase.value == "stable", 10, "the group stable")
        mine = CurrentAssignment.decode(cluster.admin_zk.get(paths.current("g", a.consumer_id))[0])
        theirs = CurrentAssignment.decode(cluster.admin_zk.get(paths.current("g", b.consumer_id))[0])
        bad = dataclasses.replace(mine, assigned=mine.assigned | theirs.assigned)
        data = DAMAGE[damage](bad)
        cluster.admin_zk.set(paths.current("g", a.consumer_id), data)
        cluster.brokers[1].stop()  # the successor reads the records afresh
        wait_until(lambda: cluster.acting() == [2], 20, "broker 2 to take over")
        wait_until(lambda: bool(cluster.events("kip848.rebuilt", group="g", epoch=2)), 20, "the group rebuilt")
        [rebuilt] = cluster.events("kip848.rebuilt", group="g", epoch=2)
        expected = "unreadable" if damage == "unreadable" else "break KIP-848's rules"
        assert expected in rebuilt.fields["reason"], rebuilt.fields
        # Rebuilt: whoever may be fetching is stopped first (the classic state does not vouch for a KIP-848
        # group's registry), then the group converges, every partition owned once.
        wait_until(lambda: all_owned({"t": 4})([a, b]) and len(a.partitions()) == 2, 20, "two each again")
        wait_until(lambda: cluster.state("g").phase.value == "stable", 10, "the group stable again")
        later = cluster.events("kip848.resumed", group="g", epoch=2)
        assert not later, "records that cannot be trusted were carried on from"
