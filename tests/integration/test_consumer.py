"""The consumer in-process against a real ZooKeeper and a real coordinator: commands, offsets, callbacks."""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from tests.clusters import Cluster
from tests.scripted import write_command
from tests.zkutil import expire_session
from zkcoord.consumer import Consumer, ConsumerConfig, OffsetCommitFencedError, Subscription, TopicPartition
from zkcoord.consumer.fetcher import FetchManager
from zkcoord.data.partlog import PartitionWriter
from zkcoord.data.topics import TopicAdmin
from zkcoord.layout import paths
from zkcoord.layout.commands import Command, CommandOption
from zkcoord.layout.group_state import GroupPhase
from zkcoord.runtime.journal import Journal, read_journal
from zkcoord.testbed.poll_loop import PollLoop
from zkcoord.testbed.procs import wait_until

pytestmark = pytest.mark.integration


def make(
    cluster: Cluster,
    data: Path,
    stack: ExitStack,
    on_revoked: object = None,
    *,
    on_assigned: object = None,
    on_lost: object = None,
    **kw: object,
) -> Consumer:
    kw.setdefault("session_timeout_s", 4.0)
    config = ConsumerConfig(
        group="g",
        subscription=Subscription.static({"t": 1}),
        zk=cluster.hosts,
        data_dir=data,
        **kw,  # type: ignore[arg-type]
    )
    consumer = Consumer(
        config,
        journal=Journal(cluster.journal_dir, "consumer"),
        on_partitions_revoked=on_revoked,  # type: ignore[arg-type]
        on_partitions_assigned=on_assigned,  # type: ignore[arg-type]
        on_partitions_lost=on_lost,  # type: ignore[arg-type]
    )
    stack.enter_context(consumer)
    return consumer


def produce(data: Path, topic: str, partitions: int, per_partition: int) -> None:
    for p in range(partitions):
        with PartitionWriter(data, topic, p) as writer:
            writer.append_batch([(None, f"{p}:{i}".encode()) for i in range(per_partition)])


def polling(consumers: list[Consumer], condition: Callable[[], bool]) -> Callable[[], bool]:
    """``condition``, checked after one ``poll`` of each consumer: a rebalance waits for the applications' polls."""

    def check() -> bool:
        for consumer in consumers:
            consumer.poll(0.02)
        return condition()

    return check


def drain(consumer: Consumer, want: int, timeout: float = 20) -> list[tuple[int, int]]:
    got: list[tuple[int, int]] = []

    def more() -> bool:
        got.extend((r.partition, r.offset) for r in consumer.poll(0.05))
        return len(got) >= want

    wait_until(more, timeout, f"{want} records", interval=0)
    return got


def test_consume_commit_and_fenced_commit_after_reassignment(cluster: Cluster, tmp_path: Path) -> None:
    cluster.broker(1)
    TopicAdmin(cluster.admin_zk).create("t", 2)
    data = tmp_path / "data"
    produce(data, "t", 2, 50)
    revoked: list[list[TopicPartition]] = []
    with ExitStack() as stack:
        first = make(cluster, data, stack, on_revoked=revoked.append, auto_commit=False, max_poll_records=7)
        got = drain(first, 100)
        assert sorted(got) == [(p, o) for p in range(2) for o in range(50)]
        assert first.commit() == {TopicPartition("t", 0): 50, TopicPartition("t", 1): 50}
        positions = first.fetcher.positions()
        # A second member: the coordinator moves one partition to it.  Our stop commits, the move happens.
        second = make(cluster, data, stack)
        both = [first, second]
        wait_until(polling(both, lambda: cluster.is_stable("g", 2)), 20, "group g stable with 2 members", interval=0)
        one_each = polling(both, lambda: len(first.assignment()) == 1 and len(second.assignment()) == 1)
        wait_until(one_each, 10, "one each", interval=0)
        assert revoked, "on_partitions_revoked was not called"
        moved = next(iter(set(positions) - set(first.assignment())))
        with pytest.raises(OffsetCommitFencedError) as info:
            first.handler.commit({moved: 1})  # an old position of a partition we no longer own
        assert info.value.partitions == [moved]
        assert cluster.admin_zk.get(paths.offset("g", moved.topic, moved.partition))[0] == b"50"


