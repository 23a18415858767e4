"""Issue 24's review, against a real ZooKeeper and a real coordinator: a drain stops polling, so no revocation lands
before the checkpoint; a checkpoint is refused while a reset is pending; the driver records a complete checkpoint in
``region/completed`` (fenced with ``control``) and a driver that takes over resets to it, never to a merge it infers;
a merge must cover every partition with a control variable; checkpoints that never completed are retired; a member
outside the driver's ``--members`` is driven."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.clusters import Cluster
from tests.integration.test_region import (
    Member,
    WatchedWait,
    _closing,
    expected,
    produce,
    seed,
    start_driver,
    state_of,
    summed,
)
from zkcoord.consumer import TopicPartition
from zkcoord.data.topics import TopicAdmin
from zkcoord.layout import paths
from zkcoord.layout.region import Contribution
from zkcoord.region.driver import DriverFencedError, RegionDriver, merged_members
from zkcoord.region.errors import CheckpointRefusedError
from zkcoord.region.shared import MergeTimeoutError, SharedData
from zkcoord.region.states import ClientState
from zkcoord.runtime.journal import Journal
from zkcoord.testbed.procs import ProcessError, wait_until

pytestmark = pytest.mark.integration


def test_a_drain_stops_polling_so_a_revocation_waits_for_the_checkpoint(cluster: Cluster, tmp_path: Path) -> None:
    """The seed's drain stops polling: the stop a join brings is parked for m1's next poll, which comes only after
    the checkpoint, so the checkpoint's offsets are the drained ones, every partition whose records the state counts."""
    cluster.broker(1)
    TopicAdmin(cluster.admin_zk).create("t", 2)
    data, store = tmp_path / "data", tmp_path / "store"
    for p in range(2):
        produce(data, "t", p, 0, 30)
    with ExitStack() as stack:
        m1 = stack.enter_context(_closing(Member(cluster, data, store, "m1").start()))
        m1.region.reset_to_initial()
        wait_until(lambda: m1.app.processed == 60, 20, "m1 processing every record")
        drained = m1.region.drain()
        assert drained == {TopicPartition("t", 0): 30, TopicPartition("t", 1): 30}
        stack.enter_context(_closing(Member(cluster, data, store, "m2").start()))  # a join: m1's partitions stop
        handoff = m1.region.consumer.core.handoff
        pending = ClientState.CR_RESET_PENDING
        wait_until(lambda: bool(handoff.parked()) or state_of(m1) is pending, 20, "m1's stop, parked or carried out")
        assert state_of(m1) is not pending, "the revocation landed while m1 was drained"
        with pytest.raises(ProcessError):  # 1 s is twenty of m1's poll timeouts: a polling m1 would be pending
            wait_until(lambda: state_of(m1) is ClientState.CR_RESET_PENDING, 1.0, "a revocation while drained")
        m1.region.checkpoint(1, m1.app.snapshot())
        shared = SharedData(cluster.admin_zk, "g", "r1", "driver")
        assert shared.read_merge(1).offsets == {("t", 0): 30, ("t", 1): 30}
        # polling again: the parked stop's revocation lands now, after the checkpoint
        wait_until(lambda: state_of(m1) is ClientState.CR_RESET_PENDING, 20, "the revocation after the checkpoint")


def test_a_checkpoint_is_refused_while_a_reset_is_pending(cluster: Cluster, tmp_path: Path) -> None:
    cluster.broker(1)
    TopicAdmin(cluster.admin_zk).create("t", 1)
    data, store = tmp_path / "data", tmp_path / "store"
    produce(data, "t", 0, 0, 20)
    with ExitStack() as stack:
        m1 = stack.enter_context(_closing(Member(cluster, data, store, "m1").start()))
        m1.region.reset_to_initial()
        wait_until(lambda: m1.app.processed == 20, 20, "m1 processing")
        m1.region.drain()
        m1.region.request_reset("between the drain and the checkpoint")  # as a lost session or a failed process
        wait_until(lambda: state_of(m1) is ClientState.CR_RESET_PENDING, 10, "reset pending")
        with pytest.raises(CheckpointRefusedError, match="checkpoint 1 refused: a reset of the region is pending"):
            m1.region.checkpoint(1, m1.app.snapshot())
        assert cluster.admin_zk.exists(paths.region_merge("g", 1)) is None  # no contribution
        assert m1.region.store.seqs() == []  # no local copy
        (refused,) = cluster.events("region.checkpoint_refused", member="m1")
        assert refused.fields["checkpoint"] == 1
        m1.region.reset_to_initial()  # the pending reset comes; the member goes on
        assert state_of(m1) is ClientState.RESET_COMPLETE


