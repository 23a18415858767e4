"""Consistent regions (issue 24) in-process against a real ZooKeeper and a real coordinator: members, driver,
merges, resets, revocations, partitions added at runtime."""

from __future__ import annotations

import threading
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from tests.clusters import Cluster
from zkcoord.consumer import ConsumerConfig, Subscription
from zkcoord.data.partlog import PartitionWriter
from zkcoord.data.topics import TopicAdmin
from zkcoord.layout import paths
from zkcoord.layout.region import Contribution, ControlOrder, Merge
from zkcoord.region.app import AggregateApp, key_of, value_of
from zkcoord.region.config import RegionConfig
from zkcoord.region.driver import RegionDriver
from zkcoord.region.errors import RegionError
from zkcoord.region.member import ConsistentRegion
from zkcoord.region.orders import OrderFollower
from zkcoord.region.positions import start_offset
from zkcoord.region.shared import MergeTimeoutError, RegionMismatchError, SharedData
from zkcoord.region.states import ClientState
from zkcoord.runtime.journal import Journal
from zkcoord.testbed.procs import wait_until

pytestmark = pytest.mark.integration


def produce(data: Path, topic: str, partition: int, first: int, count: int) -> None:
    with PartitionWriter(data, topic, partition) as writer:
        writer.append_batch([(f"k{i % 5}".encode(), f"p:{i}:".encode()) for i in range(first, first + count)])


def expected(data: Path, topic: str, partitions: int) -> dict[str, list[int]]:
    from zkcoord.data.partlog import open_reader

    out: dict[str, list[int]] = {}
    for p in range(partitions):
        reader = open_reader(data, topic, p)
        try:
            offset = reader.start_offset
            while True:
                records = reader.read(offset)
                if not records:
                    break
                for r in records:
                    entry = out.setdefault(key_of(r.key), [0, 0])
                    entry[0] += 1
                    entry[1] += value_of(r.value)
                offset = records[-1].offset + 1
        finally:
            reader.close()
    return out


class RecordingApp(AggregateApp):
    """The demo's aggregate, recording each state it is given back (``restored``)."""

    def __init__(self) -> None:
        super().__init__()
        self.restored: list[Any] = []

    def restore(self, state: Any) -> None:
        self.restored.append(state)
        super().restore(state)


class Member:
    def __init__(
        self,
        cluster: Cluster,
        data: Path,
        store: Path,
        name: str,
        *,
        region: str = "r1",
        start: str = "beginning",
        app: AggregateApp | None = None,
    ) -> None:
        self.app = app or RecordingApp()
        self.fatal: list[str] = []
        consumer = ConsumerConfig(
            group="g",
            subscription=Subscription.static({"t": 1}),
            zk=cluster.hosts,
            data_dir=data,
            session_timeout_s=4.0,
            auto_commit=False,
            max_poll_records=20,
        )
        self.region = ConsistentRegion(
            consumer,
            RegionConfig(region, name, store, start_position=start, reset_timeout_s=6.0, throttle_s=0.2),  # type: ignore[arg-type]
            self.app,
            journal=Journal(cluster.journal_dir, f"member-{name}"),
            on_fatal=self.fatal.append,
        )
        self.follower = OrderFollower(self.region, self.app.snapshot)

    def start(self) -> Member:
        self.region.start()
        self.follower.start()
        return self

    def close(self) -> None:
        self.follower.stop()
        self.region.close()


class _closing:
    def __init__(self, member: Member) -> None:
        self.member = member

    def __enter__(self) -> Member:
        return self.member

    def __exit__(self, *exc: object) -> None:
        self.member.close()


def seed(cluster: Cluster, root: Path, partitions: int, records: int = 0) -> tuple[Path, Path]:
    """Broker 1 and topic ``t`` of ``partitions`` partitions, each holding ``records`` records (:func:`produce`; with
    none, no log is written); returns the directories of the record logs and of the members' stores, ``root / "data"``
    and ``root / "store"``."""
    cluster.broker(1)
    TopicAdmin(cluster.admin_zk).create("t", partitions)
    data, store = root / "data", root / "store"
    if records:
        for p in range(partitions):
            produce(data, "t", p, 0, records)
    return data, store