def test_stale_malformed_and_foreign_commands_are_refused_and_acknowledged(cluster: Cluster, tmp_path: Path) -> None:
    cluster.broker(1)
    TopicAdmin(cluster.admin_zk).create("t", 2)
    with ExitStack() as stack:
        consumer = make(cluster, tmp_path / "data", stack)
        stack.enter_context(PollLoop()).add(consumer)
        state = cluster.wait_stable("g", 1)
        wait_until(lambda: len(consumer.assignment()) == 2, 10, "assigned")
        channel = paths.channel("g", consumer.consumer_id)
        stale = Command(CommandOption.STOP_FETCHER, state.epoch, state.generation - 1, "g")
        older_epoch = Command(CommandOption.STOP_FETCHER, state.epoch - 1, state.generation + 5, "g")
        foreign = Command(CommandOption.STOP_FETCHER, state.epoch, state.generation, "other")
        zk = cluster.admin_zk
        for data in (stale.encode(), older_epoch.encode(), foreign.encode(), b"{garbage"):
            zk.create(f"{channel}/{paths.COMMAND_PREFIX}x-", data, sequence=True)
        zk.create(f"{channel}/not-a-command", b"")
        wait_until(lambda: zk.get_children(channel) == [], 10, "every command acknowledged")
        reasons = [e.fields["reason"] for e in read_journal(cluster.journal_dir) if e.event == "command.rejected"]
        assert any(r.startswith("stale: generation") for r in reasons)
        assert any(r.startswith("stale: coordinator epoch") for r in reasons)
        assert any("addressed to group 'other'" in r for r in reasons)
        assert any(r.startswith("malformed") for r in reasons)
        assert any("not a command" in r for r in reasons)
        assert len(consumer.assignment()) == 2, "a refused stop-fetcher must not stop anything"


def test_a_command_for_an_earlier_registration_is_refused_after_a_session_loss(
    cluster: Cluster, tmp_path: Path
) -> None:
    cluster.broker(1)
    TopicAdmin(cluster.admin_zk).create("t", 2)
    zk = cluster.admin_zk
    with ExitStack() as stack:
        consumer = make(cluster, tmp_path / "data", stack)
        stack.enter_context(PollLoop()).add(consumer)
        cluster.wait_stable("g", 1)
        wait_until(lambda: len(consumer.assignment()) == 2, 10, "assigned")
        member = paths.member("g", consumer.consumer_id)
        old = consumer.incarnation
        stat = zk.exists(member)
        assert stat is not None and old == stat.czxid
        expire_session(consumer.zk.kazoo)  # a real expiry: it registers again under the same id
        wait_until(lambda: consumer.incarnation not in (None, old), 20, "a new registration")

        def rebalanced() -> bool:
            state = cluster.state("g")
            return state.phase is GroupPhase.STABLE and state.members.get(consumer.consumer_id) == consumer.incarnation

        wait_until(rebalanced, 20, "the group rebalanced onto the new registration")
        wait_until(lambda: len(consumer.assignment()) == 2, 20, "assigned again")
        state = cluster.state("g")
        channel = paths.channel("g", consumer.consumer_id)
        # Planned for the old session (say, written just before it expired): newer than anything seen, but refused.
        for_old = Command(CommandOption.STOP_FETCHER, state.epoch, state.generation + 5, "g", incarnation=old)
        zk.create(f"{channel}/{paths.COMMAND_PREFIX}x-", for_old.encode(), sequence=True)
        wait_until(lambda: zk.get_children(channel) == [], 10, "the command acknowledged")
        reasons = [e.fields["reason"] for e in read_journal(cluster.journal_dir) if e.event == "command.rejected"]
        assert any(r.startswith(f"addressed to registration {old}") for r in reasons)
        assert len(consumer.assignment()) == 2, "a refused stop-fetcher must not stop anything"
        # The same command for the current registration is applied.
        for_new = Command(
            CommandOption.STOP_FETCHER, state.epoch, state.generation + 5, "g", incarnation=consumer.incarnation
        )
        write_command(zk, "g", consumer.consumer_id, for_new)  # as the coordinator would: with the group's state
        wait_until(lambda: consumer.assignment() == {}, 10, "stopped")


def test_a_seek_inside_on_partitions_assigned_moves_the_partitions_it_names(
    cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kafka's seek-on-assign pattern: the partitions start where ``on_partitions_assigned`` sought them, never at
    their committed offsets.  A start is announced before the fetcher holds its partitions; here the fetcher call is
    held (up to 3 s) until the callback has sought, which is the interleaving a loaded machine produced: a callback
    that ran before the fetcher held the partitions had its seek ignored (a region member skipped records so)."""
    cluster.broker(1)
    TopicAdmin(cluster.admin_zk).create("t", 1)
    data = tmp_path / "data"
    produce(data, "t", 1, 50)
    cluster.admin_zk.create(paths.offset("g", "t", 0), b"40", makepath=True)  # committed: 40
    sought = threading.Event()
    moved: list[dict[TopicPartition, int]] = []
    consumers: list[Consumer] = []

    def on_assigned(partitions: list[TopicPartition]) -> None:
        if partitions:
            moved.append(consumers[0].fetcher.seek(dict.fromkeys(partitions, 10), "test-seek"))
            sought.set()

    add = FetchManager._add

    def held_add(self: FetchManager, positions: Any, *, extend: bool) -> None:
        sought.wait(3)  # the callback first, if it can run before the partitions are in the fetcher
        add(self, positions, extend=extend)

    monkeypatch.setattr(FetchManager, "_add", held_add)
    with ExitStack() as stack:
        consumers.append(make(cluster, data, stack, on_assigned=on_assigned, auto_commit=False))
        got = drain(consumers[0], 40)
    assert moved == [{TopicPartition("t", 0): 40}]  # the seek found the partition, fetching from its committed 40
    assert [o for _p, o in got] == list(range(10, 50))
