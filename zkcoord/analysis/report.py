"""The HTML report: the verdict table, a table of every violation the verdict lists (a row each: the property, the
partition or group, the interval, the processes and commands, the epochs and generations involved) with a timeline
zoomed to each, and per run the interactive figures of :mod:`zkcoord.analysis.report_plots` (the ownership timeline
with its overlaps marked, rebalance latency and stop-the-world time, consumption progress and lag).

One self-contained page: plotly.js is embedded (no network needed to open it), figures zoom, pan and hover.  The
violation rows come from the verdict (:mod:`zkcoord.analysis.violations`), the figures from small, aggregated data
Spark hands over (:meth:`ReportData.collect`); rendering is plain Python.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
from plotly.offline import get_plotlyjs

from zkcoord.analysis import report_plots as plots
from zkcoord.analysis.report_data import ReportData
from zkcoord.analysis.verdict import PROPERTIES, Verdict
from zkcoord.analysis.violations import Violation, unlisted, violations

__all__ = ["ReportData", "render_report"]

SECTIONS = (
    ("ownership", "Ownership timeline per partition (overlaps red, flagged \u26a0 and marked \u2716; faults dashed)"),
    ("rebalances", "Rebalance latency and stop-the-world time"),
    ("progress", "Consumption progress and lag"),
)


def render_report(out: Path, verdict: Verdict, data: ReportData) -> Path:
    """Write ``report.html`` into ``out`` (one file, plotly.js inside); return its path."""
    path = out / "report.html"
    for stale in out.glob("*.png"):  # the figures of an older report, drawn as images
        stale.unlink()
    path.write_text(_html(verdict, data))
    return path


def _figure(fig: go.Figure, div_id: str) -> str:
    return str(fig.to_html(full_html=False, include_plotlyjs=False, div_id=div_id, config={"responsive": True}))


def _interval(v: Violation, origin: int) -> str:
    if v.start_ts is None or v.end_ts is None:
        return f"offsets {v.offsets}" if v.offsets else "-"
    a, b = (v.start_ts - origin) / 1000.0, (v.end_ts - origin) / 1000.0
    span = f"{a:.3f} s" if v.start_ts == v.end_ts else f"{a:.3f} .. {b:.3f} s ({v.end_ts - v.start_ts} ms)"
    return span + (f"; offsets {v.offsets}" if v.offsets else "")


def _violations(verdict: Verdict, data: ReportData) -> tuple[str, str]:
    """The violation table and the zoomed timelines (one per row), as HTML."""
    e = html.escape
    rows: list[str] = []
    zooms: list[str] = []
    missing: list[str] = []
    for run in verdict.runs:
        found = violations(run)
        origin = data.first_ts.get(run.run, 0)
        last = max([r["end_ts"] for r in data.intervals.get(run.run, [])] or [origin])
        span = (0.0, (last - origin) / 1000.0)
        for v in found:
            anchor = f"v-{len(rows)}"
            cells = [
                e(v.run), f'<span class="prop">{e(v.prop)}</span> {e(v.kind)}', e(v.where), e(_interval(v, origin)),
                "<br>".join(e(p) for p in v.processes) or "-", "<br>".join(e(c) for c in v.commands) or "-",
                e(", ".join(map(str, v.epochs)) or "-"), e(", ".join(map(str, v.generations)) or "-"), e(v.detail),
                f'<a href="#{anchor}">zoom</a>',
            ]  # fmt: skip
            rows.append(f'<tr class="violation">{"".join(f"<td>{c}</td>" for c in cells)}</tr>')
            lanes = plots.zoom_lanes(data, run.run, v)
            window = plots.zoom_window(v, origin, span)
            fig = plots.ownership_figure(
                data, run.run, lanes=lanes, window=window, focus=v,
                title=f"{v.run}: {v.prop} {v.kind}, {v.where}, {_interval(v, origin)}",
            )  # fmt: skip
            zooms.append(f'<section id="{anchor}" class="zoom">{_figure(fig, f"{anchor}-plot")}</section>')
        missing += [f"{run.run}: {n} more {key} not listed" for key, n in unlisted(run, found).items()]
    if not rows:
        return '<p id="no-violations">No violation: every property holds in every run.</p>', ""
    head = "".join(
        f"<th>{h}</th>"
        for h in ("run", "property", "partition or group", "interval (since the run's first event)", "processes",
                  "commands", "epochs", "generations", "what", "")
    )  # fmt: skip
    notes = "".join(f"<p>{e(m)} (the Parquet tables in <code>tables/</code> hold them all).</p>" for m in missing)
    table = f'<table id="violations"><tr>{head}</tr>{"".join(rows)}</table>{notes}'
    return table, "".join(zooms)


def _html(verdict: Verdict, data: ReportData) -> str:
    e = html.escape
    runs = [r.run for r in verdict.runs]
    head = "".join(f"<th>{e(run)}</th>" for run in runs)
    body = []
    for key, title in PROPERTIES.items():
        cells = []
        for r in verdict.runs:
            p = r.property(key)
            cls = "pass" if p.ok and r.ok else "fail"
            cells.append(f'<td class="{cls}">{r.cell(p)}</td>')
        body.append(f"<tr><th>{key} {e(title)}</th>{''.join(cells)}</tr>")
    extra = [
        ("S3, S4 judged on records", [r.judged_on for r in verdict.runs]),
        (
            "rebalances completed / attempts",
            [f"{r.rebalances.get('completed', 0)} / {r.rebalances.get('attempts', 0)}" for r in verdict.runs],
        ),
        ("latency p50 / p95 / max ms", [_triple(r.rebalances, "latency_ms") for r in verdict.runs]),
        ("stop-the-world p50 / p95 / max ms", [_triple(r.rebalances, "stw_ms") for r in verdict.runs]),
        ("faults injected", [str(r.faults) for r in verdict.runs]),
        ("journal lines, skipped", [f"{r.read.lines}, {r.read.summary()}" for r in verdict.runs]),
    ]
    for label, values in extra:
        body.append(f"<tr><th>{e(label)}</th>{''.join(f'<td>{e(v)}</td>' for v in values)}</tr>")
    overall = "".join(f'<td class="{"pass" if r.ok else "fail"}">{r.status}</td>' for r in verdict.runs)
    body.append(f"<tr><th>verdict</th>{overall}</tr>")
    notes = "".join(f"<p>{e(note)}</p>" for r in verdict.runs if (note := r.at_risk_note()) is not None)
    table, zooms = _violations(verdict, data)
    drawers = {
        "ownership": plots.ownership_figure,
        "rebalances": plots.rebalances_figure,
        "progress": plots.progress_figure,
    }
    sections = []
    for kind, title in SECTIONS:
        figures = "".join(
            f'<div class="run">{_figure(drawers[kind](data, run), f"{kind}-{i}")}</div>' for i, run in enumerate(runs)
        )
        sections.append(f"<h2>{e(title)}</h2>{figures}")
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>zkcoord analysis: {e(", ".join(runs))}</title>
<script>{get_plotlyjs()}</script>
<style>
body {{ font-family: system-ui, sans-serif; margin: 1.5em; }}
table {{ border-collapse: collapse; }} th, td {{ border: 1px solid #ccc; padding: 0.3em 0.7em; text-align: left; }}
td.pass {{ background: #e6f4e6; }} td.fail {{ background: #f9dede; font-weight: bold; }}
tr.violation td {{ font-size: 0.85em; vertical-align: top; }} .prop {{ color: #b00; font-weight: bold; }}
.zoom {{ border-left: 4px solid #d62728; padding-left: 0.5em; margin: 1em 0; }}
</style></head><body>
<h1>zkcoord analysis</h1>
<p>Runs: {e(", ".join(runs))}. Verdict: <b>{verdict.status}</b>.
Tables (Parquet) are in <code>tables/</code>, the verdict in <code>verdict.json</code>;
definitions in docs/analysis.md. Figures zoom (drag), pan and show details on hover.</p>
<table id="verdict"><tr><th>property</th>{head}</tr>
{"".join(body)}
</table>
{notes}
<h2>Violations</h2>
{table}
{"".join(sections)}
<h2>Each violation, zoomed</h2>
{zooms or "<p>none</p>"}
</body></html>
"""


def _triple(stats: dict[str, Any], name: str) -> str:
    values = [stats.get(f"{name}_{q}") for q in ("p50", "p95", "max")]
    return " / ".join("-" if v is None else f"{v:.0f}" for v in values)