def start_member(
    stack: ExitStack,
    cluster: Cluster,
    data: Path,
    store: Path,
    name: str,
    *,
    start: str = "beginning",
    app: AggregateApp | None = None,
) -> Member:
    """Member ``name`` of region ``r1``, started, and closed when ``stack`` closes."""
    return stack.enter_context(_closing(Member(cluster, data, store, name, start=start, app=app).start()))


def checkpointed_member(stack: ExitStack, cluster: Cluster, root: Path, records: int) -> Member:
    """m1, the only member, on one partition of ``records`` records (:func:`seed`), reset to the initial state, every
    record processed, drained and checkpoint 1 written; closed when ``stack`` closes."""
    data, store = seed(cluster, root, 1, records)
    m1 = start_member(stack, cluster, data, store, "m1")
    m1.region.reset_to_initial()
    wait_until(lambda: m1.app.processed == records, 20, "m1 processing")
    m1.region.drain()
    m1.region.checkpoint(1, m1.app.snapshot())
    return m1


def start_driver(cluster: Cluster, stack: ExitStack, names: list[str], interval: float = 0.5) -> RegionDriver:
    driver = RegionDriver(
        cluster.admin_zk, "g", "r1", names, interval_s=interval, order_timeout_s=10,
        journal=Journal(cluster.journal_dir, "driver"),
    )  # fmt: skip
    stop = threading.Event()
    thread = threading.Thread(target=driver.run, args=(stop,), daemon=True)
    thread.start()
    stack.callback(thread.join, 10)
    stack.callback(stop.set)
    return driver


def state_of(member: Member) -> ClientState:
    """A call, not an attribute: mypy narrows an attribute after one comparison, the state moves under it."""
    return member.region.state