def _contribute_both(shared: SharedData, seq: int) -> None:
    for i, name in enumerate(("m1", "m2")):
        shared.contribute(Contribution(name, ("m1", "m2"), seq, {("t", i): 10 * seq}))


def test_a_driver_that_takes_over_resets_to_the_recorded_checkpoint_not_to_a_merge(cluster: Cluster) -> None:
    """Checkpoint 3's merge holds N distinct contributions, but its driver did not complete it (a reset was asked
    meanwhile) and then died: the next driver resets to checkpoint 2, the one recorded in region/completed, and
    removes checkpoint 3's merge."""
    shared = SharedData(cluster.admin_zk, "g", "r1", "m1")
    shared.check_region()
    first = RegionDriver(cluster.admin_zk, "g", "r1", ["m1", "m2"])
    first.take_over()
    first.order("checkpoint", 2, ["m1", "m2"])
    _contribute_both(shared, 2)
    first.record_completed(2, ["m1", "m2"])
    first.order("checkpoint", 3, ["m1", "m2"])
    _contribute_both(shared, 3)
    assert shared.read_merge(3).complete  # what the old take-over inferred from
    second = RegionDriver(cluster.admin_zk, "g", "r1", ["m1", "m2"])
    second.take_over()
    assert (second.last_complete, second.next_seq) == (2, 4)
    assert shared.merge_seqs() == [2]
    done, _ = shared.completed()
    assert done is not None and (done.seq, done.epoch, done.members) == (2, first.epoch, ("m1", "m2"))


def test_the_completed_record_is_fenced_like_the_orders(cluster: Cluster) -> None:
    """A stale driver's completion is refused once another driver wrote an order; a completion written after another
    driver took over refuses that driver's next order.  Whichever writes first wins, the other stops."""
    SharedData(cluster.admin_zk, "g", "r1", "m1").check_region()
    first = RegionDriver(cluster.admin_zk, "g", "r1", ["m1"])
    first.take_over()
    first.order("checkpoint", 1, ["m1"])
    second = RegionDriver(cluster.admin_zk, "g", "r1", ["m1"])
    second.take_over()
    second.order("reset", None, ["m1"])
    with pytest.raises(DriverFencedError, match="another driver wrote meanwhile"):
        first.record_completed(1, ["m1"])
    shared = SharedData(cluster.admin_zk, "g", "r1", "m1")
    done, _ = shared.completed()
    assert done is not None and done.seq is None
    third = RegionDriver(cluster.admin_zk, "g", "r1", ["m1"])
    third.take_over()
    second.record_completed(1, ["m1"])  # second's last order is still control's: it lands
    with pytest.raises(DriverFencedError, match="another driver wrote an order"):
        third.order("reset", None, ["m1"])
    done, _ = shared.completed()
    assert done is not None and done.seq == 1


def test_a_merge_must_cover_every_partition_with_a_control_variable(cluster: Cluster) -> None:
    shared = SharedData(cluster.admin_zk, "g", "r1", "m1")
    shared.check_region()
    shared.ensure_tree()
    for p in (0, 1):
        shared.initial_or_create(("t", p), lambda: 0)
    shared.contribute(Contribution("m1", ("m1",), 1, {("t", 0): 5}))  # N = 1, one distinct contribution
    merged = shared.read_merge(1)
    assert not merged.complete and merged.uncovered == (("t", 1),)
    with pytest.raises(MergeTimeoutError):
        shared.wait_merge(1, 0.3)
    # A partition first seen after the checkpoint's first contribution (added at runtime) is not required: no state
    # of that checkpoint counts its records, and its control variable is its right position.
    shared.contribute(Contribution("m1", ("m1",), 2, {("t", 0): 5, ("t", 1): 7}))
    shared.initial_or_create(("t", 2), lambda: 0)
    assert shared.read_merge(2).complete


