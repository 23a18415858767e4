"""A stop phase waits for its members' applications: the coordinator (a real broker, in-process) lengthens the
timeout of a phase that sends stop-fetchers by the longest poll interval its stopped members publish in their
registrations, against a real ZooKeeper.  The members are scripted ZooKeeper clients (:mod:`tests.scripted`): they
register with ``max_poll_interval_ms`` and acknowledge a stop only after a delay, as a consumer whose application
finishes its batch and its revoke callback first."""

from __future__ import annotations

import time
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.clusters import Cluster
from tests.integration.test_consumer_e2e import Run
from zkcoord.data.topics import TopicAdmin
from zkcoord.layout import paths
from zkcoord.layout.group_state import GroupPhase
from zkcoord.layout.registrations import MemberRegistration
from zkcoord.testbed.procs import wait_until

pytestmark = pytest.mark.integration

#: the broker's --rebalance-timeout in these tests: every acknowledgement below comes later than this
BASE_S = 0.5
#: no retry: an attempt that times out fails the rebalance at once, for all to see
QUICK = {"rebalance_timeout_s": BASE_S, "max_rebalance_retries": 0, "rebalance_backoff_s": 0.05}


def test_zkcoord_consume_publishes_its_poll_interval_in_its_registration(zk_hosts: str, tmp_path: Path) -> None:
    with ExitStack() as stack:
        run = Run(zk_hosts, tmp_path, stack)
        run.consumer("g", "t", extra=("--max-poll-interval", "42.5"))
        run.consumer("g", "t")  # Kafka's default

        def published() -> list[int]:
            ids = run.zk.get_children(paths.group_ids("g")) if run.zk.exists(paths.group_ids("g")) else []
            return sorted(
                MemberRegistration.decode(run.zk.get(paths.member("g", cid))[0]).max_poll_interval_ms or 0
                for cid in ids
            )

        wait_until(lambda: len(published()) == 2, 30, "both consumers registered")
        assert published() == [42_500, 300_000]


def _seconds(earlier_ns: int, later_ns: int) -> float:
    return (later_ns - earlier_ns) / 1e9


def test_a_stop_acknowledged_after_the_base_timeout_but_within_the_poll_interval_completes(cluster: Cluster) -> None:
    cluster.broker(1, **QUICK)
    TopicAdmin(cluster.admin_zk).create("t", 2)
    slow = cluster.consumer("g", {"t": 1}, max_poll_interval_ms=5_000, stop_ack_delay_s=3 * BASE_S)
    cluster.wait_stable("g", 1)
    other = cluster.consumer("g", {"t": 1})  # publishes no interval, acknowledges at once
    state = cluster.wait_stable("g", 2)
    assert set(state.members) == {slow.consumer_id, other.consumer_id}
    assert not cluster.events("rebalance.retrying", group="g") and not cluster.events("rebalance.failed", group="g")
    (done,) = cluster.events("rebalance.completed", group="g", generation=state.generation)
    assert done.fields["attempts"] == 1
    # The barrier waited for the slow member, longer than the base timeout.
    assert done.fields["stop_ms"] >= 3 * BASE_S * 1000
    slow.wait_for(lambda c: c.partitions() != set() and c.fetching)


def test_a_member_leaving_during_the_long_wait_still_aborts_the_attempt_at_once(cluster: Cluster) -> None:
    cluster.broker(1, **QUICK)
    TopicAdmin(cluster.admin_zk).create("t", 2)
    good = cluster.consumer("g", {"t": 1})
    cluster.wait_stable("g", 1)
    stuck = cluster.consumer("g", {"t": 1}, ack=False, max_poll_interval_ms=60_000)
    wait_until(lambda: bool(cluster.events("command.sent", consumer=stuck.consumer_id)), 10, "its stop sent")
    time.sleep(3 * BASE_S)  # past the base timeout: the member's application is still in its batch
    assert not cluster.events("rebalance.retrying", group="g") and not cluster.events("rebalance.failed", group="g")
    left = time.monotonic()
    stuck.close()  # its session ends: its registration vanishes
    cluster.wait_stable("g", 1, timeout=10)
    assert time.monotonic() - left < 5, "the departure waited for the phase's timeout"
    (aborted,) = cluster.events("rebalance.aborted", group="g")
    assert stuck.consumer_id in aborted.fields["reason"]
    good.wait_for(lambda c: c.partitions() == {("t", 0), ("t", 1)})


def test_a_stop_never_acknowledged_fails_after_the_base_timeout_plus_the_poll_interval(cluster: Cluster) -> None:
    cluster.broker(1, **QUICK)
    TopicAdmin(cluster.admin_zk).create("t", 2)
    cluster.consumer("g", {"t": 1})
    cluster.wait_stable("g", 1)
    stuck = cluster.consumer("g", {"t": 1}, ack=False, max_poll_interval_ms=1_000)
    wait_until(lambda: bool(cluster.events("rebalance.failed", group="g")), 20, "the rebalance to fail")
    (failed,) = cluster.events("rebalance.failed", group="g")
    assert f"waiting for {stuck.consumer_id}" in failed.fields["reason"] and "1.5 s" in failed.fields["reason"]
    sent = cluster.events("command.sent", consumer=stuck.consumer_id, generation=failed.fields["generation"])
    assert _seconds(sent[0].mono_ns, failed.mono_ns) >= BASE_S + 1.0
    wait_until(lambda: cluster.state("g").phase is GroupPhase.FAILED, 10, "the failure persisted")
