"""Live migration of a running zk-client group to the coordinator, one consumer at a time (docs/migration.md).

Real ZooKeeper, a real broker hosting the coordinator, real consumer and producer processes; the journals are the
evidence: no partition fetched by two members at once (S2), nothing lost (S3), and -- the handovers all being clean
-- nothing delivered twice.
"""

from __future__ import annotations

import functools
import signal
import threading
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from tests.clusters import Cluster
from tests.integration.test_consumer import drain, produce
from tests.integration.test_consumer_e2e import Run
from tests.ledger import Ledger
from tests.scripted import write_command
from tests.zkutil import expire_session
from zkcoord.consumer import Consumer, ConsumerConfig, Subscription, TopicPartition
from zkcoord.data.topics import TopicAdmin
from zkcoord.errors import NoNodeError, ZkUnavailableError
from zkcoord.layout import legacy_paths, paths
from zkcoord.layout.commands import Command, CommandOption
from zkcoord.layout.group_state import GroupPhase, GroupState, encode_owner
from zkcoord.layout.registrations import MemberRegistration, Pattern
from zkcoord.layout.znodes import encode_int
from zkcoord.runtime.journal import Journal, read_journal
from zkcoord.testbed.procs import ChildProcess, wait_until
from zkcoord.zk import ZkClient, ZkConfig

pytestmark = [pytest.mark.integration, pytest.mark.slow]

GROUP, TOPIC, PARTITIONS = "mig", "t", 6
LEGACY = ("--protocol", "zk-client", "--rebalance-backoff", "0.3", "--rebalance-max-retries", "20")


@pytest.fixture
def run(zk_hosts: str, tmp_path: Path) -> Iterator[Run]:
    with ExitStack() as stack:
        yield Run(zk_hosts, tmp_path, stack)


def legacy_owners(run: Run) -> dict[int, str]:
    """Partition -> the value of its Kafka 0.8 owner znode (absent: unowned)."""
    try:
        parts = run.zk.get_children(legacy_paths.owners(GROUP, TOPIC))
    except NoNodeError:
        return {}
    owner_paths = [legacy_paths.owner(GROUP, TOPIC, int(p)) for p in parts]
    return {
        int(p): got[0].decode() for p, got in zip(parts, run.zk.get_many(owner_paths), strict=True) if got is not None
    }


def settled(run: Run, migrated: int, legacy: int) -> bool:
    """Every partition claimed, and the coordinator stable over ``migrated`` members beside ``legacy`` others."""
    if len(legacy_owners(run)) != PARTITIONS:
        return False
    if migrated == 0:
        return True
    try:
        state = GroupState.decode(run.zk.get(paths.group_state(GROUP))[0])
    except NoNodeError:
        return False
    return state.phase is GroupPhase.STABLE and len(state.members) == migrated and len(state.legacy) == legacy


def test_a_zk_client_group_is_rolled_onto_the_coordinator_without_overlap_or_loss(run: Run) -> None:
    run.broker()
    TopicAdmin(run.zk).create(TOPIC, PARTITIONS)
    old = [run.consumer(GROUP, TOPIC, extra=LEGACY) for _ in range(3)]
    wait_until(lambda: settled(run, 0, 3), 30, "the zk-client group to own every partition")
    producer = run.producer(TOPIC, 30_000, 2_000)
    wait_until(lambda: Ledger.read(run.journal, GROUP).consumed != {}, 30, "consumption to begin")

    new: list[ChildProcess] = []
    for i, proc in enumerate(old):
        proc.signal(signal.SIGTERM)
        assert proc.wait(20) == 0
        new.append(run.consumer(GROUP, TOPIC, extra=("--migrating",)))
        wait_until(functools.partial(settled, run, i + 1, 2 - i), 40, f"settled after rolling consumer {i + 1}")

    assert producer.wait(60) == 0
    ledger = run.wait_consumed_all(GROUP, {TOPIC})
    assert ledger.total_produced({TOPIC}) == 30_000
    assert ledger.overlaps() == [], "a partition was fetched by two members at once"
    assert ledger.duplicates() == {}, "clean handovers must not deliver anything twice"

    # The coordinator owns the whole group now, and the migrated members actually waited for their zk-client
    # predecessors at least once or found the partitions free -- either way every handover went through a claim.
    state = GroupState.decode(run.zk.get(paths.group_state(GROUP))[0])
    assert state.legacy == {}
    assert sum(len(p) for p in state.target.values()) == PARTITIONS
    events = [e for e in read_journal(run.journal) if e.fields.get("group") == GROUP]
    started = [e for e in events if e.event == "rebalance.started" and "legacy" in e.fields]
    assert started, "the coordinator never planned the group as a migrating one"
    assert any(e.fields["legacy"] for e in started), "no plan counted the zk-client members"
    for proc in new:
        proc.signal(signal.SIGTERM)
        assert proc.wait(20) == 0
    assert legacy_owners(run) == {}, "closing consumers left Kafka 0.8 owner znodes behind"