def summed(members: list[Member]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for m in members:
        for k, (c, s) in m.app.snapshot().items():
            entry = out.setdefault(k, [0, 0])
            entry[0] += c
            entry[1] += s
    return out


def test_two_members_driver_checkpoints_cover_every_record_once(cluster: Cluster, tmp_path: Path) -> None:
    data, store = seed(cluster, tmp_path, 4, 100)
    with ExitStack() as stack:
        members = [start_member(stack, cluster, data, store, n) for n in ("m1", "m2")]
        driver = start_driver(cluster, stack, ["m1", "m2"])
        want = expected(data, "t", 4)

        def covered() -> bool:
            return summed(members) == want and bool(driver.completed)

        wait_until(covered, 30, "every record counted once")
        for m in members:
            assert state_of(m) is ClientState.RESET_COMPLETE


def contribution(
    member: str, seq: int, offsets: dict[tuple[str, int], int], members: tuple[str, ...] = ("m1", "m2")
) -> Contribution:
    return Contribution(member, members, seq, offsets)


def test_a_merge_completes_only_with_n_distinct_contributions_for_its_id_and_times_out_cleanly(
    cluster: Cluster,
) -> None:
    shared = {n: SharedData(cluster.admin_zk, "g", "r1", n) for n in ("m1", "m2")}
    shared["m1"].check_region()
    shared["m1"].contribute(contribution("m1", 1, {("t", 0): 10}))
    shared["m1"].contribute(contribution("m1", 1, {("t", 0): 11}))  # the same name again: still one of two
    shared["m2"].contribute(contribution("m2", 2, {("t", 1): 20}))  # another id
    with pytest.raises(MergeTimeoutError, match="merge of checkpoint 1 is not complete"):
        shared["m1"].wait_merge(1, 0.5)
    assert not shared["m1"].read_merge(1).complete
    # The second distinct contribution arrives while a member waits (after its first look): the watch wakes it long
    # before its 60 s would end, so the wait is a notification.
    waiter = WatchedWait(cluster, 1, 60)
    shared["m2"].contribute(contribution("m2", 1, {("t", 1): 21}))
    merged = waiter.result(20)
    assert merged.complete and merged.offsets == {("t", 0): 11, ("t", 1): 21}
    # A partition in two contributions is a conflict: never complete.
    shared["m1"].contribute(contribution("m1", 3, {("t", 0): 30}))
    shared["m2"].contribute(contribution("m2", 3, {("t", 0): 31}))
    assert shared["m1"].read_merge(3).conflicts == (("t", 0),)
    with pytest.raises(MergeTimeoutError, match="conflicting"):
        shared["m1"].wait_merge(3, 0.3)
    shared["m1"].retire(1)
    assert shared["m1"].merge_seqs() == [2, 3]


class WatchedWait:
    """``SharedData.wait_merge(seq, timeout)`` on a thread of its own; the constructor returns once the waiter has
    looked at the merge once (its watches are set), so what changes after is seen by notification only."""

    def __init__(self, cluster: Cluster, seq: int, timeout: float) -> None:
        looked = threading.Event()
        self.found: list[Merge | BaseException] = []
        shared = SharedData(cluster.admin_zk, "g", "r1", "m1")
        read = shared.read_merge

        def read_and_tell(s: int, watch: Any = None) -> Merge:
            try:
                return read(s, watch)
            finally:
                looked.set()

        shared.read_merge = read_and_tell  # type: ignore[method-assign,assignment]

        def run() -> None:
            try:
                self.found.append(shared.wait_merge(seq, timeout))
            except MergeTimeoutError as e:
                self.found.append(e)

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        wait_until(looked.is_set, 10, "the waiter's first look at the merge")

    def result(self, deadline: float) -> Merge:
        wait_until(lambda: bool(self.found), deadline, "the waiter woken by the merge's watch")
        found = self.found[0]
        assert isinstance(found, Merge), found
        return found


def test_reset_to_initial_gives_the_same_positions_every_time(cluster: Cluster, tmp_path: Path) -> None:
    data, store = seed(cluster, tmp_path, 2, 30)
    with ExitStack() as stack:
        m1 = start_member(stack, cluster, data, store, "m1", start="end")
        other = SharedData(cluster.admin_zk, "g", "r1", "m2")
        wait_until(lambda: None not in [other.initial(("t", p)) for p in range(2)], 20, "both control variables")
        for round_ in range(3):
            for p in range(2):
                produce(data, "t", p, 30 + 10 * round_, 10)  # the logs' ends move; the initial state does not
            m1.region.reset_to_initial()
            assert state_of(m1) is ClientState.RESET_COMPLETE
        assert isinstance(m1.app, RecordingApp) and m1.app.restored == [None] * 3  # the empty state, each time
        wait_until(lambda: m1.app.processed >= 60, 20, "records after the initial positions processed")
        events = cluster.events("region.reset", member="m1")
        assert [e.fields["offsets"] for e in events] == [{"t/0": 30, "t/1": 30}] * 3
        assert all(e.fields["checkpoint"] is None for e in events)
        # Another member of the region reads the same control variables.
        assert [other.initial(("t", p)) for p in range(2)] == [30, 30]


def test_a_join_while_fetching_resets_the_region_and_nothing_is_counted_twice(cluster: Cluster, tmp_path: Path) -> None:
    data, store = seed(cluster, tmp_path, 4, 200)
    with ExitStack() as stack:
        driver = start_driver(cluster, stack, ["m1", "m2"])
        m1 = start_member(stack, cluster, data, store, "m1")
        wait_until(lambda: m1.app.processed >= 200, 30, "m1 fetching and processing")
        m2 = start_member(stack, cluster, data, store, "m2")  # a join: m1's partitions go
        for p in range(4):
            produce(data, "t", p, 200, 50)
        want = expected(data, "t", 4)
        wait_until(lambda: summed([m1, m2]) == want and len(driver.completed) >= 1, 40, "every record counted once")
        # m1 was reset after it had fetched (by the driver seeing m2, or by its own revocation: whichever came first;
        # the revocation alone is test_partitions_added_at_runtime_are_consumed's)
        assert m1.app.processed > sum(c for c, _s in want.values())  # records were processed again, counted once


def test_partitions_added_at_runtime_are_consumed_after_a_revocation_during_fetching(
    cluster: Cluster, tmp_path: Path
) -> None:
    data, store = seed(cluster, tmp_path, 2, 40)
    with ExitStack() as stack:
        driver = start_driver(cluster, stack, ["m1"])
        m1 = start_member(stack, cluster, data, store, "m1")
        wait_until(lambda: summed([m1]) == expected(data, "t", 2), 30, "the first two partitions counted")
        TopicAdmin(cluster.admin_zk).alter("t", 3)
        produce(data, "t", 2, 0, 40)
        want = expected(data, "t", 3)
        wait_until(lambda: summed([m1]) == want and len(driver.completed) >= 2, 40, "the added partition counted once")
        assert SharedData(cluster.admin_zk, "g", "r1", "m1").initial(("t", 2)) == 0
        # The rebalance revoked m1's partitions after it had fetched them: a reset, and still nothing counted twice.
        pending = cluster.events("region.reset_pending", member="m1")
        assert any("revoked after fetching" in e.fields["reason"] for e in pending), pending


def test_a_member_of_another_region_is_refused_at_start(cluster: Cluster, tmp_path: Path) -> None:
    data, store = seed(cluster, tmp_path, 1)
    with ExitStack() as stack:
        start_member(stack, cluster, data, store, "m1")
        other = Member(cluster, data, store, "m2", region="r2")
        with pytest.raises(RegionMismatchError, match="group 'g' belongs to consistent region 'r1'"):
            other.region.start()
        (refused,) = cluster.events("region.refused")
        assert refused.fields == {"group": "g", "region": "r2", "member": "m2", "group_region": "r1"}
        assert (
            cluster.admin_zk.get_children(paths.group_ids("g"))
            and len(cluster.admin_zk.get_children(paths.group_ids("g"))) == 1
        )  # the refused member never joined the group
        assert cluster.admin_zk.get_children(paths.region_members("g")) == ["m1"]


def test_every_client_state_transition(cluster: Cluster, tmp_path: Path) -> None:
    """SUBSCRIBED -> CR_RESET_PENDING -> RESET_COMPLETE (a reset), -> CR_RESET_PENDING -> RESET_COMPLETE (another),
    -> CR_RESET_PENDING (asked) -> RESET_COMPLETE, then a restart into a running region: SUBSCRIBED ->
    CR_RESET_PENDING, refusing a drain until its reset.  Every reset passes through CR_RESET_PENDING."""
    data, store = seed(cluster, tmp_path, 1, 10)
    with ExitStack() as stack:
        m1 = start_member(stack, cluster, data, store, "m1")
        assert state_of(m1) is ClientState.SUBSCRIBED
        m1.region.reset_to_initial()
        assert state_of(m1) is ClientState.RESET_COMPLETE
        m1.region.reset_to_initial()
        assert state_of(m1) is ClientState.RESET_COMPLETE
        m1.region.request_reset("test")
        wait_until(lambda: state_of(m1) is ClientState.CR_RESET_PENDING, 10, "reset pending")
        with pytest.raises(RegionError, match="reset of the region is pending"):
            m1.region.drain()
        m1.region.reset_to_initial()
        assert state_of(m1) is ClientState.RESET_COMPLETE
        # one journal: its seq orders the lines
        steps = sorted(cluster.events("region.reset_pending") + cluster.events("region.reset"), key=lambda e: e.seq)
        assert [e.event for e in steps] == ["region.reset_pending", "region.reset"] * 3
    SharedData(cluster.admin_zk, "g", "r1", "driver").put_order(ControlOrder(1, 1, "reset", None, ("m1",)), -1)
    with ExitStack() as stack:
        again = start_member(stack, cluster, data, store, "m1")
        assert state_of(again) is ClientState.CR_RESET_PENDING
        requests = SharedData(cluster.admin_zk, "g", "r1", "driver").requests()
        assert requests["m1"].after == 1 and "running region" in requests["m1"].reason


def test_each_start_position(cluster: Cluster, tmp_path: Path) -> None:
    """beginning, end, committed (else the log start) and timestamp (else the log end) give a partition's first
    position; never a fixed offset."""
    data = tmp_path / "data"
    with PartitionWriter(data, "t", 0) as writer:
        writer.append_batch([(b"k", b"p:0:", 1_000)] * 10)
        writer.append_batch([(b"k", b"p:0:", 2_000)] * 10)
    zk = cluster.admin_zk

    def at(position: str, timestamp: int | None = None) -> int:
        config = RegionConfig("r1", "m1", tmp_path, start_position=position, start_timestamp_ms=timestamp)  # type: ignore[arg-type]
        return start_offset(config, data, zk, "g", ("t", 0))

    assert (at("beginning"), at("end")) == (0, 20)
    assert (at("timestamp", 1_500), at("timestamp", 0), at("timestamp", 9_999)) == (10, 0, 20)
    assert at("committed") == 0  # nothing committed: the log start
    zk.create(paths.offset("g", "t", 0), b"13", makepath=True)
    assert at("committed") == 13
