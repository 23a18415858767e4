"""The region's hostile states, against a real ZooKeeper: a malformed order, a second driver, a corrupt region znode,
a foreign contribution, a checkpoint missing from a member's store.  Each is refused or waited out, never fatal."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.clusters import Cluster
from tests.integration.test_region import Member, checkpointed_member, seed, start_member, state_of
from tests.zkutil import expire_session
from zkcoord.errors import CodecError
from zkcoord.layout import paths
from zkcoord.layout.region import Contribution, ControlOrder
from zkcoord.region.driver import DriverFencedError, RegionDriver
from zkcoord.region.errors import RegionError
from zkcoord.region.shared import MergeTimeoutError, SharedData
from zkcoord.region.states import ClientState
from zkcoord.testbed.procs import wait_until

pytestmark = pytest.mark.integration


def test_a_malformed_order_is_ignored_and_the_next_one_carried_out(cluster: Cluster, tmp_path: Path) -> None:
    data, store = seed(cluster, tmp_path, 1, 20)
    with ExitStack() as stack:
        m1 = start_member(stack, cluster, data, store, "m1")
        wait_until(lambda: m1.app.processed == 20, 20, "m1 processing")
        cluster.admin_zk.create(paths.region_control("g"), b'{"op":"explode","version":1}', makepath=True)
        order = ControlOrder(1, 1, "checkpoint", 1, ("m1",))
        cluster.admin_zk.set(paths.region_control("g"), order.encode())
        ack = SharedData(cluster.admin_zk, "g", "r1", "driver")
        wait_until(lambda: ack.acks(["m1"]).get("m1") is not None, 20, "m1 answers the valid order")
        assert ack.acks(["m1"])["m1"].ok
        assert ack.read_merge(1).offsets == {("t", 0): 20}


def test_a_second_driver_fences_the_first(cluster: Cluster) -> None:
    first = RegionDriver(cluster.admin_zk, "g", "r1", ["m1"])
    first.take_over()
    first.order("reset", None, ["m1"])
    second = RegionDriver(cluster.admin_zk, "g", "r1", ["m1"])
    second.take_over()
    assert second.epoch == first.epoch + 1 and second.next_id == first.next_id
    second.order("reset", None, ["m1"])
    with pytest.raises(DriverFencedError, match="another driver wrote an order"):
        first.order("checkpoint", 1, ["m1"])
    got, _ = SharedData(cluster.admin_zk, "g", "r1", "m1").order()
    assert got is not None and got.epoch == second.epoch


def test_a_corrupt_region_znode_refuses_the_start_in_one_line(cluster: Cluster, tmp_path: Path) -> None:
    cluster.admin_zk.create(paths.region_root("g"), b"\xff garbage", makepath=True)
    member = Member(cluster, tmp_path / "data", tmp_path / "store", "m1")
    with pytest.raises(CodecError) as info:
        member.region.start()
    assert "\n" not in str(info.value) and paths.region_root("g") in str(info.value)
    assert not cluster.admin_zk.exists(paths.group_ids("g"))  # never joined the group


def test_a_foreign_contribution_cannot_complete_a_merge(cluster: Cluster) -> None:
    shared = SharedData(cluster.admin_zk, "g", "r1", "m1")
    shared.check_region()
    shared.contribute(Contribution("m1", ("m1", "m2"), 4, {("t", 0): 1}))
    cluster.admin_zk.create(paths.region_contribution("g", 4, "m2"), b"not json", makepath=True)
    with pytest.raises(MergeTimeoutError):
        shared.wait_merge(4, 0.3)
    shared.retire(4)
    assert shared.merge_seqs() == []


def test_a_checkpoint_missing_from_the_store_fails_the_reset_and_the_member_waits(
    cluster: Cluster, tmp_path: Path
) -> None:
    with ExitStack() as stack:
        m1 = checkpointed_member(stack, cluster, tmp_path, 10)
        m1.region.store.retire(1)  # the local copy is gone, the merge is complete
        with pytest.raises(RegionError, match="checkpoint 1 is not in the local store"):
            m1.region.reset(1)
        assert state_of(m1) is ClientState.CR_RESET_PENDING
        m1.region.reset_to_initial()  # the next reset brings it back
        assert state_of(m1) is ClientState.RESET_COMPLETE
        wait_until(lambda: m1.app.processed == 20, 20, "processed again from the initial state")


def test_an_expired_region_session_takes_the_name_again_and_asks_for_a_reset(cluster: Cluster, tmp_path: Path) -> None:
    data, store = seed(cluster, tmp_path, 1)
    with ExitStack() as stack:
        m1 = start_member(stack, cluster, data, store, "m1")
        m1.region.reset_to_initial()
        expire_session(m1.region.zk.kazoo)  # the region's own session: its name under members/ goes
        shared = SharedData(cluster.admin_zk, "g", "r1", "driver")

        def rejoined() -> bool:
            request = shared.requests().get("m1")
            return shared.members() == ["m1"] and request is not None and "session expired" in request.reason

        wait_until(rejoined, 20, "m1 back in members/ with a reset request")
        assert state_of(m1) is ClientState.CR_RESET_PENDING
