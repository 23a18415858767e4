"""The report in a real headless browser (Debian's ``chromium``, installed by ``make setup``): the page of the crafted
unsafe run (one violation of each property, tests/spark/journals.violations_run) loads without a console message,
plotly draws every figure, and the violation table lists each violation with its partition or group, interval,
processes, commands, epochs and generations."""

from __future__ import annotations

import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tests.spark.journals import A, B, C
from zkcoord.analysis import Verdict

pytestmark = pytest.mark.spark

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


def load(page: Path, profile: Path) -> tuple[str, list[str]]:
    """Open ``page`` in headless chromium, let its scripts run (a virtual-time budget: no wall-clock wait), and
    return the DOM they left and every console line (messages and uncaught errors alike: chromium logs them all as
    ``INFO:CONSOLE``, so any line fails the page: the report logs nothing)."""
    assert Path(CHROMIUM).exists(), "chromium is missing: make setup (scripts/setup-system.sh) installs it"
    args = [
        CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={profile}",
        "--enable-logging=stderr", "--v=0", "--virtual-time-budget=20000", "--dump-dom", page.as_uri(),
    ]  # fmt: skip
    done = subprocess.run(args, capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout, [line for line in done.stderr.splitlines() if ":CONSOLE" in line]


class Table(HTMLParser):
    """The rows (cell texts) of the table with id ``violations``."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self._inside = False
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table" and ("id", "violations") in attrs:
            self._inside = True
        elif self._inside and tag == "tr":
            self.rows.append([])
        elif self._inside and tag in ("td", "th"):
            self._cell = []
        elif self._inside and tag == "br" and self._cell is not None:
            self._cell.append(" | ")

    def handle_endtag(self, tag: str) -> None:
        if tag == "table":
            self._inside = False
        elif tag in ("td", "th") and self._cell is not None:
            self.rows[-1].append("".join(self._cell).strip())
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def test_the_harness_sees_a_page_error(tmp_path: Path) -> None:
    """The check below can fail: a page that throws is caught by it."""
    page = tmp_path / "bad.html"
    page.write_text('<!doctype html><p id="x">before</p><script>throw new Error("boom")</script>')
    dom, console = load(page, tmp_path / "profile")
    assert 'id="x"' in dom
    assert any("Uncaught Error: boom" in line for line in console), console


def test_the_unsafe_runs_report_loads_cleanly_and_shows_each_violation(
    analysed_runs: tuple[Path, Verdict], tmp_path: Path
) -> None:
    base, verdict = analysed_runs
    page = base / "out" / "report.html"
    dom, console = load(page, tmp_path / "profile")
    assert console == [], console
    text = page.read_text()
    assert not re.search(r"<script[^>]+src=|<link[^>]+href=", text), "the page fetches something"  # plotly.js inline
    # plotly drew every figure: 3 per run, and one zoom per violation row
    table = Table()
    table.feed(dom)
    header, *rows = table.rows
    assert header[:9] == ["run", "property", "partition or group", "interval (since the run's first event)",
                          "processes", "commands", "epochs", "generations", "what"]  # fmt: skip
    drawn = len(re.findall(r'class="[^"]*js-plotly-plot', dom))
    assert drawn == 3 * len(verdict.runs) + len(rows), drawn
    assert all(row[0] == "violations" for row in rows), "the clean and damaged runs have no violation"
    by_prop: dict[str, list[list[str]]] = {}
    for row in rows:
        by_prop.setdefault(row[1].split()[0], []).append(row)
    assert sorted(by_prop) == ["S1", "S2", "S3", "S4", "S5"]
    [deposed] = by_prop["S1"]
    assert deposed[2] == "g" and "broker-1" in deposed[4] and A in deposed[4] and deposed[6] == "1, 2", deposed
    overlap = next(r for r in by_prop["S2"] if "two owners" in r[1])
    assert overlap[2] == "g t-0" and A in overlap[4] and C in overlap[4], overlap
    assert overlap[3] == "0.580 .. 0.650 s (70 ms)", overlap  # seconds since the run's first event (at 1000 ms)
    assert "cmd-1-2" in overlap[5] and overlap[6] == "1" and overlap[7] == "1", overlap
    assert any("outside ownership" in r[1] and C in r[4] and "100..109" in r[3] for r in by_prop["S2"])
    # S3: from A's delivery just below the gap (at 1650) to its next one above it (1660), both under the interval
    # generation 2's start-fetcher granted; A's commit past the gap is named
    [lost] = by_prop["S3"]
    assert (lost[2], lost[3]) == ("g t-0", "0.650 .. 0.660 s (10 ms); offsets 120..129"), lost
    assert (lost[4], lost[5], lost[6], lost[7]) == (A, "cmd-1-2", "1", "1"), lost
    assert "committed 150" in lost[8], lost
    # S4: from B's first delivery of 95..99 (at 1600) to its second (1650)
    [duplicated] = by_prop["S4"]
    assert (duplicated[2], duplicated[3]) == ("g t-1", "0.600 .. 0.650 s (50 ms); offsets 95..99"), duplicated
    assert (duplicated[4], duplicated[5], duplicated[6], duplicated[7]) == (B, "cmd-1-2", "1", "1"), duplicated
    [stale_a, stale_b] = by_prop["S5"]
    assert (A in stale_a[4], "cmd-1-2" in stale_a[5], stale_a[6], stale_a[7]) == (True, True, "1, 2", "2, 3")
    assert (B in stale_b[4], stale_b[6], stale_b[7]) == (True, "1", "3, 4"), stale_b
    # the ownership timeline flags the overlapping lane and draws the overlap
    assert "\u26a0 g t-0" in dom and "overlap (S2)" in dom
