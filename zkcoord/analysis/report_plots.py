"""The report's interactive figures, drawn with plotly (zoom, pan, hover): the ownership timeline of a run with its
overlaps marked, the same timeline zoomed to one violation, rebalance latencies, and consumption progress.

Each function returns a ``plotly.graph_objects.Figure`` built from :class:`~zkcoord.analysis.report_data.ReportData`'s
rows (plain dictionaries); :mod:`zkcoord.analysis.report` writes them into one self-contained page.  Times are
seconds since the run's first event.  Plain Python: any thread.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import plotly.graph_objects as go

from zkcoord.analysis.report_data import ReportData
from zkcoord.analysis.violations import Violation

#: Partitions drawn in a run's ownership timeline (the Parquet table holds them all).
MAX_LANES = 32
#: How much time a zoomed timeline shows on each side of its violation, at least (seconds).
ZOOM_PAD_S = 2.0
OVERLAP_RED = "#d62728"
#: A lane with an overlap is labelled with this mark, so that it stands out in the list of lanes.
FLAG = "\u26a0 "

Lane = tuple[str, str, int]


def _s(ts: float, origin: int) -> float:
    return (ts - origin) / 1000.0


def _lane_label(lane: Lane, flagged: bool) -> str:
    group, topic, partition = lane
    return f"{FLAG if flagged else ''}{group} {topic}-{partition}"


def _key(r: dict[str, Any]) -> Lane:
    return (str(r["group"]), str(r["topic"]), int(r["partition"]))


def ownership_figure(
    data: ReportData,
    run: str,
    *,
    lanes: Sequence[Lane] | None = None,
    window: tuple[float, float] | None = None,
    focus: Violation | None = None,
    title: str | None = None,
) -> go.Figure:
    """Who owned each partition when: one horizontal bar per ownership interval, coloured by consumer (hover: the
    consumer, its generation, the interval).  Overlaps are drawn red over both owners and flagged with a red cross
    above the lane (visible even when the overlap lasts a millisecond at a zoom of minutes); lanes with an overlap
    carry :data:`FLAG`.  Faults are dashed vertical lines (hover: the fault).  ``lanes``/``window`` restrict the
    figure (a zoom); ``focus`` shades a violation's interval and marks the commands its consumers applied."""
    origin = data.first_ts.get(run, 0)
    rows = data.intervals.get(run, [])
    overlaps = data.overlaps.get(run, [])
    flagged = {_key(o) for o in overlaps}
    caption = f"{len(lanes)} partitions shown" if lanes is not None else ""
    if lanes is None:
        lanes = _lanes(rows, flagged)
        total = len({_key(r) for r in rows})
        caption = f"{len(lanes)}{'' if total == len(lanes) else f' of {total}'} partitions shown"
    label = {lane: _lane_label(lane, lane in flagged) for lane in lanes}
    fig = go.Figure()
    by_consumer: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        if _key(r) in label:
            by_consumer[str(r["consumer"])].append(r)
    for consumer, mine in sorted(by_consumer.items()):
        fig.add_trace(go.Bar(
            orientation="h", name=consumer[-30:], legendgroup=consumer,
            y=[label[_key(r)] for r in mine],
            base=[_s(r["start_ts"], origin) for r in mine],
            x=[max((r["end_ts"] - r["start_ts"]) / 1000.0, 0.001) for r in mine],
            opacity=0.65,
            hovertext=[
                f"{consumer}<br>generation {r.get('generation')}<br>"
                f"{_s(r['start_ts'], origin):.3f} s .. {_s(r['end_ts'], origin):.3f} s" for r in mine
            ],
            hoverinfo="text",
        ))  # fmt: skip
    shown = [o for o in overlaps if _key(o) in label]
    if shown:
        starts = [_s(max(o["start_a"], o["start_b"]), origin) for o in shown]
        ys = [label[_key(o)] for o in shown]
        texts = [
            f"S2: {o['consumer_a']} and {o['consumer_b']} both own it for {o['overlap_ms']} ms "
            f"(generations {o.get('generation_a')}, {o.get('generation_b')})" for o in shown
        ]  # fmt: skip
        fig.add_trace(go.Bar(
            orientation="h", name="overlap (S2)", y=ys, base=starts,
            x=[max(o["overlap_ms"] / 1000.0, 0.001) for o in shown], marker_color=OVERLAP_RED, width=0.9,
            hovertext=texts, hoverinfo="text",
        ))  # fmt: skip
        fig.add_trace(go.Scatter(
            mode="markers", name="overlap mark", x=starts, y=ys, hovertext=texts, hoverinfo="text",
            marker={"symbol": "x", "size": 12, "color": OVERLAP_RED, "line": {"width": 1}}, showlegend=False,
        ))  # fmt: skip
    for f in data.faults.get(run, []):
        x = _s(f["ts"], origin)
        if window is None or window[0] <= x <= window[1]:
            fig.add_vline(x=x, line_dash="dash", line_color="black", line_width=1, opacity=0.6)
    faults = [f for f in data.faults.get(run, []) if window is None or window[0] <= _s(f["ts"], origin) <= window[1]]
    if faults and lanes:
        fig.add_trace(go.Scatter(
            mode="markers", name="faults", x=[_s(f["ts"], origin) for f in faults], y=[label[lanes[-1]]] * len(faults),
            marker={"symbol": "triangle-down", "size": 9, "color": "black"},
            hovertext=[f"fault: {f['fault']}" for f in faults], hoverinfo="text",
        ))  # fmt: skip
    if focus is not None:
        _mark_focus(fig, data, run, focus, origin)
    height = max(260, 26 * len(lanes) + 140)
    fig.update_layout(
        barmode="overlay", height=height, title=title or f"{run}: ownership ({caption})",
        xaxis_title="seconds since the run's first event", margin={"l": 10, "r": 10, "t": 40, "b": 40},
        legend={"font": {"size": 9}}, hovermode="closest",
    )  # fmt: skip
    fig.update_yaxes(categoryorder="array", categoryarray=[label[lane] for lane in reversed(lanes)])
    if window is not None:
        fig.update_xaxes(range=list(window))
    return fig


