"""The consumer's side of a hand-over (a one-step incremental rebalance), stepped by hand against a real ZooKeeper.

No coordinator runs here: the test writes what one would (owner znodes, commands), so that each step happens in a
known order.  What must hold: a start-fetcher that awaits a partition does not fetch it, nor acknowledge itself,
until the partition's owner znode names its thread; the previous owner writes that only in the transaction that
acknowledges its stop, after it stopped fetching and its application's revoke callback (with its commit) returned
(S2, S3); a newer command supersedes the wait.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from collections.abc import Set as AbstractSet
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.integration.test_consumer import drain, polling, produce
from tests.scripted import write_command
from tests.zkutil import expire_session
from zkcoord.consumer import Consumer, ConsumerConfig, Subscription, TopicPartition
from zkcoord.consumer.offsets import Claims
from zkcoord.errors import ZkUnavailableError
from zkcoord.layout import paths
from zkcoord.layout.commands import Command, CommandOption, decode_acknowledged
from zkcoord.layout.group_state import decode_owner, encode_owner
from zkcoord.runtime.journal import Journal, JournalEvent, read_journal
from zkcoord.testbed.poll_loop import PollLoop
from zkcoord.testbed.procs import wait_until
from zkcoord.zk import Transaction, WatchEvent, ZkClient, ZkConfig

pytestmark = pytest.mark.integration

GROUP, TOPIC = "g", "t"
P0, P1 = TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)


@pytest.fixture
def zk(zk_hosts: str) -> Iterator[ZkClient]:
    with ZkClient(ZkConfig.from_string(zk_hosts)) as client:
        yield client


def member(
    zk_hosts: str,
    data: Path,
    journal: Path,
    stack: ExitStack,
    *,
    polled: bool = True,
    on_revoked: Callable[[list[TopicPartition]], None] | None = None,
) -> Consumer:
    """A member (auto-commit off); ``polled``: by a :class:`PollLoop` (its application), else the test polls it."""
    config = ConsumerConfig(
        group=GROUP,
        subscription=Subscription.static({TOPIC: 1}),
        zk=zk_hosts,
        data_dir=data,
        session_timeout_s=4.0,
        rebalance="incremental",
        auto_commit=False,
    )
    consumer = Consumer(config, journal=Journal(journal, "consumer"), on_partitions_revoked=on_revoked)
    stack.enter_context(consumer)
    if polled:
        loop = stack.enter_context(PollLoop())
        loop.add(consumer)
        stack.callback(loop.remove, consumer)  # before the consumer closes
    return consumer


def _commit(consumer: Consumer) -> None:
    consumer.commit()


def send(zk: ZkClient, to: Consumer, command: Command) -> str:
    """Write ``command`` into ``to``'s channel, as the coordinator would (with the group's state); return its path."""
    return write_command(zk, GROUP, to.consumer_id, command)


def gone(zk: ZkClient, path: str) -> bool:
    return zk.exists(path) is None


def owner(zk: ZkClient, tp: TopicPartition) -> str:
    return decode_owner(zk.get(paths.owner(GROUP, tp.topic, tp.partition))[0])


def fetch_events(journal: Path, consumer: Consumer, tp: TopicPartition) -> list[JournalEvent]:
    return [
        e
        for e in read_journal(journal)
        if e.event in ("fetch.started", "fetch.stopped")
        and e.fields.get("consumer") == consumer.consumer_id
        and (e.fields.get("topic"), e.fields.get("partition")) == (tp.topic, tp.partition)
    ]


def start(generation: int, to: Consumer, parts: dict[int, str], awaiting: tuple[int, ...] = ()) -> Command:
    return Command(
        CommandOption.START_FETCHER,
        1,
        generation,
        GROUP,
        {TOPIC: parts},
        incremental=generation > 1,
        incarnation=to.incarnation,
        awaiting={TOPIC: awaiting} if awaiting else None,
    )


def test_the_new_owner_starts_only_once_the_old_one_handed_over(zk: ZkClient, zk_hosts: str, tmp_path: Path) -> None:
    data, journal = tmp_path / "data", tmp_path / "journal"
    produce(data, TOPIC, 2, 40)
    with ExitStack() as stack:
        # The loser's application commits what it finished when it loses partitions (auto-commit is off).
        told: list[int] = []  # when the loser's revoke callback returned (monotonic ns, the journal's clock)

        during: list[tuple[str, bool]] = []  # inside the callback: the owner of P1, whether the gainer fetches it

        def revoked(_tps: list[TopicPartition]) -> None:
            during.append((owner(zk, P1), P1 in gainer.assignment()))
            _commit(loser)
            told.append(time.monotonic_ns())

        loser = member(zk_hosts, data, journal, stack, polled=False, on_revoked=revoked)
        gainer = member(zk_hosts, data, journal, stack)
        old, new = f"{loser.consumer_id}-0", f"{gainer.consumer_id}-0"
        zk.ensure_path(paths.owners(GROUP, TOPIC))
        for tp in (P0, P1):
            zk.create(paths.owner(GROUP, tp.topic, tp.partition), encode_owner(old))
        first = send(zk, loser, start(1, loser, {0: old, 1: old}))
        wait_until(lambda: gone(zk, first), 10, "the loser's start acknowledged")
        drain(loser, 80)  # it consumed both partitions to the end
        # Generation 2: partition 1 moves to the gainer.  The gainer's start goes out first and must wait.
        awaiting = send(zk, gainer, start(2, gainer, {1: new}, awaiting=(1,)))
        wait_until(lambda: any(e.event == "command.awaiting" for e in read_journal(journal)), 10, "the gainer to await")
        assert not gone(zk, awaiting), "a start awaiting a hand-over was acknowledged"
        assert P1 not in gainer.assignment() and owner(zk, P1) == old
        stop = Command(
            CommandOption.STOP_FETCHER,
            1,
            2,
            GROUP,
            revoke={TOPIC: (1,)},
            incarnation=loser.incarnation,
            handover={TOPIC: {1: new}},
        )
        stopped = send(zk, loser, stop)
        both_acked = polling([loser], lambda: gone(zk, stopped) and gone(zk, awaiting))
        wait_until(both_acked, 10, "both commands acknowledged", interval=0)
        wait_until(lambda: P1 in gainer.assignment(), 10, "the gainer fetching partition 1")
        assert owner(zk, P1) == new and owner(zk, P0) == old
        assert set(loser.assignment()) == {P0}, "the loser stops only what it hands over"
        # S3: the loser's commit in its revoke callback landed before the hand-over; the gainer starts there.
        assert zk.get(paths.offset(GROUP, TOPIC, 1))[0] == b"40"
        assert [e.fields["offset"] for e in fetch_events(journal, gainer, P1)] == [40]
        # S2: the gainer started after the loser stopped (one process: its journal order is exact).
        (stopped_at,) = [e for e in fetch_events(journal, loser, P1) if e.event == "fetch.stopped"]
        (started_at,) = fetch_events(journal, gainer, P1)
        assert started_at.mono_ns > stopped_at.mono_ns
        # Issue 25: and only after the loser's application heard (its callback, with its commit, had returned): while
        # the callback ran, the owner znode still named the loser and the gainer did not fetch the partition.
        assert during == [(old, False)]
        assert told and started_at.mono_ns > told[-1]


def test_a_newer_command_supersedes_a_wait(zk: ZkClient, zk_hosts: str, tmp_path: Path) -> None:
    data, journal = tmp_path / "data", tmp_path / "journal"
    produce(data, TOPIC, 2, 10)
    with ExitStack() as stack:
        gainer = member(zk_hosts, data, journal, stack)
        new = f"{gainer.consumer_id}-0"
        zk.ensure_path(paths.owners(GROUP, TOPIC))
        zk.create(paths.owner(GROUP, TOPIC, 0), encode_owner(new))
        zk.create(paths.owner(GROUP, TOPIC, 1), encode_owner("g_h-1-0000ffff-0"))  # someone else, for now
        awaiting = send(zk, gainer, start(2, gainer, {0: new, 1: new}, awaiting=(1,)))
        wait_until(lambda: P0 in gainer.assignment(), 10, "the partition not awaited started at once")
        assert not gone(zk, awaiting) and P1 not in gainer.assignment()
        # A newer coordinator's eager stop: the wait ends, the old start is acknowledged with it.
        eager_stop = send(zk, gainer, Command(CommandOption.STOP_FETCHER, 2, 3, GROUP, incarnation=gainer.incarnation))
        wait_until(lambda: gone(zk, eager_stop) and gone(zk, awaiting), 10, "both acknowledged")
        assert gainer.assignment() == {}
        (applied,) = _applied(tmp_path / "journal", awaiting.rpartition("/")[2])
        assert applied.fields["superseded"] is True and applied.fields["not_started"] == 1
        # The hand-over lands late: nothing starts.  (The refused command after it is handled after the owner
        # event, both coming from one session in zxid order, so its acknowledgement says the event was seen.)
        zk.set(paths.owner(GROUP, TOPIC, 1), encode_owner(new))
        stale = send(zk, gainer, Command(CommandOption.STOP_FETCHER, 1, 1, GROUP))
        wait_until(lambda: gone(zk, stale), 10, "the stale command refused")
        assert gainer.assignment() == {}, "a superseded wait started a partition"


def _awaiting_gainer(zk: ZkClient, zk_hosts: str, tmp_path: Path, stack: ExitStack) -> tuple[Consumer, str, str]:
    """A gainer sent a start that awaits partition 1 (owned by another thread); returns it, its thread, the start."""
    produce(tmp_path / "data", TOPIC, 2, 10)
    gainer = member(zk_hosts, tmp_path / "data", tmp_path / "journal", stack)
    new = f"{gainer.consumer_id}-0"
    zk.ensure_path(paths.owners(GROUP, TOPIC))
    zk.create(paths.owner(GROUP, TOPIC, 1), encode_owner("g_h-1-0000ffff-0"))
    return gainer, new, send(zk, gainer, start(2, gainer, {1: new}, awaiting=(1,)))


def _applied(journal: Path, name: str) -> list[JournalEvent]:
    return [e for e in read_journal(journal) if e.event == "command.applied" and e.fields.get("name") == name]


def test_a_failed_read_of_the_awaited_owners_is_retried_not_superseding_itself(
    zk: ZkClient, zk_hosts: str, tmp_path: Path
) -> None:
    """The first read of the awaited owner znodes fails (a connection loss): the channel listing is handled again,
    and the start must not take itself for a newer command (it would acknowledge itself and never fetch)."""
    with ExitStack() as stack:
        produce(tmp_path / "data", TOPIC, 2, 10)
        gainer = member(zk_hosts, tmp_path / "data", tmp_path / "journal", stack)
        real_claim, failed = gainer.offsets.claim, list[bool]()

        def claim_failing_once(
            ownership: Mapping[TopicPartition, str],
            *,
            add: bool = False,
            wait: Callable[[WatchEvent], None] | None = None,
            repairable: AbstractSet[TopicPartition] = frozenset(),
            carried: Mapping[TopicPartition, int] | None = None,
            offsets: Mapping[TopicPartition, tuple[int, int]] | None = None,
            ack: str | None = None,
        ) -> Claims:
            if wait is not None and not failed:
                failed.append(True)
                raise ZkUnavailableError("injected connection loss", "owners")
            return real_claim(
                ownership, add=add, wait=wait, repairable=repairable, carried=carried, offsets=offsets, ack=ack
            )

        gainer.offsets.claim = claim_failing_once  # type: ignore[method-assign]
        new = f"{gainer.consumer_id}-0"
        zk.ensure_path(paths.owners(GROUP, TOPIC))
        zk.create(paths.owner(GROUP, TOPIC, 1), encode_owner("g_h-1-0000ffff-0"))
        awaiting = send(zk, gainer, start(2, gainer, {1: new}, awaiting=(1,)))
        wait_until(
            lambda: bool(failed) and gainer.handler.state.pending is not None, 10, "the failed read, then a wait"
        )
        assert not gone(zk, awaiting), "the start acknowledged itself"
        zk.set(paths.owner(GROUP, TOPIC, 1), encode_owner(new))  # the hand-over
        wait_until(lambda: P1 in gainer.assignment() and gone(zk, awaiting), 10, "partition 1 started, then acked")
        assert len(_applied(tmp_path / "journal", awaiting.rpartition("/")[2])) == 1


def test_a_lost_acknowledgement_of_a_finished_wait_is_retried(zk: ZkClient, zk_hosts: str, tmp_path: Path) -> None:
    with ExitStack() as stack:
        gainer, new, awaiting = _awaiting_gainer(zk, zk_hosts, tmp_path, stack)
        wait_until(lambda: gainer.handler.state.pending is not None, 10, "the wait")
        real_transaction, failed = gainer.zk.transaction, list[bool]()

        class FailingOnce:
            """The acknowledgement's transaction (delete + the channel's record): its first commit is lost."""

            def __init__(self, txn: Transaction) -> None:
                self.txn, self.deleted = txn, list[str]()

            def delete(self, path: str, version: int = -1) -> None:
                self.deleted.append(path)
                self.txn.delete(path, version)

            def __getattr__(self, name: str) -> object:
                return getattr(self.txn, name)

            def commit(self, timeout: float | None = None) -> object:
                if awaiting in self.deleted and not failed:
                    failed.append(True)
                    raise ZkUnavailableError("injected connection loss", awaiting)
                return self.txn.commit(timeout)

        gainer.zk.transaction = lambda: FailingOnce(real_transaction())  # type: ignore[method-assign,assignment,return-value]
        zk.set(paths.owner(GROUP, TOPIC, 1), encode_owner(new))
        wait_until(lambda: bool(failed) and gone(zk, awaiting), 10, "the acknowledgement, retried")
        channel, _, name = awaiting.rpartition("/")
        record = decode_acknowledged(zk.get(channel)[0], channel)
        assert record is not None and record.name == name, "the retried acknowledgement is recorded in the channel"
        assert P1 in gainer.assignment()


def test_a_wait_ends_with_the_session_and_is_acknowledged_after_registering_again(
    zk: ZkClient, zk_hosts: str, tmp_path: Path
) -> None:
    with ExitStack() as stack:
        gainer, new, awaiting = _awaiting_gainer(zk, zk_hosts, tmp_path, stack)
        wait_until(lambda: gainer.handler.state.pending is not None, 10, "the wait")
        incarnation = gainer.incarnation
        expire_session(gainer.zk.kazoo)
        wait_until(lambda: gainer.incarnation not in (None, incarnation), 20, "registered again")
        wait_until(lambda: gone(zk, awaiting), 10, "the old start acknowledged")
        # The hand-over meant for the old registration lands late: nothing starts.  (A stale command after it is
        # handled after the owner event, both from one session in zxid order.)
        zk.set(paths.owner(GROUP, TOPIC, 1), encode_owner(new))
        stale = send(zk, gainer, Command(CommandOption.STOP_FETCHER, 1, 1, GROUP))
        wait_until(lambda: gone(zk, stale), 10, "the stale command refused")
        assert gainer.assignment() == {}
        assert _applied(tmp_path / "journal", awaiting.rpartition("/")[2]) == []
