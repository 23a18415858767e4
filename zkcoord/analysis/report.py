"""The static HTML report: the verdict table and, per run side by side, PNG plots rendered with matplotlib.

Plots per run: the ownership timeline per partition (who owned it when; overlaps in red, faults as dashed lines),
the distribution of rebalance latency and of stop-the-world time, and consumption progress and lag over time.
Spark only hands over small, aggregated data (:meth:`ReportData.collect`); rendering is plain Python.
"""

from __future__ import annotations

import functools
import html
import json
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from zkcoord.analysis.verdict import PROPERTIES, Verdict

#: Partitions drawn in an ownership timeline (the Parquet table holds them all).
MAX_LANES = 32
#: Rows of each kind collected per run for the plots.
MAX_ROWS = 20_000

PLOTS = (
    ("ownership", "Ownership timeline per partition (faults dashed, overlaps red)"),
    ("rebalances", "Rebalance latency and stop-the-world time"),
    ("progress", "Consumption progress and lag"),
)


@dataclass
class ReportData:
    """The rows the plots need, per run."""

    first_ts: dict[str, int] = field(default_factory=dict)
    intervals: dict[str, list[dict[str, Any]]] = field(default_factory=lambda: defaultdict(list))
    overlaps: dict[str, list[dict[str, Any]]] = field(default_factory=lambda: defaultdict(list))
    rebalances: dict[str, list[dict[str, Any]]] = field(default_factory=lambda: defaultdict(list))
    faults: dict[str, list[dict[str, Any]]] = field(default_factory=lambda: defaultdict(list))
    progress: dict[str, list[dict[str, Any]]] = field(default_factory=lambda: defaultdict(list))

    @classmethod
    def collect(cls, frames: dict[str, DataFrame], first_ts: dict[str, int]) -> ReportData:
        """Collect the plot rows in one Spark job.

        ``frames`` maps ``intervals``, ``overlaps``, ``rebalances``, ``faults``, ``progress`` to their tables.
        """
        data = cls(first_ts=dict(first_ts))
        limited = {
            "intervals": frames["intervals"].select(
                "run", "group", "topic", "partition", "consumer", "start_ts", "end_ts"
            ),
            "overlaps": frames["overlaps"],
            "rebalances": frames["rebalances"].select("run", "latency_ms", "stw_ms", "outcome"),
            "faults": frames["faults"],
            "progress": frames["progress"],
        }
        parts = []
        for kind, df in limited.items():
            rank = F.row_number().over(Window.partitionBy("run").orderBy(*df.columns))
            parts.append(
                df.withColumn("_n", rank)
                .where(F.col("_n") <= MAX_ROWS)
                .select(F.lit(kind).alias("kind"), "run", F.to_json(F.struct(*df.columns)).alias("row"))
            )
        # to_json leaves a null column out of its object: every row gets every column of its table back, None
        # where null (a consumer-protocol rebalance finished by a successor coordinator has no latency, say).
        columns = {kind: dict.fromkeys(df.columns) for kind, df in limited.items()}
        for row in functools.reduce(DataFrame.unionByName, parts).collect():
            target: dict[str, list[dict[str, Any]]] = getattr(data, row["kind"])
            target[row["run"]].append(columns[row["kind"]] | json.loads(row["row"]))
        for rows in data.progress.values():
            rows.sort(key=lambda r: r["bucket"])
        return data


