"""``zkcoord analyze``: the Spark pipeline over one or more runs' journals (see :mod:`zkcoord.analysis`)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import click

from zkcoord.analysis import AnalysisError, run_analysis


@click.command()
@click.argument("run_dirs", nargs=-1, type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option(
    "--bench",
    "bench_file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Tabulate and plot a 'zkcoord bench' JSON instead (OUT/bench.html; no Spark).",
)
@click.option(
    "--master",
    default=None,
    metavar="URL",
    help="Spark master: local[*], local[N], spark://HOST:PORT, yarn.  [default: local[*], or spark-submit's]",
)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where tables, verdict.json and report.html go.  [default: RUN_DIR/analysis for one run, ./analysis]",
)
@click.option("--json", "as_json", is_flag=True, help="Print the verdict as JSON instead of a table.")
@click.option("--no-report", is_flag=True, help="Skip the HTML report and its plots.")
@click.option("-q", "--quiet", is_flag=True, help="No progress lines on stderr.")
def analyze(
    run_dirs: tuple[Path, ...],
    bench_file: Path | None,
    master: str | None,
    out_dir: Path | None,
    as_json: bool,
    no_report: bool,
    quiet: bool,
) -> None:
    """Read the journals of RUN_DIR... and judge S1-S5 (and S3-risk: offsets committed before they were processed,
    by consumers with auto-commit off; S8: a consistent region's checkpointed state against every record produced,
    n/a without a region); exit 1 unless every run PASSes.

    A run FAILs if a property is violated, and is INCONCLUSIVE (not PASS) if journal lines it should have used are
    malformed (wrong JSON, a missing core field, a field of the wrong type), incomplete or of a newer schema, or if
    no produced record reached a subscribed group (nothing was judged).

    \b
    A RUN_DIR holds journal/*.jsonl (or is a journal directory itself, or holds run
    directories: a demo's "run directory" stands for its safe/ and unsafe/ runs).
    Several runs (say a safe run and its --unsafe contrast) are analysed separately
    and shown side by side.
    Writes OUT/tables/<table>/ (Parquet), OUT/verdict.json, OUT/report.html with PNG plots beside it.
    With --bench FILE: tabulates and plots a benchmark's JSON (any 'zkcoord bench' result) into OUT/bench.html.
    """
    if bench_file is not None:
        if run_dirs:
            raise click.UsageError("give RUN_DIR... or --bench FILE, not both")
        _bench(bench_file, out_dir or bench_file.parent / "bench-report", as_json)
        return
    if not run_dirs:
        raise click.UsageError("give at least one RUN_DIR (or --bench FILE)")
    if out_dir is None:
        first = run_dirs[0]
        base = first.parent if first.name == "journal" else first
        out_dir = base / "analysis" if len(run_dirs) == 1 else Path("analysis")

    def say(line: str) -> None:
        if not quiet:
            click.echo(f"analyze: {line}", err=True)

    try:
        verdict = run_analysis(
            [str(d) for d in run_dirs],
            out_dir,
            master if master is not None else _default_master(),
            report=not no_report,
            progress=say,
        )
    except AnalysisError as e:
        raise click.ClickException(str(e)) from e
    if as_json:
        click.echo(verdict.to_json())
    else:
        click.echo(verdict.table())
        click.echo(f"\nverdict: {verdict.status}; tables, verdict.json and report in {verdict.out_dir}")
        if any(r.read.unusable for r in verdict.runs):
            click.echo("(lines that could not be used may hide a violation: see 'unusable lines' and docs/analysis.md)")
        for r in verdict.runs:
            if r.judged_nothing:
                click.echo(f"({r.run}: no produced record reached a subscribed group: nothing was judged)")
    if not verdict.ok:
        raise SystemExit(1)


def _bench(path: Path, out: Path, as_json: bool) -> None:
    # Imported here: matplotlib is the spark extra's, and every other command (a broker in a container built without
    # the extra) loads this module.
    from zkcoord.analysis.bench_report import load_bench, render_bench, table  # noqa: PLC0415

    try:
        doc = load_bench(path)
        page = render_bench(doc, out)
    except AnalysisError as e:
        raise click.ClickException(str(e)) from e
    if as_json:
        if doc["benchmark"] == "rebalance":
            click.echo(
                json.dumps({"summary": doc["summary"], "comparison": doc.get("comparison"), "report": str(page)})
            )
        else:
            click.echo(json.dumps({"benchmark": doc["benchmark"], "table": table(doc), "report": str(page)}))
    else:
        click.echo(table(doc))
        click.echo(f"\nreport: {page}")


def _default_master() -> str | None:
    """``local[*]``, except under spark-submit, whose ``--master`` then applies."""
    return None if "PYSPARK_GATEWAY_PORT" in os.environ else "local[*]"