def test_the_driver_resets_to_the_initial_state_when_the_recorded_merge_is_no_longer_usable(cluster: Cluster) -> None:
    shared = SharedData(cluster.admin_zk, "g", "r1", "m1")
    shared.check_region()
    first = RegionDriver(cluster.admin_zk, "g", "r1", ["m1", "m2"])
    first.take_over()
    first.order("checkpoint", 1, ["m1", "m2"])
    _contribute_both(shared, 1)
    first.record_completed(1, ["m1", "m2"])
    cluster.admin_zk.delete(paths.region_contribution("g", 1, "m2"))  # damaged since
    second = RegionDriver(
        cluster.admin_zk, "g", "r1", ["m1", "m2"], journal=Journal(cluster.journal_dir, "driver")
    )  # fmt: skip
    second.take_over()
    assert second.last_complete == 1
    assert second.reset_target() is None
    (unusable,) = cluster.events("region.unusable")
    assert unusable.fields["checkpoint"] == 1 and "not every member" in unusable.fields["reason"]


def test_a_contribution_rewritten_in_place_wakes_a_waiting_member(cluster: Cluster) -> None:
    shared = SharedData(cluster.admin_zk, "g", "r1", "m1")
    shared.check_region()
    shared.contribute(Contribution("m1", ("m1", "m2"), 1, {("t", 0): 10}))
    shared.contribute(Contribution("m2", ("m1", "m2"), 1, {("t", 0): 12}))  # a conflict: not complete
    waiter = WatchedWait(cluster, 1, 60)
    shared.contribute(Contribution("m2", ("m1", "m2"), 1, {("t", 1): 20}))  # m2's znode set in place, no new child
    assert waiter.result(20).offsets == {("t", 0): 10, ("t", 1): 20}


def test_a_checkpoint_that_does_not_complete_is_retired(cluster: Cluster, tmp_path: Path) -> None:
    """m2's local store cannot be written at first (a file where its directory goes): its checkpoint fails, m1's
    contribution stays alone in the merge; the driver says why (region.incomplete) and removes the merge; m1's local
    copy goes with the first retire after the store is repaired and checkpoints complete."""
    cluster.broker(1)
    TopicAdmin(cluster.admin_zk).create("t", 2)
    data, store = tmp_path / "data", tmp_path / "store"
    blocker = store / "r1" / "m2"
    blocker.parent.mkdir(parents=True)
    blocker.write_text("not a directory")
    for p in range(2):
        produce(data, "t", p, 0, 20)
    with ExitStack() as stack:
        m1 = stack.enter_context(_closing(Member(cluster, data, store, "m1").start()))
        stack.enter_context(_closing(Member(cluster, data, store, "m2").start()))
        driver = start_driver(cluster, stack, ["m1", "m2"])
        wait_until(lambda: bool(cluster.events("region.incomplete")), 30, "a checkpoint that did not complete")
        incomplete = cluster.events("region.incomplete")[0]
        seq = incomplete.fields["checkpoint"]
        assert "not every member answered ok" in incomplete.fields["reason"]
        shared = SharedData(cluster.admin_zk, "g", "r1", "driver")
        wait_until(lambda: seq not in shared.merge_seqs(), 20, f"checkpoint {seq}'s merge removed")
        assert seq in m1.region.store.seqs()  # until a retire sweeps it
        blocker.unlink()
        wait_until(lambda: len(driver.completed) >= 2, 30, "two complete checkpoints (a retire)")
        wait_until(lambda: seq not in m1.region.store.seqs(), 20, f"m1's copy of checkpoint {seq} retired")
        assert seq not in shared.merge_seqs()


