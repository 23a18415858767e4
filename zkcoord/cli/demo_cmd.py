"""``zkcoord demo``: show, under real faults, that rebalances are split-brain free, and what breaks unfenced."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import click

from zkcoord.cli.common import echo_json
from zkcoord.testbed.scenario.cluster import Workload
from zkcoord.testbed.scenario.faults import FAULTS, STEPS
from zkcoord.testbed.scenario.runner import SCENARIOS, RunConfig, RunResult, run_scenario
from zkcoord.testbed.scenario.strategy import STRATEGY_STEPS
from zkcoord.testbed.scenario.upgrade import UPGRADE_STEPS


def _list() -> None:
    click.echo("Scenarios (zkcoord demo --scenario NAME):")
    for s in SCENARIOS.values():
        click.echo(f"  {s.name:<16} {s.description}")
    click.echo("\nFaults, each injected for real:")
    for f in FAULTS.values():
        click.echo(f"  {f.kind:<19} {f.description}")
    click.echo("\nSteps of the migration scenario:")
    for f in STEPS.values():
        click.echo(f"  {f.kind:<19} {f.description}")
    click.echo("\nSteps of the kip848-migration scenario:")
    for f in UPGRADE_STEPS.values():
        click.echo(f"  {f.kind:<19} {f.description}")
    click.echo("\nSteps of the classic-switch scenario:")
    for f in STRATEGY_STEPS.values():
        click.echo(f"  {f.kind:<19} {f.description}")


@click.command()
@click.option("--scenario", type=click.Choice(sorted(SCENARIOS)), default="default", show_default=True)
@click.option(
    "--duration",
    type=click.FloatRange(5, 24 * 3600),
    default=40.0,
    show_default=True,
    help="Seconds of producing while faults are injected (per run).",
)
@click.option("--seed", type=int, default=1, show_default=True, help="Seed of the fault order.")
@click.option("--ensemble", is_flag=True, help="Run a 3-server ZooKeeper ensemble (its leader is killed).")
@click.option("--zk", default=None, metavar="HOST:PORT[/chroot]", help="Use an existing ZooKeeper.")
@click.option(
    "--run-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where journals, logs, data and the analysis go [runs/<timestamp>].",
)
@click.option("--unsafe", is_flag=True, help="Only the contrast: fences off (no epoch or stale check, no lease).")
@click.option(
    "--contrast/--no-contrast",
    default=True,
    show_default=True,
    help="After the safe run, run the same scenario with the fences off.",
)
@click.option("--session-timeout", type=click.FloatRange(1, 60), default=3.0, show_default=True)
@click.option(
    "--rebalance",
    type=click.Choice(["eager", "incremental"]),
    default="eager",
    show_default=True,
    help="How the consumers ask to be rebalanced (incremental: only what changes owner moves).",
)
@click.option("--rate", type=click.IntRange(1, 100_000), default=200, show_default=True, help="Records/s per topic.")
@click.option("--master", default="local[2]", show_default=True, help="Spark master for the verdict.")
@click.option("--json", "as_json", is_flag=True, help="Print the verdict as JSON.")
@click.option("--list", "list_only", is_flag=True, help="Describe the scenarios and faults, then exit.")
def demo(
    scenario: str,
    duration: float,
    seed: int,
    ensemble: bool,
    zk: str | None,
    run_dir: Path | None,
    unsafe: bool,
    contrast: bool,
    session_timeout: float,
    rebalance: str,
    rate: int,
    master: str,
    as_json: bool,
    list_only: bool,
) -> None:
    """Run a scenario with real faults and show the verdict: no partition owned twice, nothing lost.

    By default runs the scenario with the fences on, then the same scenario with them off (the contrast), and
    prints both verdicts side by side.  Exits 1 when the safe run breaks a property (with --unsafe alone: when it
    breaks one, as it is expected to).
    """
    if list_only:
        _list()
        return
    logging.getLogger("kazoo").setLevel(logging.ERROR)
    base = run_dir or Path("runs") / time.strftime("%Y%m%d-%H%M%S")
    variants = [True] if unsafe else ([False, True] if contrast else [False])
    workload = Workload(session_timeout_s=session_timeout, rate=rate, rebalance=rebalance)
    results: list[RunResult] = []
    for unsafe_variant in variants:
        label = "unsafe" if unsafe_variant else "safe"
        config = RunConfig(
            run_dir=base / label,
            scenario=scenario,
            duration_s=duration,
            seed=seed,
            ensemble=ensemble,
            zk=zk,
            unsafe=unsafe_variant,
            workload=workload,
        )
        results.append(run_scenario(config, say=lambda line: click.echo(line, err=True)))
    click.echo("computing the verdict from the journals (Spark)...", err=True)
    # Imported here: PySpark takes a second to import, which no other command should pay for.
    from zkcoord.analysis import run_analysis  # noqa: PLC0415

    verdict = run_analysis(
        [r.run_dir for r in results], base / "analysis", master=master, progress=lambda line: click.echo(line, err=True)
    )
    if as_json:
        echo_json({"runs": [r.to_json() for r in results], "verdict": verdict.to_dict()})
    else:
        for r in results:
            faults = ", ".join(f"{k}={v}" for k, v in sorted(r.faults.items()) if not k.startswith("point:"))
            click.echo(
                f"{r.run_dir.name}: {r.seconds:.0f}s, produced {r.produced}, consumed {r.consumed}, "
                f"rebalances {r.rebalances}, faults: {faults}"
            )
            for problem in r.problems:
                click.echo(f"  problem: {problem}")
        click.echo("")
        click.echo(verdict.table())
        click.echo(f"\nrun directory: {base}  (report: {base / 'analysis' / 'report.html'})")
    safe_failed = any(not verdict.run_ok(r.run_dir.name) for r in results if not r.unsafe)
    unsafe_runs = [r for r in results if r.unsafe]
    # The contrast "shows a violation" only when a property FAILs: an INCONCLUSIVE run (lines it could not use)
    # shows nothing either way.
    contrast_failed = [verdict.run(r.run_dir.name).status == "FAIL" for r in unsafe_runs]
    if unsafe_runs and not all(contrast_failed):
        click.echo("note: the unsafe contrast broke no property this time (try another --seed)", err=True)
    if safe_failed or (unsafe and not all(contrast_failed)):
        raise SystemExit(1)
