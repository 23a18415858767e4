"""Hostile group configs: ``/config/groups/<g>`` written with garbage (by hand, by a buggy tool), and
``/config/groups`` itself deleted, under a running group.  The coordinator journals each bad write once
(``input.rejected``), applies its own settings meanwhile and never stops coordinating; the CLI refuses to merge into
a config it cannot read and removes it when told.  The process case checks S2, S3 and S4 from the journals.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.cli import run_cli
from tests.clusters import Cluster
from tests.integration.test_consumer_e2e import Run
from tests.integration.test_coordinator import all_owned
from zkcoord.admin.group_config import set_config
from zkcoord.coordinator import Role
from zkcoord.coordinator.events import Event
from zkcoord.data.topics import TopicAdmin
from zkcoord.layout import paths
from zkcoord.layout.group_config import GroupConfig
from zkcoord.layout.group_state import GroupState
from zkcoord.runtime.journal import read_journal
from zkcoord.testbed.procs import wait_until

pytestmark = pytest.mark.integration

GROUP, TOPIC = "g", "t"

#: config data no codec accepts, each a different way to be wrong
GARBAGE = [
    b"\xff\xfe not utf-8",
    b'{"version":1,"config":{"max.size":1}}',  # a number where Kafka's format has a string
    b'{"version":1,"config":{"max.size":"1","colour":"red"}}',
    b'{"version":2,"config":{}}',
]


def _owners(state: GroupState | None) -> dict[str, int]:
    """Partitions per member in the state's target."""
    out: dict[str, int] = {}
    for parts in (state.target if state else {}).values():
        for thread in parts.values():
            out[thread.rsplit("-", 1)[0]] = out.get(thread.rsplit("-", 1)[0], 0) + 1
    return out


def _rejected(journal: Path) -> list[str]:
    return [
        str(e.fields["reason"])
        for e in read_journal(journal)
        if e.event == "input.rejected" and e.fields.get("what") == "group config"
    ]


@pytest.fixture
def run(zk_hosts: str, tmp_path: Path) -> Iterator[Run]:
    with ExitStack() as stack:
        yield Run(zk_hosts, tmp_path, stack)


@pytest.mark.slow
def test_garbage_in_the_config_is_journalled_once_per_write_and_the_defaults_apply(run: Run) -> None:
    run.broker(1)
    TopicAdmin(run.zk).create(TOPIC, 4)
    set_config(run.zk, GROUP, GroupConfig(max_size=1))
    run.consumer(GROUP, TOPIC)
    run.wait_members(GROUP, 1)
    run.consumer(GROUP, TOPIC)  # beyond max.size: left out, given nothing
    wait_until(lambda: len(run.zk.get_children(paths.group_ids(GROUP))) == 2, 20, "both registered")
    wait_until(lambda: any(e.event == "group.max_size_reached" for e in read_journal(run.journal)), 20, "excluded")
    assert list(_owners(run.state(GROUP)).values()) == [4]
    producer = run.producer(TOPIC, 4_000, 2_000)

    for n, garbage in enumerate(GARBAGE, 1):
        run.zk.set(paths.group_config(GROUP), garbage)
        wait_until(lambda n=n: len(_rejected(run.journal)) == n, 20, f"garbage write {n} journalled")  # type: ignore[misc]
    # The coordinator's own settings meanwhile: no max.size, both members share the partitions.
    wait_until(lambda: sorted(_owners(run.state(GROUP)).values()) == [2, 2], 20, "both members given partitions")
    assert len(_rejected(run.journal)) == len(GARBAGE), "a bad write is journalled once"
    assert "the coordinator's defaults apply" in _rejected(run.journal)[0]

    # The CLI: get and set refuse the garbage in one line and change nothing; delete removes it.
    common = ("--zk", run.hosts)
    before = run.zk.get(paths.group_config(GROUP))
    for args in (("get", GROUP), ("set", GROUP, "max.size=2")):
        out = run_cli("group", "config", *args, *common)
        assert out.returncode == 1 and out.stderr.count("\n") == 1, out.stderr
        assert out.stderr.startswith("Error: malformed group config at /config/groups/g: unsupported version 2")
        assert "zkcoord group config delete g" in out.stderr
    assert run.zk.get(paths.group_config(GROUP)) == before
    assert run_cli("group", "config", "delete", GROUP, *common).returncode == 0
    assert run.zk.exists(paths.group_config(GROUP)) is None

    assert producer.wait(60) == 0
    ledger = run.wait_consumed_all(GROUP, {TOPIC})
    assert ledger.total_produced({TOPIC}) == 4_000
    assert ledger.overlaps() == [], "S2: a partition was fetched by two consumers at overlapping times"
    assert ledger.duplicates() == {}, "S4: no consumer crashed, nothing may be consumed twice"
    # The coordinator carried on through it all: one term, never resigned.
    kinds = [e.event for e in read_journal(run.journal)]
    assert kinds.count("coordinator.elected") == 1 and "coordinator.resigned" not in kinds


def test_a_reset_watch_rereads_without_journalling_again_and_a_deleted_parent_is_followed_again(
    cluster: Cluster,
) -> None:
    cluster.broker(1)
    TopicAdmin(cluster.admin_zk).create(TOPIC, 2)
    a, b = cluster.consumer(GROUP, {TOPIC: 1}), cluster.consumer(GROUP, {TOPIC: 1})
    cluster.wait_stable(GROUP, 2)
    coordinator = cluster.coordinator(1)
    cluster.admin_zk.create(paths.group_config(GROUP), b"[1,2,3]", makepath=True)
    wait_until(lambda: len(_rejected(cluster.journal_dir)) == 1, 10, "the garbage journalled")
    # The data watch reset (a connection loss): the same write is read again, and not journalled again.
    coordinator.post(Event("config", coordinator.term_no, name=paths.group_config(GROUP)))
    coordinator.post(Event("configs", coordinator.term_no))
    set_config(cluster.admin_zk, "other", GroupConfig(max_size=3))  # a change seen after both re-reads
    wait_until(lambda: bool(cluster.events("group.config.changed", group="other")), 10, "the next change seen")
    assert len(_rejected(cluster.journal_dir)) == 1

    # /config/groups deleted by hand, configs and all: recreated and watched again; a new config applies.
    cluster.admin_zk.delete(paths.CONFIG_GROUPS, recursive=True)
    wait_until(lambda: cluster.admin_zk.exists(paths.CONFIG_GROUPS) is not None, 10, "/config/groups recreated")
    set_config(cluster.admin_zk, GROUP, GroupConfig(max_size=1))
    wait_until(
        lambda: sorted(len(c.partitions()) for c in (a, b)) == [0, 2] and all_owned({TOPIC: 2})([a, b]),
        10,
        "max.size 1",
    )
    assert coordinator.role is Role.COORDINATOR
