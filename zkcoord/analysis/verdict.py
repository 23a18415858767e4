"""The verdict of an analysis: per run, each safety property with its count and PASS/FAIL, plus what was skipped.

``S3-risk`` stands beside S3: S3 counts the records never processed (the loss), S3-risk the offsets a consumer with
auto-commit off committed before its application had processed them (the cause: a loss as soon as that consumer
dies before finishing them and nobody processes them again).  It fails a run as any property does.

Plain dataclasses (no Spark types), so :mod:`zkcoord.cli.demo_cmd` and tests can use a verdict without Spark.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

PROPERTIES: dict[str, str] = {
    "S1": "one coordinator acts",
    "S2": "no double ownership",
    "S3": "no loss",
    "S3-risk": "nothing committed unprocessed",
    "S4": "no clean-rebalance duplicates",
    "S5": "no stale command applied",
    "S8": "exactly-once state",
}


def judged_on_label(on_processed: int, on_consumed: int) -> str:
    """What S3 and S4 of a run were judged on, from how many groups were judged on each kind of range:
    ``processed`` (every group journals ``records.processed``), ``consumed`` (none does: ``records.consumed``),
    ``processed+consumed`` (some do), ``-`` (no group)."""
    kinds = [name for name, count in (("processed", on_processed), ("consumed", on_consumed)) if count]
    return "+".join(kinds) or "-"


@dataclass(frozen=True)
class PropertyResult:
    """One safety property of one run: ``count`` violations (0 passes) and the numbers behind it."""

    key: str
    title: str
    count: int
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.count == 0


@dataclass(frozen=True)
class ReadCounts:
    """What the reader used and skipped (docs/journal.md "Durability and damage")."""

    files: int
    lines: int
    events: int
    truncated: int = 0
    malformed: int = 0
    newer_schema: int = 0
    unknown_event: int = 0
    incomplete: int = 0
    seq_gaps: int = 0
    unknown_types: dict[str, int] = field(default_factory=dict)

    @property
    def skipped(self) -> int:
        return self.truncated + self.malformed + self.newer_schema + self.unknown_event + self.incomplete

    @property
    def unusable(self) -> int:
        """Lines of a type the checks use that could not be used: malformed (wrong JSON, a core field missing, a field
        of the wrong type), incomplete range events, lines of a newer schema.  Any of them may hide a violation, so a
        run with them cannot PASS (see :attr:`RunVerdict.status`).  A torn last line (a process killed mid-write)
        and an unknown event type (a newer writer's addition) are expected and do not count."""
        return self.malformed + self.incomplete + self.newer_schema

    def summary(self) -> str:
        """``"3 skipped: 1 truncated, 2 unknown_event"``, or ``"none skipped"``."""
        parts = [
            f"{n} {name}"
            for name, n in (
                ("truncated", self.truncated),
                ("malformed", self.malformed),
                ("newer_schema", self.newer_schema),
                ("unknown_event", self.unknown_event),
                ("incomplete", self.incomplete),
            )
            if n
        ]
        return f"{self.skipped} skipped: {', '.join(parts)}" if parts else "none skipped"


@dataclass(frozen=True)
class RunVerdict:
    """The verdict of one run directory."""

    run: str
    journal: str
    read: ReadCounts
    properties: tuple[PropertyResult, ...]
    #: rebalance statistics: count, completed, failed, latency_ms/stw_ms p50, p95, max
    rebalances: dict[str, Any] = field(default_factory=dict)
    faults: int = 0

    @property
    def ok(self) -> bool:
        """PASS: every property holds on evidence that is complete (no unusable line)."""
        return self.status == "PASS"

    @property
    def status(self) -> str:
        """``FAIL`` if a property is violated; else ``INCONCLUSIVE`` if lines could not be used
        (:attr:`ReadCounts.unusable`: the evidence is incomplete, a violation may hide in them) or the run judged no
        record (:attr:`judged_nothing`); else ``PASS``."""
        if not all(p.ok for p in self.properties):
            return "FAIL"
        return "INCONCLUSIVE" if self.read.unusable or self.judged_nothing else "PASS"

    @property
    def judged_nothing(self) -> bool:
        """No produced record reached a subscribed group (S3's ``expected`` is 0) and no consistent region's state was
        judged (S8 n/a): S2 to S4 then hold on no evidence, and a run whose producers never produced (a seed that
        started on an overloaded machine) would otherwise PASS.  A verdict without S3's figures (built by hand) is
        not judged on this."""
        s3 = [p for p in self.properties if p.key == "S3"]
        s8 = [p for p in self.properties if p.key == "S8"]
        # a region's records are judged by S8, against the records its producers journalled
        region = bool(s8) and s8[0].details.get("applicable") is True and bool(s8[0].details.get("records_journalled"))
        return bool(s3) and s3[0].details.get("expected") == 0 and not region

    @property
    def judged_on(self) -> str:
        """The records S3 and S4 were judged on (:func:`judged_on_label`); ``-`` without an S3 result."""
        s3 = [p for p in self.properties if p.key == "S3"]
        return str(s3[0].details.get("judged_on", "-")) if s3 else "-"

    def cell(self, p: PropertyResult) -> str:
        """A property's table cell: ``3 FAIL``, ``0 PASS``, or ``0 INCONCLUSIVE`` when the run is inconclusive;
        ``n/a`` for S8 in a run without a consistent region."""
        if p.details.get("applicable") is False:
            return "n/a"
        if not p.ok:
            return f"{p.count} FAIL"
        return f"{p.count} {'INCONCLUSIVE' if self.read.unusable or self.judged_nothing else 'PASS'}"

    def at_risk_note(self) -> str | None:
        """One line on the offsets committed before they were processed (S3-risk), naming the first range; None
        when there are none."""
        risk = [p for p in self.properties if p.key == "S3-risk" and p.count]
        if not risk:
            return None
        shown = risk[0].details.get("examples") or [{}]
        first = shown[0]
        where = (
            f", first: {first['group']} {first['topic']}-{first['partition']} {first['first']}..{first['last']} "
            f"by consumer {first['consumer']}"
            if first
            else ""
        )
        return f"S3 at risk in {self.run}: {risk[0].count} offsets committed unprocessed{where}"

    def property(self, key: str) -> PropertyResult:
        for p in self.properties:
            if p.key == key:
                return p
        raise KeyError(key)


@dataclass(frozen=True)
class Verdict:
    """The verdict of one analysis (one or more runs).  ``ok`` when every property of every run holds."""

    runs: tuple[RunVerdict, ...]
    out_dir: str
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.runs)

    @property
    def status(self) -> str:
        """``PASS`` if every run passes; else ``FAIL`` if any run fails; else ``INCONCLUSIVE``."""
        statuses = {r.status for r in self.runs}
        return "PASS" if statuses <= {"PASS"} else "FAIL" if "FAIL" in statuses else "INCONCLUSIVE"

    def run_ok(self, name: str) -> bool:
        """Whether every property of run ``name`` holds (:meth:`run` raises KeyError for an unknown name)."""
        return self.run(name).ok

    def run(self, name: str) -> RunVerdict:
        for r in self.runs:
            if r.run == name:
                return r
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "ok": self.ok,
            "status": self.status,
            "out_dir": self.out_dir,
            "seconds": round(self.seconds, 3),
            "runs": [],
        }
        for r in self.runs:
            out["runs"].append(
                {
                    "run": r.run,
                    "ok": r.ok,
                    "status": r.status,
                    "journal": r.journal,
                    "properties": {
                        p.key: {"title": p.title, "count": p.count, "ok": p.ok, **p.details} for p in r.properties
                    },
                    "read": {**asdict(r.read), "skipped": r.read.skipped, "unusable": r.read.unusable},
                    "rebalances": r.rebalances,
                    "faults": r.faults,
                }
            )
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True, default=str)

    def table(self) -> str:
        """The verdict as a text table: one row per property, one column per run."""
        header = ["property", *[r.run for r in self.runs]]
        rows = []
        for key, title in PROPERTIES.items():
            rows.append([f"{key} {title}", *[r.cell(r.property(key)) for r in self.runs]])
        rows.append(["S3, S4 judged on records", *[r.judged_on for r in self.runs]])
        rows.append(["rebalances (completed/all)", *[_rebalance_cell(r) for r in self.runs]])
        rows.append(["latency p50/p95/max ms", *[_percentiles(r.rebalances, "latency_ms") for r in self.runs]])
        rows.append(["stop-the-world p50/p95/max ms", *[_percentiles(r.rebalances, "stw_ms") for r in self.runs]])
        rows.append(["faults injected", *[str(r.faults) for r in self.runs]])
        rows.append(["journal lines (skipped)", *[f"{r.read.lines} ({r.read.skipped})" for r in self.runs]])
        rows.append(["unusable lines", *[str(r.read.unusable) for r in self.runs]])
        rows.append(["verdict", *[r.status for r in self.runs]])
        widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
        lines = [
            "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in [header, *rows]
        ]
        lines.insert(1, "  ".join("-" * w for w in widths))
        notes = [note for r in self.runs if (note := r.at_risk_note()) is not None]
        return "\n".join([*lines, "", *notes] if notes else lines)


def _rebalance_cell(r: RunVerdict) -> str:
    return f"{r.rebalances.get('completed', 0)}/{r.rebalances.get('attempts', 0)}"


def _percentiles(stats: dict[str, Any], name: str) -> str:
    values = [stats.get(f"{name}_{q}") for q in ("p50", "p95", "max")]
    if all(v is None for v in values):
        return "-"
    return "/".join("-" if v is None else f"{v:.0f}" for v in values)