def _lanes(rows: Sequence[dict[str, Any]], flagged: set[Lane]) -> list[Lane]:
    """The partitions a run's timeline shows, in order of first appearance: every one with an overlap, then others up
    to :data:`MAX_LANES` (the first ones seen alone would leave out an overlap on a partition met later, in a run whose
    topics grew: the very lane the timeline is there to show)."""
    order = list(dict.fromkeys(_key(r) for r in rows))
    keep = {lane for lane in order if lane in flagged}
    keep |= set([lane for lane in order if lane not in keep][: max(0, MAX_LANES - len(keep))])
    return [lane for lane in order if lane in keep]


def _mark_focus(fig: go.Figure, data: ReportData, run: str, v: Violation, origin: int) -> None:
    """Shade the violation's interval and mark the commands its processes applied (with epoch and generation)."""
    if v.start_ts is not None and v.end_ts is not None:
        x0, x1 = _s(v.start_ts, origin), _s(v.end_ts, origin)
        fig.add_vrect(x0=x0, x1=max(x1, x0 + 0.002), fillcolor=OVERLAP_RED, opacity=0.18, line_width=0)
    commands = [c for c in data.commands.get(run, []) if c.get("consumer") in v.processes and c.get("group") == v.group]
    applied = [c for c in commands if c.get("applied_ts") is not None]
    if applied:
        fig.add_trace(go.Scatter(
            mode="markers", name="command applied", x=[_s(c["applied_ts"], origin) for c in applied],
            y=[f"commands of {str(c['consumer'])[-22:]}" for c in applied],
            marker={"symbol": "diamond", "size": 9, "color": [OVERLAP_RED if c.get("stale") else "#1f77b4"
                                                             for c in applied]},
            hovertext=[f"{c.get('name')}: {c['option']} epoch {c['epoch']} generation {c['generation']}"
                       f"{' (stale)' if c.get('stale') else ''}" for c in applied],
            hoverinfo="text",
        ))  # fmt: skip


def zoom_window(v: Violation, origin: int, run_span: tuple[float, float]) -> tuple[float, float]:
    """The time a zoomed timeline shows: the violation's interval with :data:`ZOOM_PAD_S` (or three times its length)
    on each side; the whole run for a violation about offsets."""
    if v.start_ts is None or v.end_ts is None:
        return run_span
    x0, x1 = _s(v.start_ts, origin), _s(v.end_ts, origin)
    pad = max(ZOOM_PAD_S, 3 * (x1 - x0))
    return (x0 - pad, x1 + pad)


def zoom_lanes(data: ReportData, run: str, v: Violation) -> list[Lane]:
    """The partitions a violation's zoom shows: its own, or (a violation about a group: S1, S5) the group's
    partitions its consumers owned."""
    if v.topic is not None and v.partition is not None and v.group is not None:
        return [(v.group, v.topic, v.partition)]
    lanes: dict[Lane, None] = {}
    for r in data.intervals.get(run, []):
        if r["group"] == v.group and r["consumer"] in v.processes and len(lanes) < 8:
            lanes.setdefault(_key(r), None)
    return list(lanes)


def rebalances_figure(data: ReportData, run: str) -> go.Figure:
    rows = [r for r in data.rebalances.get(run, []) if r["outcome"] == "completed"]
    fig = go.Figure()
    for column, label in (("latency_ms", "latency (ms)"), ("stw_ms", "stop-the-world (ms)")):
        fig.add_trace(
            go.Histogram(x=[float(r[column]) for r in rows if r[column] is not None], name=label, opacity=0.7)
        )
    fig.update_layout(
        barmode="overlay", height=300, title=f"{run}: {len(rows)} completed rebalances", xaxis_title="ms",
        yaxis_title="rebalances", margin={"l": 10, "r": 10, "t": 40, "b": 40},
    )  # fmt: skip
    return fig


def progress_figure(data: ReportData, run: str) -> go.Figure:
    origin = data.first_ts.get(run, 0)
    xs: list[float] = []
    produced: list[int] = []
    delivered: list[int] = []
    total_p = total_d = 0
    for r in data.progress.get(run, []):
        total_p += int(r["produced"])
        total_d += int(r["delivered"])
        xs.append(_s(r["bucket_ts"], origin))
        produced.append(total_p)
        delivered.append(total_d)
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=xs, y=produced, name="produced", mode="lines"))
    fig.add_trace(go.Scatter(x=xs, y=delivered, name="delivered (all groups)", mode="lines"))
    fig.add_trace(go.Scatter(
        x=xs, y=[max(p - d, 0) for p, d in zip(produced, delivered, strict=True)], name="lag", mode="lines", yaxis="y2"
    ))  # fmt: skip
    for f in data.faults.get(run, []):
        fig.add_vline(x=_s(f["ts"], origin), line_dash="dash", line_color="black", line_width=1, opacity=0.5)
    fig.update_layout(
        height=300, title=f"{run}: progress", xaxis_title="seconds", yaxis_title="records (cumulative)",
        yaxis2={"title": "lag", "overlaying": "y", "side": "right"}, margin={"l": 10, "r": 10, "t": 40, "b": 40},
    )  # fmt: skip
    return fig