def test_a_migrating_consumer_waits_for_the_zk_client_owner_and_starts_at_its_offset(
    zk_hosts: str, tmp_path: Path
) -> None:
    """A zk-client member (played here by hand, in its own session) still holds every partition's owner znode.
    The coordinator counts it, gives the migrating consumer its share, and the consumer fetches none of it until
    the zk-client member lets go -- then starts exactly at the offset that member committed."""
    data = tmp_path / "data"
    produce(data, TOPIC, 2, 50)
    with ExitStack() as stack:
        cluster = Cluster(zk_hosts, tmp_path / "journal", stack)
        cluster.broker(1)
        TopicAdmin(cluster.admin_zk).create(TOPIC, 2)
        ghost_zk = stack.enter_context(ZkClient(ZkConfig.from_string(zk_hosts)))
        ghost = f"{GROUP}_ghost-1-0000abcd"
        registration = MemberRegistration(Pattern.STATIC, {TOPIC: 1}, 1)
        ghost_zk.create(legacy_paths.member(GROUP, ghost), registration.encode(), ephemeral=True, makepath=True)
        for p in range(2):
            owner = legacy_paths.owner(GROUP, TOPIC, p)
            ghost_zk.create(owner, f"{ghost}-0".encode(), ephemeral=True, makepath=True)
            ghost_zk.create(legacy_paths.offset(GROUP, TOPIC, p), encode_int(30), makepath=True)

        config = ConsumerConfig(
            group=GROUP,
            subscription=Subscription.static({TOPIC: 1}),
            zk=zk_hosts,
            data_dir=data,
            session_timeout_s=4.0,
            migrating=True,
            auto_commit=False,
        )
        consumer = stack.enter_context(Consumer(config, journal=Journal(cluster.journal_dir, "consumer")))

        def state() -> GroupState | None:
            try:
                return GroupState.decode(cluster.admin_zk.get(paths.group_state(GROUP))[0])
            except NoNodeError:
                return None

        def stable() -> bool:
            consumer.poll(0.02)  # the application's loop: the rebalance's stop waits for it
            return (s := state()) is not None and s.phase is GroupPhase.STABLE

        wait_until(stable, 20, "the group stable", interval=0)
        current = state()
        assert current is not None and list(current.legacy) == [ghost], "the coordinator did not count the ghost"
        ours = [p for p, thread in current.target[TOPIC].items() if thread.startswith(consumer.consumer_id)]
        assert len(ours) == 1, f"range over two members gives one partition each, got {current.target}"
        mine = TopicPartition(TOPIC, ours[0])
        wait_until(lambda: consumer.bridge is not None and mine in consumer.bridge.pending, 10, "the claim pending")
        assert consumer.poll(0.3) == [] and consumer.assignment() == {}, "fetched while the zk-client owner holds it"

        # The zk-client member rebalances: commits, then lets go of the partition it no longer owns.
        ghost_zk.set(legacy_paths.offset(GROUP, TOPIC, mine.partition), encode_int(40))
        ghost_zk.delete(legacy_paths.owner(GROUP, TOPIC, mine.partition))
        got = drain(consumer, 10)
        assert {p for p, _ in got} == {mine.partition}
        assert min(o for _, o in got) == 40, "did not start at the zk-client member's committed offset"
        owner = legacy_paths.owner(GROUP, TOPIC, mine.partition)
        assert cluster.admin_zk.get(owner)[0].decode() == f"{consumer.consumer_id}-0"

        # Commits go to both protocols' offsets, so a zk-client successor would start where we stopped.
        drain(consumer, 0)
        committed = consumer.commit()
        position = committed[mine]
        assert cluster.admin_zk.get(legacy_paths.offset(GROUP, TOPIC, mine.partition))[0] == encode_int(position)
        assert cluster.admin_zk.get(paths.offset(GROUP, TOPIC, mine.partition))[0] == encode_int(position)
        consumer.close()
        assert cluster.admin_zk.exists(owner) is None, "close left the Kafka 0.8 owner znode behind"
        assert cluster.admin_zk.exists(legacy_paths.member(GROUP, consumer.consumer_id)) is None


