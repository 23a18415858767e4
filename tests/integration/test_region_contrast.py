"""S8 in CI, without Spark: a short real region run (a real producer journalling its records, a member, a driver
stepped by the test, against a real ZooKeeper and coordinator) judged by the reference reader
(``zkcoord.bench.analyze_regions``).  A member whose reset keeps its live state (``RegionlessApp``, the demo's
``--unsafe`` contrast) counts the records after the checkpoint twice, and S8 FAILs; the same run with the region's
own state passes."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.clusters import Cluster
from tests.integration.test_region import seed, start_member
from zkcoord.bench.analyze_python import python_analysis
from zkcoord.data.producer import ProduceConfig, Producer
from zkcoord.region.app import AggregateApp, RegionlessApp
from zkcoord.region.driver import RegionDriver
from zkcoord.region.shared import SharedData
from zkcoord.runtime.journal import Journal
from zkcoord.testbed.procs import wait_until

pytestmark = pytest.mark.integration


def _produce(cluster: Cluster, data: Path, journal: Journal, count: int) -> None:
    producer = Producer(
        cluster.admin_zk, data, ProduceConfig("t", count=count, size=40, keys=6, journal_records=True), journal
    ).start()
    try:
        producer.run()
    finally:
        producer.close()


@pytest.mark.parametrize("unsafe", [False, True], ids=["region", "region-less"])
def test_s8_fails_when_a_reset_does_not_give_the_state_back(cluster: Cluster, tmp_path: Path, unsafe: bool) -> None:
    data, store = seed(cluster, tmp_path, 2)
    journal = Journal(cluster.journal_dir, "producer")
    with ExitStack() as stack:
        stack.callback(journal.close)
        app = RegionlessApp() if unsafe else AggregateApp()
        m1 = start_member(stack, cluster, data, store, "m1", app=app)
        driver = RegionDriver(
            cluster.admin_zk, "g", "r1", ["m1"], interval_s=0.1, order_timeout_s=10,
            journal=Journal(cluster.journal_dir, "driver"),
        )  # fmt: skip
        driver.take_over()
        wait_until(lambda: driver.step() == "reset" and driver.last_reset is not None, 20, "the first reset")
        _produce(cluster, data, journal, 100)
        wait_until(lambda: m1.app.processed >= 100, 20, "the first 100 records processed")
        wait_until(lambda: driver.step() == "checkpoint" and len(driver.completed) == 1, 20, "checkpoint 1 complete")
        _produce(cluster, data, journal, 100)
        wait_until(lambda: m1.app.processed >= 200, 20, "the next 100 processed, after checkpoint 1")
        m1.region.request_reset("the test's fault")
        shared = SharedData(cluster.admin_zk, "g", "r1", "driver")
        wait_until(lambda: "m1" in shared.requests(), 10, "m1's reset request")
        before = m1.app.processed
        assert driver.step() == "reset"  # to checkpoint 1: the next 100 are processed again
        wait_until(lambda: m1.app.processed >= before + 100, 20, "the next 100 processed again")
        wait_until(lambda: driver.step() == "checkpoint" and len(driver.completed) == 2, 20, "checkpoint 2 complete")
    found = python_analysis(cluster.journal_dir)
    assert found.region_summary["complete_checkpoints"] == 2
    assert found.region_summary["records_journalled"] == 200
    if not unsafe:
        assert found.counts["S8"] == 0 and found.region_state == []
        return
    assert found.counts["S8"] > 0  # FAIL: checkpoint 2's state counts the second 100 (at least) twice
    rows = found.region_state
    assert 2 in {r["checkpoint"] for r in rows}
    assert all(r["found_count"] > r["expected_count"] for r in rows)  # double counts, nothing lost
    assert sum(r["found_count"] - r["expected_count"] for r in rows if r["checkpoint"] == 2) >= 100
