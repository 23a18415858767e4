"""The run's ownership timeline shows every partition with an overlap, however many partitions the run has: past
:data:`~zkcoord.analysis.report_plots.MAX_LANES` it leaves out partitions without one, never one with one."""

from __future__ import annotations

from zkcoord.analysis.report_data import ReportData
from zkcoord.analysis.report_plots import MAX_LANES, ownership_figure


def _interval(partition: int, consumer: str, start: int, end: int) -> dict[str, object]:
    return {"run": "r", "group": "g", "topic": "t", "partition": partition, "consumer": consumer,
            "start_ts": start, "end_ts": end, "generation": 1}  # fmt: skip


def test_an_overlap_on_a_partition_past_the_lane_limit_is_in_the_timeline() -> None:
    last = MAX_LANES + 8
    data = ReportData(first_ts={"r": 0})
    data.intervals["r"] = [_interval(p, "a", 0, 1000) for p in range(last)]
    data.intervals["r"] += [_interval(last - 1, "b", 500, 1500)]
    data.overlaps["r"] = [{"run": "r", "group": "g", "topic": "t", "partition": last - 1, "consumer_a": "a",
                           "consumer_b": "b", "start_a": 0, "end_a": 1000, "start_b": 500, "end_b": 1500,
                           "overlap_ms": 500, "generation_a": 1, "generation_b": 1}]  # fmt: skip
    fig = ownership_figure(data, "r")
    shown = list(fig.layout.yaxis.categoryarray)
    assert len(shown) == MAX_LANES
    assert f"\u26a0 g t-{last - 1}" in shown, "the partition with the overlap was left out of the timeline"
    assert "g t-0" in shown  # the others in order of first appearance, as many as fit
    assert fig.layout.title.text == f"r: ownership ({MAX_LANES} of {last} partitions shown)"