def test_a_session_loss_with_claims_pending_leaves_no_owner_znode_behind_and_registers_again(
    zk_hosts: str, tmp_path: Path
) -> None:
    """The loss of a migrating consumer's session while a claim is pending, handled late (its command thread is
    held up while the session expires and the zk-client owner lets go): no claim may land in the new session before
    the loss is handled.  Then a failed re-registration is retried until the consumer is in both registries."""
    with ExitStack() as stack:
        other = stack.enter_context(ZkClient(ZkConfig.from_string(zk_hosts)))  # plays the coordinator and a member L
        held = legacy_paths.owner(GROUP, TOPIC, 1)
        other.create(held, b"L-0", ephemeral=True, makepath=True)
        config = ConsumerConfig(
            group=GROUP, subscription=Subscription.static({TOPIC: 1}), zk=zk_hosts, data_dir=tmp_path / "data",
            session_timeout_s=3.0, migrating=True,
        )  # fmt: skip
        consumer = Consumer(config, journal=Journal(tmp_path / "journal", "consumer"))
        running = threading.Event()
        running.set()
        next_event = consumer.core.next_event

        def slow_next_event() -> tuple[str, object]:
            event = next_event()
            running.wait(30)  # cleared: the command thread is busy elsewhere (a slow callback, a blocked call)
            return event

        def queued(kind: str) -> bool:
            with consumer.core.events.mutex:
                return any(event[0] == kind for event in consumer.core.events.queue)

        consumer.core.next_event = slow_next_event  # type: ignore[method-assign]
        stack.enter_context(consumer)
        thread = f"{consumer.consumer_id}-0"
        for p in (0, 1):
            other.create(paths.owner(GROUP, TOPIC, p), encode_owner(thread), makepath=True)
        start = Command(CommandOption.START_FETCHER, 1, 1, GROUP, {TOPIC: {0: thread, 1: thread}}, 0)
        write_command(other, GROUP, consumer.consumer_id, start, "cmd-1-1-start-")
        bridge = consumer.bridge
        assert bridge is not None
        wait_until(lambda: TopicPartition(TOPIC, 1) in bridge.pending, 10, "partition 1 pending")

        running.clear()
        expire_session(consumer.zk.kazoo)
        other.delete(held)  # L lets go while the loss is not handled yet
        wait_until(lambda: consumer.zk.session_id != bridge.session, 10, "the client in a new session")
        # The heartbeat's backstop queues a claim retry while the partition is pending: once the thread moves
        # again, that retry runs in the new session before the loss is handled -- the interleaving under test.
        wait_until(lambda: queued("legacy-claim"), 10, "a claim retry queued in the new session")
        running.set()
        wait_until(lambda: consumer.registrations >= 2 and not consumer.handler.lost, 15, "registered again")
        assert other.exists(held) is None, "a claim landed in the new session before the loss was handled"
        assert consumer.assignment() == {}

        # A re-registration that fails is tried again, until the consumer is back in both registries.
        create = consumer.zk.create_stat  # how a consumer registers (create2: its czxid in the same round trip)
        failures = [ZkUnavailableError("injected connection loss")]

        def flaky_create(path: str, *args: Any, **kwargs: Any) -> Any:
            if path == paths.member(GROUP, consumer.consumer_id) and failures:
                raise failures.pop()
            return create(path, *args, **kwargs)

        consumer.zk.create_stat = flaky_create  # type: ignore[method-assign]
        expire_session(consumer.zk.kazoo)
        wait_until(lambda: consumer.registrations >= 3 and not consumer.handler.lost, 15, "registered a third time")
        assert not failures, "the injected failure was never met"
        assert other.exists(paths.member(GROUP, consumer.consumer_id)) is not None
        assert other.exists(legacy_paths.member(GROUP, consumer.consumer_id)) is not None