def _slug(run: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", run) or "run"


def _seconds(ts: float, origin: int) -> float:
    return (ts - origin) / 1000.0


def _plot_ownership(data: ReportData, run: str, path: Path) -> None:
    origin = data.first_ts.get(run, 0)
    rows = data.intervals.get(run, [])
    lanes: dict[tuple[str, str, int], int] = {}
    for r in rows:
        key = (str(r["group"]), str(r["topic"]), int(r["partition"]))
        if key not in lanes and len(lanes) < MAX_LANES:
            lanes[key] = len(lanes)
    consumers = sorted({str(r["consumer"]) for r in rows})
    colours = {c: f"C{i % 10}" for i, c in enumerate(consumers)}
    fig = Figure(figsize=(8, max(2.5, 0.35 * len(lanes) + 1.5)), layout="constrained")
    ax = fig.subplots()
    for r in rows:
        lane = lanes.get((str(r["group"]), str(r["topic"]), int(r["partition"])))
        if lane is None:
            continue
        start = _seconds(r["start_ts"], origin)
        ax.broken_barh(
            [(start, max(_seconds(r["end_ts"], origin) - start, 0.001))],
            (lane - 0.4, 0.8),
            facecolors=colours[str(r["consumer"])],
            alpha=0.6,
        )
    for o in data.overlaps.get(run, []):
        lane = lanes.get((str(o["group"]), str(o["topic"]), int(o["partition"])))
        if lane is not None:
            start = _seconds(max(o["start_a"], o["start_b"]), origin)
            ax.broken_barh([(start, max(o["overlap_ms"] / 1000.0, 0.001))], (lane - 0.45, 0.9), facecolors="red")
    for f in data.faults.get(run, []):
        x = _seconds(f["ts"], origin)
        ax.axvline(x, color="black", linestyle="--", linewidth=0.8)
        ax.annotate(str(f["fault"]), (x, len(lanes) - 0.5), rotation=90, fontsize=6, va="top")
    ax.set_yticks(range(len(lanes)), [f"{g}/{t}-{p}" for (g, t, p) in lanes], fontsize=7)
    ax.set_xlabel("seconds since the run's first event")
    ax.set_ylim(-0.6, max(len(lanes), 1) - 0.4)
    if len(consumers) <= 12:
        for c in consumers:
            ax.plot([], [], color=colours[c], linewidth=6, label=c[-28:])
        if consumers:
            ax.legend(fontsize=6, loc="upper right")
    ax.set_title(f"{run}: ownership ({len(lanes)} partitions shown)", fontsize=9)
    fig.savefig(path, dpi=90)


def _plot_rebalances(data: ReportData, run: str, path: Path) -> None:
    rows = [r for r in data.rebalances.get(run, []) if r["outcome"] == "completed"]
    fig = Figure(figsize=(8, 3), layout="constrained")
    axes = fig.subplots(1, 2)
    for ax, column, label in zip(axes, ("latency_ms", "stw_ms"), ("latency (ms)", "stop-the-world (ms)"), strict=True):
        values = [float(r[column]) for r in rows if r[column] is not None]
        if values:
            ax.hist(values, bins=min(30, max(5, len(values) // 3)), color="C0")
        else:
            ax.text(0.5, 0.5, "no completed rebalance", ha="center", va="center", transform=ax.transAxes)
        ax.set_xlabel(label)
        ax.set_ylabel("rebalances")
    fig.suptitle(f"{run}: {len(rows)} completed rebalances", fontsize=9)
    fig.savefig(path, dpi=90)


def _plot_progress(data: ReportData, run: str, path: Path) -> None:
    origin = data.first_ts.get(run, 0)
    rows = data.progress.get(run, [])
    xs, produced, delivered, lag = [], [], [], []
    total_p = total_d = 0
    for r in rows:
        total_p += int(r["produced"])
        total_d += int(r["delivered"])
        xs.append(_seconds(r["bucket_ts"], origin))
        produced.append(total_p)
        delivered.append(total_d)
        lag.append(max(total_p - total_d, 0))
    fig = Figure(figsize=(8, 3), layout="constrained")
    ax, lag_ax = fig.subplots(1, 2)
    ax.plot(xs, produced, label="produced")
    ax.plot(xs, delivered, label="delivered (all groups)")
    ax.set_xlabel("seconds")
    ax.set_ylabel("records (cumulative)")
    ax.legend(fontsize=7)
    lag_ax.plot(xs, lag, color="C3")
    lag_ax.set_xlabel("seconds")
    lag_ax.set_ylabel("lag (produced - delivered)")
    for f in data.faults.get(run, []):
        for a in (ax, lag_ax):
            a.axvline(_seconds(f["ts"], origin), color="black", linestyle="--", linewidth=0.8)
    fig.suptitle(f"{run}: progress", fontsize=9)
    fig.savefig(path, dpi=90)


def render_report(out: Path, verdict: Verdict, data: ReportData) -> Path:
    """Write the PNGs and ``report.html`` into ``out``; return the HTML's path."""
    drawers = {"ownership": _plot_ownership, "rebalances": _plot_rebalances, "progress": _plot_progress}
    images: dict[str, dict[str, str]] = {}
    for r in verdict.runs:
        for kind, _title in PLOTS:
            name = f"{_slug(r.run)}-{kind}.png"
            drawers[kind](data, r.run, out / name)
            images.setdefault(kind, {})[r.run] = name
    path = out / "report.html"
    path.write_text(_html(verdict, images))
    return path


def _html(verdict: Verdict, images: dict[str, dict[str, str]]) -> str:
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
    sections = []
    for kind, title in PLOTS:
        figures = "".join(
            f'<figure><img src="{e(images[kind][run])}" alt="{e(run)} {e(kind)}">'
            f"<figcaption>{e(run)}</figcaption></figure>"
            for run in runs
        )
        sections.append(f'<h2>{e(title)}</h2><div class="runs" style="--n:{len(runs)}">{figures}</div>')
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>zkcoord analysis: {e(", ".join(runs))}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 1.5em; }}
table {{ border-collapse: collapse; }} th, td {{ border: 1px solid #ccc; padding: 0.3em 0.7em; text-align: left; }}
td.pass {{ background: #e6f4e6; }} td.fail {{ background: #f9dede; font-weight: bold; }}
.runs {{ display: grid; grid-template-columns: repeat(var(--n), 1fr); gap: 1em; }}
img {{ max-width: 100%; border: 1px solid #ddd; }} figcaption {{ font-size: 0.85em; color: #555; }}
</style></head><body>
<h1>zkcoord analysis</h1>
<p>Runs: {e(", ".join(runs))}. Verdict: <b>{verdict.status}</b>.
Tables (Parquet) are in <code>tables/</code>, the verdict in <code>verdict.json</code>;
definitions in docs/analysis.md.</p>
<table><tr><th>property</th>{head}</tr>
{"".join(body)}
</table>
{notes}
{"".join(sections)}
</body></html>
"""


def _triple(stats: dict[str, Any], name: str) -> str:
    values = [stats.get(f"{name}_{q}") for q in ("p50", "p95", "max")]
    return " / ".join("-" if v is None else f"{v:.0f}" for v in values)
