"""Tables and plots of the benchmarks other than ``rebalance`` (``zkcoord analyze --bench FILE``).

One :class:`Report` per document: a text table (what ``zkcoord analyze --bench`` prints) and the plots beside it in
``bench.html``.  :data:`REPORTS` maps a document's ``benchmark`` to the function that makes its report and the
fields that function needs (checked by :func:`zkcoord.analysis.bench_report.load_bench` before it is called).
Pure functions of the document, on the caller's thread; matplotlib's object API only (no global pyplot state).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

Draw = Callable[[Path], None]


@dataclass
class Report:
    """A document's title, its table, and its plots (file stem, caption, how to draw it into a PNG)."""

    title: str
    table: str
    plots: list[tuple[str, str, Draw]] = field(default_factory=list)


def _num(value: Any, digits: int = 0) -> str:
    return "-" if not isinstance(value, int | float) else f"{value:,.{digits}f}"


def _barh(labels: list[str], values: list[float], xlabel: str, path: Path, goal: float | None = None) -> None:
    fig = Figure(figsize=(8, max(2.4, 0.28 * len(labels) + 0.8)))
    ax = fig.subplots()
    ax.barh(range(len(labels)), values, color="tab:blue")
    ax.set_yticks(range(len(labels)), labels, fontsize=7)
    ax.invert_yaxis()
    if goal is not None:
        ax.axvline(goal, linestyle="--", color="red", linewidth=1)
    ax.set_xlabel(xlabel)
    fig.tight_layout()
    fig.savefig(path, dpi=90, bbox_inches="tight")  # long operation names must not be clipped


def partlog_report(doc: dict[str, Any]) -> Report:
    rows = doc["rows"]
    lines = [f"{'operation':<42}{'value':>7}{'records':>10}{'MB/s':>9}{'ratio':>7}"]
    for r in rows:
        ratio = _num(r.get("ratio"), 2) if r.get("ratio") is not None else "(ceil)"
        lines.append(
            f"{r['operation']:<42}{r['value_bytes']:>7}{r['records']:>10}{_num(r.get('mb_per_s'), 1):>9}{ratio:>7}"
        )
    labels = [f"{r['operation'].strip()} ({r['value_bytes']} B)" for r in rows]

    def draw(path: Path) -> None:
        _barh(labels, [float(r.get("mb_per_s") or 0) for r in rows], "MB/s of log (ceilings: plain file I/O)", path)

    meta = doc.get("meta", {})
    title = f"Partition log: {meta.get('records', '?')} records per run, fastest of {meta.get('repeats', '?')}"
    return Report(title, "\n".join(lines), [("throughput", "MB/s of each operation and its ceiling", draw)])


def consumer_report(doc: dict[str, Any]) -> Report:
    rows = doc["throughput"]
    lines = [f"{'throughput':<46}{'threads':>8}{'max poll':>9}{'records/s':>12}{'ratio':>7}"]
    for r in rows:
        lines.append(
            f"{r['operation']:<46}{r['threads']:>8}{_num(r.get('max_poll')):>9}{_num(r.get('records_per_s')):>12}"
            f"{_num(r.get('ratio'), 2):>7}"
        )
    summary = doc["rebalance"]["summary"]
    lines += ["", f"{'rebalance':<12}{'consumers':>10}{'trials':>7}{'p50 ms':>9}{'p95 ms':>9}"]
    for r in summary:
        lat = r.get("latency_ms") or {}
        event = f"{r['kind']} ->{r['members_after']}"
        lines.append(f"{event:<12}{r['consumers']:>10}{r['trials']:>7}{_num(lat.get('p50'), 1):>9}"
                     f"{_num(lat.get('p95'), 1):>9}")  # fmt: skip

    def draw_throughput(path: Path) -> None:
        labels = [f"{r['operation'].strip()} x{r['threads']} {r.get('max_poll') or ''}" for r in rows]
        _barh(labels, [float(r.get("records_per_s") or 0) for r in rows], "records/s", path)

    def draw_rebalance(path: Path) -> None:
        labels = [f"{r['kind']} ->{r['members_after']}" for r in summary]
        _barh(labels, [float((r.get("latency_ms") or {}).get("p50") or 0) for r in summary], "p50 ms", path)

    meta = doc.get("meta", {})
    return Report(
        f"Consumer: {meta.get('records', '?')} records; rebalances of {meta.get('consumers', '?')} consumers",
        "\n".join(lines),
        [
            ("throughput", "Records/s of each way to read the topic", draw_throughput),
            ("rebalance", "Rebalance latency p50 (one process)", draw_rebalance),
        ],
    )


