"""Plots of a ``zkcoord bench`` result (``zkcoord analyze --bench FILE``); for ``rebalance``, protocols side by side.

Every benchmark's document carries ``"schema": 1`` and ``"benchmark": NAME``.  The other benchmarks' tables and plots
are in :mod:`zkcoord.analysis.bench_tables`; this module reads any of them and draws the rebalance one.

The rebalance benchmark's JSON (``docs/benchmarks.md``, schema 1) is a few kilobytes, so this is plain Python and
matplotlib, no Spark.  Written to ``OUT``: ``bench.html`` with four PNG plots beside it --

* latency of every change (trigger until every member fetches its new share), per protocol and kind, with each
  group's p50 and the ZooKeeper floor (the watched write) times 10 for scale;
* stop-the-world time and the longest gap of one partition, per change;
* ZooKeeper requests per change (median), reads and writes;
* the coordinator's steps (p50 ms after the trigger, for ``coordinator``, ``incremental`` and ``consumer``) beside
  the zk-client protocol's.

Every protocol the document ran is plotted (``config.protocols``, in its order: any of ``coordinator``,
``incremental``, ``consumer``, ``zk-client``), each in its own colour.

:func:`load_bench` raises :class:`~zkcoord.analysis.errors.AnalysisError` with one line for anything that is not
such a document.  Runs on the caller's thread.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from zkcoord.analysis.bench_tables import REPORTS, Report
from zkcoord.analysis.errors import AnalysisError

SCHEMA = 1
KINDS = ("join", "leave")
PLOTS = (
    ("latency", "Latency of every change (dots), p50 (bars), 10x the ZooKeeper floor (dashed)"),
    ("stw", "Stop-the-world time and the longest gap of one partition, per change"),
    ("requests", "ZooKeeper requests per change (median): reads and writes"),
    ("steps", "When each step happened (p50 ms after the trigger)"),
)
#: a protocol's colour in the latency plot (any other protocol: grey)
COLOURS = {"coordinator": "tab:blue", "incremental": "tab:green", "consumer": "tab:purple", "zk-client": "tab:orange"}


def load_bench(path: Path) -> dict[str, Any]:
    """Read and check a benchmark document.  :raises AnalysisError: not one (the reason in one line)."""
    try:
        doc = json.loads(path.read_text())
    except OSError as e:
        raise AnalysisError(f"cannot read {path}: {e.strerror or e}") from e
    except json.JSONDecodeError as e:
        raise AnalysisError(f"{path} is not JSON: {e.msg} at line {e.lineno}") from e
    kinds = ("rebalance", *REPORTS)
    if not isinstance(doc, dict) or doc.get("benchmark") not in kinds:
        raise AnalysisError(f"{path} is not a 'zkcoord bench' result (one of: {', '.join(kinds)})")
    if doc.get("schema") != SCHEMA:
        raise AnalysisError(f"{path}: schema {doc.get('schema')!r} is not supported (this version reads {SCHEMA})")
    needed = REPORTS[doc["benchmark"]][1] if doc["benchmark"] in REPORTS else ("summary", "changes", "floor", "config")
    for key in needed:
        if key not in doc:
            raise AnalysisError(f"{path}: field {key!r} is missing")
    return doc


def _series(doc: dict[str, Any]) -> list[tuple[str, str]]:
    return [(p, k) for p in doc["config"].get("protocols", []) for k in KINDS]


def _width(doc: dict[str, Any]) -> float:
    """A figure's width in inches: 8 for up to two protocols, wider with more series side by side."""
    return max(8.0, 1.4 * len(_series(doc)))


