"""The report's plot data as Spark hands it over: a null column is a key with None, never a missing key."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from zkcoord.analysis.report import ReportData
from zkcoord.analysis.report_plots import rebalances_figure

pytestmark = pytest.mark.spark


def test_a_completed_rebalance_with_no_latency_is_plotted_not_a_crash(spark: SparkSession, tmp_path: Path) -> None:
    """A consumer-protocol rebalance finished by a successor coordinator (``kip848.resumed``) completes with no
    latency: the successor does not know when it was requested.  Spark's ``to_json`` leaves such a null out."""
    frames = {
        "intervals": spark.createDataFrame(
            [("safe", "g", "t", 0, "c", 1000, 2000)],
            "run string, group string, topic string, partition int, consumer string, start_ts long, end_ts long",
        ),
        "overlaps": spark.createDataFrame(
            [], "run string, group string, topic string, partition int, start_a long, start_b long, overlap_ms long"
        ),
        "rebalances": spark.createDataFrame(
            [("safe", None, 3.0, "completed"), ("safe", 12.5, None, "completed")],
            "run string, latency_ms double, stw_ms double, outcome string",
        ),
        "faults": spark.createDataFrame([("safe", 1500, "coordinator-kill")], "run string, ts long, fault string"),
        "progress": spark.createDataFrame(
            [("safe", 0, 1000, 10, 10)], "run string, bucket long, bucket_ts long, produced long, delivered long"
        ),
    }
    data = ReportData.collect(frames, {"safe": 1000})
    rows = sorted(data.rebalances["safe"], key=lambda r: r["latency_ms"] is None)
    assert rows == [
        {"run": "safe", "latency_ms": 12.5, "stw_ms": None, "outcome": "completed"},
        {"run": "safe", "latency_ms": None, "stw_ms": 3.0, "outcome": "completed"},
    ]
    fig = rebalances_figure(data, "safe")
    assert [list(trace.x) for trace in fig.data] == [[12.5], [3.0]]