def analyze_table(rows: list[dict[str, Any]]) -> str:
    """The analyze benchmark's rows as text: beside the analysis, its floor (Spark reading, parsing and grouping the
    same journals by event type) and the Python pass, with the two ratios of the targets."""
    lines = [
        f"{'events':>11}{'MB':>7}{'JVM heap MB':>12}{'floor s':>9}{'spark s':>9}{'python s':>10}"
        f"{'spark/floor':>12}{'python/spark':>13}  agree  found"
    ]
    for r in rows:
        spark, floor, python = r.get("spark_s"), r.get("floor_s"), r.get("python_s")
        over_floor = spark / floor if isinstance(spark, int | float) and floor else None
        speedup = python / spark if isinstance(python, int | float) and spark else None
        lines.append(
            f"{r['events']:>11}{_num(r.get('journal_mb')):>7}{_num(r.get('jvm_heap_mb')):>12}{_num(floor, 1):>9}"
            f"{_num(spark, 1):>9}{_num(python, 1):>10}{_num(over_floor, 2):>12}{_num(speedup, 2):>13}"
            f"  {r.get('counts_agree')!s:>5}  {r.get('injected_found')!s:>5}"
        )
    return "\n".join(lines)


def analyze_report(doc: dict[str, Any]) -> Report:
    rows = doc["rows"]
    lines = [analyze_table(rows)]

    def draw(path: Path) -> None:
        labels = [f"{who} {r['events']:,}" for r in rows for who in ("floor", "spark", "python")]
        values = [float(r.get(f"{who}_s") or 0) for r in rows for who in ("floor", "spark", "python")]
        _barh(labels, values, "seconds", path)

    return Report(
        f"Analysis: Spark ({doc.get('master', '?')}) against one Python pass",
        "\n".join(lines),
        [("seconds", "Seconds per size: Spark's floor, the analysis and the Python pass", draw)],
    )


def scale_report(doc: dict[str, Any]) -> Report:
    runs: dict[str, Any] = doc["runs"]
    lines = [f"{'run':<22}{'failover':>9}{'expiry->elected':>16}{'->all examined':>15}{'->STABLE':>10}{'goal':>6}"]
    labels: list[str] = []
    values: list[float] = []
    goal = 10.0
    for key, run in runs.items():
        for i, f in enumerate(run.get("failovers", []), 1):
            goal = float(f.get("goal_s") or goal)
            lines.append(
                f"{key:<22}{i:>9}{_num(f.get('expiry_to_elected_s'), 2):>16}"
                f"{_num(f.get('expiry_to_all_examined_s'), 2):>15}{_num(f.get('expiry_to_stable_again_s'), 2):>10}"
                f"{'met' if f.get('goal_met') else 'MISS':>6}"
            )
            labels.append(f"{key} #{i}")
            values.append(float(f.get("expiry_to_stable_again_s") or 0))

    def draw(path: Path) -> None:
        _barh(labels, values, "s from the old session's expiry to every group STABLE (goal: dashed)", path, goal)

    return Report("Coordinator at scale: failovers", "\n".join(lines), [("failover", "Failover to STABLE", draw)])


def assignor_report(doc: dict[str, Any]) -> Report:
    anchor = doc.get("kafka_anchor_ms")
    lines = [f"{'case':<14}{'how':<21}{'members':>8}{'topics':>7}{'moved':>7}{'median ms':>11}{'min ms':>9}"]
    labels: list[str] = []
    values: list[float] = []
    for r in doc["rows"]:
        lines.append(
            f"{r.get('case', '?'):<14}{r.get('how', '?'):<21}{_num(r.get('members')):>8}{_num(r.get('topics')):>7}"
            f"{_num(r.get('moved')):>7}{_num(r.get('median_ms'), 3):>11}{_num(r.get('min_ms'), 3):>9}"
        )
        labels.append(f"{r.get('case')} {r.get('how')}, {r.get('topics')} topics")
        values.append(float(r.get("median_ms") or 0))
    if isinstance(anchor, int | float):
        lines.append(f"Kafka (Java, JMH) homogeneous join at 10 000 x 10, 100 topics: {anchor} ms")

    def draw(path: Path) -> None:
        goal = float(anchor) if isinstance(anchor, int | float) else None
        _barh(labels, values, "median ms per join (Kafka's Java figure: dashed)", path, goal)

    return Report("The uniform assignor: one join", "\n".join(lines), [("assignor", "One join", draw)])


def all_report(doc: dict[str, Any]) -> Report:
    lines = [f"{'benchmark':<12}{'exit':>6}{'seconds':>10}  document"]
    for r in doc["runs"]:
        lines.append(f"{r['benchmark']:<12}{r['exit']:>6}{_num(r.get('seconds'), 1):>10}  {r.get('out') or '-'}")
    return Report(f"zkcoord bench all --size {doc.get('size', '?')}", "\n".join(lines))


#: benchmark -> (its report, the top-level fields it needs)
REPORTS: dict[str, tuple[Callable[[dict[str, Any]], Report], tuple[str, ...]]] = {
    "partlog": (partlog_report, ("rows",)),
    "assignor": (assignor_report, ("rows",)),
    "consumer": (consumer_report, ("throughput", "rebalance")),
    "analyze": (analyze_report, ("rows",)),
    "scale": (scale_report, ("runs",)),
    "all": (all_report, ("runs",)),
}