def test_a_member_outside_the_drivers_members_is_driven(cluster: Cluster, tmp_path: Path) -> None:
    cluster.broker(1)
    TopicAdmin(cluster.admin_zk).create("t", 4)
    data, store = tmp_path / "data", tmp_path / "store"
    for p in range(4):
        produce(data, "t", p, 0, 50)
    with ExitStack() as stack:
        members = [stack.enter_context(_closing(Member(cluster, data, store, n).start())) for n in ("m1", "m2")]
        driver = start_driver(cluster, stack, ["m1"])  # m2 is not named
        want = expected(data, "t", 4)
        wait_until(lambda: summed(members) == want and bool(driver.completed), 40, "every record counted once")
        assert merged_members(driver, driver.completed[-1]) == ["m1", "m2"]
        assert {e.fields["member"] for e in cluster.events("region.reset")} == {"m1", "m2"}


def _orders(cluster: Cluster, op: str) -> list[dict[str, object]]:
    return [e.fields for e in cluster.events("region.order") if e.fields["op"] == op]


def test_no_checkpoint_is_ordered_without_a_member_of_the_last_complete_one(cluster: Cluster, tmp_path: Path) -> None:
    """m2 (not named in the driver's members) holds state counted in a complete checkpoint.  Once it is gone the
    driver resets m1 to that checkpoint (m1 takes m2's partitions from its offsets) but orders no checkpoint until m2
    is back: one without it would complete with m2's counts below those offsets in no member's state."""
    data, store = seed(cluster, tmp_path, 2, 30)
    want = expected(data, "t", 2)
    with ExitStack() as stack:
        m1 = stack.enter_context(_closing(Member(cluster, data, store, "m1").start()))
        m2 = Member(cluster, data, store, "m2").start()
        driver = start_driver(cluster, stack, ["m1"])
        wait_until(lambda: summed([m1, m2]) == want and bool(driver.completed), 40, "a checkpoint with both")
        assert merged_members(driver, driver.completed[-1]) == ["m1", "m2"]
        m2.close()
        wait_until(lambda: any(o["members"] == ["m1"] for o in _orders(cluster, "reset")), 30, "m1 reset alone")
        ordered = len(_orders(cluster, "checkpoint"))
        with pytest.raises(ProcessError):  # six of the driver's intervals
            wait_until(lambda: len(_orders(cluster, "checkpoint")) > ordered, 3.0, "a checkpoint without m2")
        back = stack.enter_context(_closing(Member(cluster, data, store, "m2").start()))
        done = len(driver.completed)
        wait_until(lambda: len(driver.completed) > done and summed([m1, back]) == want, 40, "a checkpoint with m2")


def test_a_member_new_since_the_checkpoint_starts_empty_at_a_reset_to_it(cluster: Cluster, tmp_path: Path) -> None:
    """A reset to a checkpoint a member had no part in (a new name) gives it the initial state, not a failed reset:
    its state is not counted in the checkpoint and the checkpoint is not in its store.  Before, its reset failed at
    every try and the region reset forever."""
    data, store = seed(cluster, tmp_path, 2, 30)
    want = expected(data, "t", 2)
    with ExitStack() as stack:
        m1 = stack.enter_context(_closing(Member(cluster, data, store, "m1").start()))
        driver = start_driver(cluster, stack, ["m1"])
        wait_until(lambda: summed([m1]) == want and bool(driver.completed), 40, "a checkpoint of m1's")
        first = driver.completed[-1]
        m3 = stack.enter_context(_closing(Member(cluster, data, store, "m3").start()))
        wait_until(lambda: bool(cluster.events("region.reset", member="m3", checkpoint=first)), 30, "m3 reset")
        wait_until(lambda: driver.completed[-1] > first and summed([m1, m3]) == want, 40, "a checkpoint with m3")
        assert merged_members(driver, driver.completed[-1]) == ["m1", "m3"]
