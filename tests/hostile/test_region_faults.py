"""The region's hostile states from issue 24's review, against a real ZooKeeper: a stored state the application
cannot restore stops the member (journalled, one Error: line and exit 1 for the command), never a silent dead event
thread; a reset request ZooKeeper refuses is said and written again once it can be; a malformed ``completed`` stops
the driver in one line."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

import pytest
from kazoo.security import OPEN_ACL_UNSAFE, make_acl

from tests.clusters import Cluster
from tests.integration.test_region import checkpointed_member, seed, start_member, state_of
from tests.zkutil import expire_session
from zkcoord.errors import CodecError
from zkcoord.layout import paths
from zkcoord.layout.region import CompletedRecord, Contribution, ControlOrder
from zkcoord.region.driver import RegionDriver
from zkcoord.region.errors import RegionError
from zkcoord.region.shared import SharedData
from zkcoord.region.states import ClientState
from zkcoord.region.store import LocalStore
from zkcoord.testbed.procs import ChildProcess, wait_until

pytestmark = pytest.mark.integration


def test_a_stored_state_the_application_cannot_restore_stops_the_member(cluster: Cluster, tmp_path: Path) -> None:
    with ExitStack() as stack:
        m1 = checkpointed_member(stack, cluster, tmp_path, 10)
        doc = m1.region.store.load(1)
        m1.region.store.save(1, {**doc, "state": "not a state"})  # valid JSON, not what the application wrote
        with pytest.raises(RegionError, match="restoring checkpoint 1 failed"):
            m1.region.reset(1, timeout=10)
        assert len(m1.fatal) == 1 and "restoring checkpoint 1 failed" in m1.fatal[0]
        (failed,) = cluster.events("region.restore_failed", member="m1")
        assert failed.fields["checkpoint"] == 1 and "ValueError" in failed.fields["error"]
        assert len(cluster.events("region.failed", member="m1")) == 1
        assert state_of(m1) is ClientState.CR_RESET_PENDING


def test_a_region_member_whose_stored_state_cannot_be_restored_exits_with_one_line(
    cluster: Cluster, tmp_path: Path
) -> None:
    """The command: a driver resets m1 to checkpoint 1, recorded complete; m1's local copy holds a state its
    application cannot take.  m1 ends with one Error: line and exit 1."""
    data, store = seed(cluster, tmp_path, 1, 10)
    shared = SharedData(cluster.admin_zk, "g", "r1", "m1")
    shared.check_region()
    shared.ensure_tree()
    shared.put_order(ControlOrder(1, 1, "checkpoint", 1, ("m1",)), -1)
    shared.contribute(Contribution("m1", ("m1",), 1, {("t", 0): 10}))
    cluster.admin_zk.create(paths.region_completed("g"), CompletedRecord(1, 1, ("m1",)).encode())
    LocalStore(store, "r1", "m1").save(1, {"member": "m1", "seq": 1, "state": ["not", "a", "state"]})
    driver = RegionDriver(cluster.admin_zk, "g", "r1", ["m1"], order_timeout_s=20)
    driver.take_over()
    log = tmp_path / "member.log"
    with ChildProcess(
        ["region", "member", "--group", "g", "--topic", "t", "--region", "r1", "--member-name", "m1",
         "--store-dir", str(store), "--data-dir", str(data), "--zk", cluster.hosts, "--journal",
         str(cluster.journal_dir)],
        log,
    ) as member:  # fmt: skip
        wait_until(lambda: "m1" in shared.members(), 30, "m1 in the region")
        order = driver.order("reset", driver.reset_target(), ["m1"])
        assert order.seq == 1
        assert member.wait(30) == 1
    output = log.read_text()
    errors = [line for line in output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "restoring checkpoint 1 failed" in errors[0], output
    assert "Traceback" not in output
    assert cluster.events("region.restore_failed", member="m1")


def test_a_reset_request_zookeeper_refuses_is_said_and_written_once_it_can_be(cluster: Cluster, tmp_path: Path) -> None:
    """requests/ refuses the member's writes (an ACL of read only): the request is not lost in a log line: it is
    journalled (region.request_failed) and written again once ZooKeeper takes it."""
    data, store = seed(cluster, tmp_path, 1)
    with ExitStack() as stack:
        m1 = start_member(stack, cluster, data, store, "m1")
        m1.region.reset_to_initial()
        requests = paths.region_requests("g")
        cluster.admin_zk.kazoo.set_acls(requests, [make_acl("world", "anyone", read=True, admin=True)])
        m1.region.request_reset("a revocation after fetching")
        wait_until(lambda: bool(cluster.events("region.request_failed", member="m1")), 20, "the refusal journalled")
        (failed,) = cluster.events("region.request_failed", member="m1")
        assert failed.fields["reason"] == "a revocation after fetching"
        shared = SharedData(cluster.admin_zk, "g", "r1", "driver")
        assert "m1" not in shared.requests()
        cluster.admin_zk.kazoo.set_acls(requests, OPEN_ACL_UNSAFE)
        wait_until(lambda: "m1" in shared.requests(), 20, "the request written on a later try")
        assert shared.requests()["m1"].reason == "a revocation after fetching"
        assert len(cluster.events("region.request_failed", member="m1")) == 1  # said once, not once per try


def test_a_malformed_completed_record_stops_the_driver_in_one_line(cluster: Cluster) -> None:
    SharedData(cluster.admin_zk, "g", "r1", "m1").check_region()
    cluster.admin_zk.create(paths.region_completed("g"), b'{"epoch":1,"seq":"x"}', makepath=True)
    with pytest.raises(CodecError) as info:
        RegionDriver(cluster.admin_zk, "g", "r1", ["m1"]).take_over()
    assert "\n" not in str(info.value) and paths.region_completed("g") in str(info.value)


def test_a_member_whose_name_cannot_be_taken_again_stays_pending_and_tries_again(
    cluster: Cluster, tmp_path: Path
) -> None:
    """The region's session expires (its name under members/ goes with it) and members/ refuses the new session's
    write: the member processes nothing meanwhile (CR_RESET_PENDING at once), says so (region.request_failed), and
    takes its name again once ZooKeeper lets it."""
    data, store = seed(cluster, tmp_path, 1)
    with ExitStack() as stack:
        m1 = start_member(stack, cluster, data, store, "m1")
        m1.region.reset_to_initial()
        members = paths.region_members("g")
        cluster.admin_zk.kazoo.set_acls(members, [make_acl("world", "anyone", read=True, admin=True)])
        expire_session(m1.region.zk.kazoo)
        rejoin = "taking the member's name again"  # (a reset request the lost session refused may come first)

        def refused() -> bool:
            return any(e.fields["reason"] == rejoin for e in cluster.events("region.request_failed", member="m1"))

        wait_until(refused, 20, "the refused rejoin journalled")
        assert state_of(m1) is ClientState.CR_RESET_PENDING
        assert "m1" not in cluster.admin_zk.get_children(members)
        cluster.admin_zk.kazoo.set_acls(members, OPEN_ACL_UNSAFE)
        wait_until(lambda: "m1" in cluster.admin_zk.get_children(members), 20, "the name taken on a later try")
        assert state_of(m1) is ClientState.CR_RESET_PENDING  # and a reset asked for: the others may have gone on
        wait_until(lambda: "m1" in SharedData(cluster.admin_zk, "g", "r1", "driver").requests(), 20, "the request")