def _plot_latency(doc: dict[str, Any], path: Path) -> None:
    fig = Figure(figsize=(_width(doc), 3.6))
    ax = fig.subplots()
    series = _series(doc)
    rows = {(r["protocol"], r["kind"]): r for r in doc["summary"]}
    for i, (protocol, kind) in enumerate(series):
        values = [
            c["latency_ms"] for c in doc["changes"] if (c["protocol"], c["kind"]) == (protocol, kind) and c["completed"]
        ]
        ax.scatter([i] * len(values), values, s=14, alpha=0.7, color=COLOURS.get(protocol, "tab:grey"))
        stats = rows.get((protocol, kind), {}).get("latency_ms") or {}
        if stats.get("p50") is not None:
            ax.bar(i, stats["p50"], width=0.6, alpha=0.25, color="grey")
    floor = (doc["floor"].get("quiet") or {}).get("watch_ms", {}).get("p50")
    if floor:
        ax.axhline(10 * floor, linestyle="--", color="red", linewidth=1)
    ax.set_xticks(range(len(series)), [f"{p}\n{k}" for p, k in series])
    ax.set_ylabel("ms")
    ax.set_yscale("log")
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def _plot_stw(doc: dict[str, Any], path: Path) -> None:
    fig = Figure(figsize=(_width(doc), 3.4))
    ax = fig.subplots()
    series = _series(doc)
    for i, key in enumerate(series):
        changes = [c for c in doc["changes"] if (c["protocol"], c["kind"]) == key and c["completed"]]
        ax.scatter([i - 0.12] * len(changes), [c["stw_ms"] for c in changes], s=14, color="tab:purple")
        ax.scatter([i + 0.12] * len(changes), [c["gap_ms"] for c in changes], s=14, color="tab:green")
    ax.set_xticks(range(len(series)), [f"{p}\n{k}" for p, k in series])
    ax.set_ylabel("ms (purple: stop-the-world, green: gap)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def _plot_requests(doc: dict[str, Any], path: Path) -> None:
    fig = Figure(figsize=(_width(doc), 3.4))
    ax = fig.subplots()
    rows = [r for key in _series(doc) for r in doc["summary"] if (r["protocol"], r["kind"]) == key]
    reads = [r.get("zk_reads_per_rebalance") or 0 for r in rows]
    writes = [r.get("zk_writes_per_rebalance") or 0 for r in rows]
    xs = range(len(rows))
    ax.bar(xs, reads, label="reads", color="tab:cyan")
    ax.bar(xs, writes, bottom=reads, label="writes", color="tab:red")
    ax.set_xticks(xs, [f"{r['protocol']}\n{r['kind']}" for r in rows])
    ax.set_ylabel("requests per change")
    ax.legend(loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def _plot_steps(doc: dict[str, Any], path: Path) -> None:
    rows = [r for key in _series(doc) for r in doc["summary"] if (r["protocol"], r["kind"]) == key]
    fig = Figure(figsize=(8, max(3.4, 0.7 * len(rows) + 0.6)))  # one row per protocol and kind
    ax = fig.subplots()
    for y, row in enumerate(rows):
        steps = {k: v for k, v in (row.get("breakdown_ms_p50") or {}).items() if v is not None}
        ax.scatter(list(steps.values()), [y] * len(steps), s=18)
        for name, ms in steps.items():
            ax.annotate(name, (ms, y), textcoords="offset points", xytext=(0, 6), fontsize=6, rotation=30)
    ax.set_yticks(range(len(rows)), [f"{r['protocol']} {r['kind']}" for r in rows])
    ax.set_xlabel("ms after the trigger")
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def table(doc: dict[str, Any]) -> str:
    """The document as a text table (rebalance: one line per protocol and kind)."""
    if doc["benchmark"] in REPORTS:
        return REPORTS[doc["benchmark"]][0](doc).table
    lines = [
        f"{'protocol':<12}{'change':<7}{'done':>7}{'p50 ms':>9}{'p95 ms':>9}{'STW p50':>9}{'ZK req':>8}{'x floor':>9}"
    ]
    for row in doc["summary"]:
        lat = row.get("latency_ms") or {}
        stw = row.get("stw_ms") or {}
        done = f"{row['completed']}/{row['changes']}"
        lines.append(
            f"{row['protocol']:<12}{row['kind']:<7}{done:>9}{_num(lat.get('p50')):>9}{_num(lat.get('p95')):>9}"
            f"{_num(stw.get('p50')):>9}{_num(row.get('zk_requests_per_rebalance')):>9}"
            f"{_num(row.get('x_floor_watch')):>9}"
        )
    return "\n".join(lines)


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def render_bench(doc: dict[str, Any], out: Path) -> Path:
    """Write ``out/bench.html`` and its PNGs; return the HTML's path.  :raises AnalysisError: ``out`` unwritable."""
    if doc["benchmark"] in REPORTS:
        return _render_report(REPORTS[doc["benchmark"]][0](doc), doc, out)
    try:
        out.mkdir(parents=True, exist_ok=True)
        for name, draw in (
            ("latency", _plot_latency),
            ("stw", _plot_stw),
            ("requests", _plot_requests),
            ("steps", _plot_steps),
        ):
            draw(doc, out / f"bench-{name}.png")
        page = out / "bench.html"
        page.write_text(_html(doc))
    except OSError as e:
        raise AnalysisError(f"cannot write the benchmark report to {out}: {e.strerror or e}") from e
    return page


def _html(doc: dict[str, Any]) -> str:
    cfg = doc["config"]
    floor = (doc["floor"].get("quiet") or {}).get("watch_ms", {}).get("p50")
    title = (
        f"Rebalance benchmark: {cfg.get('groups')} group(s) of {cfg.get('consumers')} consumers over "
        f"{cfg.get('partitions')} partitions, {cfg.get('trials')} trial(s)"
    )
    parts = [
        "<!doctype html><meta charset='utf-8'>",
        f"<title>{html.escape(title)}</title>",
        "<style>body{font-family:sans-serif;max-width:900px;margin:2em auto}"
        "pre{background:#f6f6f6;padding:1em}</style>",
        f"<h1>{html.escape(title)}</h1>",
        f"<p>ZooKeeper floor (a write seen through a watch, p50): {_num(floor) if floor else '-'} ms; "
        f"run at {html.escape(str(doc.get('meta', {}).get('when', '?')))}.</p>",
        f"<pre>{html.escape(table(doc))}</pre>",
    ]
    for name, caption in PLOTS:
        parts.append(f"<h2>{html.escape(caption)}</h2><img src='bench-{name}.png' alt='{name}'>")
    return "\n".join(parts) + "\n"


def _render_report(report: Report, doc: dict[str, Any], out: Path) -> Path:
    try:
        out.mkdir(parents=True, exist_ok=True)
        for name, _, draw in report.plots:
            draw(out / f"bench-{name}.png")
        when = doc.get("meta", {}).get("when") or doc.get("when") or "?"
        parts = [
            "<!doctype html><meta charset='utf-8'>",
            f"<title>{html.escape(report.title)}</title>",
            "<style>body{font-family:sans-serif;max-width:900px;margin:2em auto}"
            "pre{background:#f6f6f6;padding:1em}</style>",
            f"<h1>{html.escape(report.title)}</h1>",
            f"<p>zkcoord bench {html.escape(str(doc['benchmark']))}, run at {html.escape(str(when))}.</p>",
            f"<pre>{html.escape(report.table)}</pre>",
        ]
        for name, caption, _ in report.plots:
            parts.append(f"<h2>{html.escape(caption)}</h2><img src='bench-{name}.png' alt='{name}'>")
        page = out / "bench.html"
        page.write_text("\n".join(parts) + "\n")
    except OSError as e:
        raise AnalysisError(f"cannot write the benchmark report to {out}: {e.strerror or e}") from e
    return page
