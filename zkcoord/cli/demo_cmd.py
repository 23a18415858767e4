"""``zkcoord demo``: show, under real faults, that rebalances are split-brain free, and what breaks unfenced."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from click.core import ParameterSource

from zkcoord.cli.common import echo_json
from zkcoord.errors import ConfigurationError, ZkCoordError
from zkcoord.testbed.scenario.cluster import Workload
from zkcoord.testbed.scenario.faults import FAULTS, STEPS
from zkcoord.testbed.scenario.nemesis import parse_seed, parse_seeds
from zkcoord.testbed.scenario.region import REGION_STEPS
from zkcoord.testbed.scenario.runner import NEMESES, SCENARIOS, RunConfig, RunResult, run_scenario
from zkcoord.testbed.scenario.strategy import STRATEGY_STEPS
from zkcoord.testbed.scenario.upgrade import UPGRADE_STEPS

if TYPE_CHECKING:
    from zkcoord.analysis import Verdict


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
    click.echo("\nFaults of the region scenario, in this order:")
    for kind, description in REGION_STEPS.items():
        click.echo(f"  {kind:<20} {description}")


@click.command()
@click.option("--scenario", type=click.Choice(sorted(SCENARIOS)), default="default", show_default=True)
@click.option(
    "--duration",
    type=click.FloatRange(5, 24 * 3600),
    default=40.0,
    show_default=True,
    help="Seconds of producing while faults are injected (per run).",
)
@click.option(
    "--nemesis",
    type=click.Choice(NEMESES),
    default="fixed",
    show_default=True,
    help="fixed: the scenario's faults one at a time; random: a schedule drawn from the seed over every fault kind, "
    "with random timing and two faults at once in some steps (written to <run>/nemesis.json).",
)
@click.option("--seed", "seed_text", default=None, metavar="N", help="Seed of the fault order or schedule [1].")
@click.option(
    "--seeds",
    "seeds_text",
    default=None,
    metavar="A..B",
    help="Run every seed from A to B (inclusive), each in <run-dir>/seed-N with its own verdict; print one summary "
    "line per seed and a total.  Exits 1 if a safe run of any seed breaks a property.",
)
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
@click.option(
    "--analysis/--no-analysis",
    default=True,
    show_default=True,
    help="Compute the verdict with Spark after the runs.  --no-analysis leaves the journals for a later "
    "`zkcoord analyze RUN-DIR` (several demos analysed together, or on a cluster): no verdict, and the exit status "
    "says only whether the runs could be carried out.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the verdict as JSON.")
@click.option("--list", "list_only", is_flag=True, help="Describe the scenarios and faults, then exit.")
def demo(
    scenario: str,
    duration: float,
    nemesis: str,
    seed_text: str | None,
    seeds_text: str | None,
    ensemble: bool,
    zk: str | None,
    run_dir: Path | None,
    unsafe: bool,
    contrast: bool,
    session_timeout: float,
    rebalance: str,
    rate: int,
    master: str,
    analysis: bool,
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
    if seed_text is not None and seeds_text is not None:
        raise ConfigurationError("give --seed N or --seeds A..B, not both")
    if not analysis and click.get_current_context().get_parameter_source("master") is ParameterSource.COMMANDLINE:
        raise ConfigurationError(
            "--master is the Spark master of the analysis: give it to zkcoord analyze, not with --no-analysis"
        )
    seeds = parse_seeds(seeds_text) if seeds_text is not None else None
    seed = parse_seed(seed_text) if seed_text is not None else 1
    logging.getLogger("kazoo").setLevel(logging.ERROR)
    base = run_dir or Path("runs") / time.strftime("%Y%m%d-%H%M%S")
    variants = [True] if unsafe else ([False, True] if contrast else [False])
    workload = Workload(session_timeout_s=session_timeout, rate=rate, rebalance=rebalance)

    def config(seed: int, into: Path, unsafe_variant: bool) -> RunConfig:
        return RunConfig(
            run_dir=into / ("unsafe" if unsafe_variant else "safe"),
            scenario=scenario,
            duration_s=duration,
            seed=seed,
            ensemble=ensemble,
            zk=zk,
            unsafe=unsafe_variant,
            workload=workload,
            nemesis=nemesis,
        )

    # What a run's configuration refuses (the random nemesis with a --scenario, say) is refused here, once, before
    # anything starts: inside --seeds' loop it would be an ERROR line per seed.
    config(seeds[0] if seeds is not None else seed, base, variants[0])

    def one(seed: int, into: Path) -> tuple[list[RunResult], Verdict | None]:
        results: list[RunResult] = []
        for unsafe_variant in variants:
            run = config(seed, into, unsafe_variant)
            results.append(run_scenario(run, say=lambda line: click.echo(line, err=True)))
        if not analysis:
            return results, None
        click.echo("computing the verdict from the journals (Spark)...", err=True)
        # Imported here: PySpark takes a second to import, which no other command should pay for.
        from zkcoord.analysis import run_analysis  # noqa: PLC0415

        verdict = run_analysis(
            [r.run_dir for r in results],
            into / "analysis",
            master=master,
            progress=lambda line: click.echo(line, err=True),
        )
        return results, verdict

    if seeds is not None:
        _many(seeds, base, one, as_json)
        return
    results, verdict = one(seed, base)
    if as_json:
        echo_json({"runs": [r.to_json() for r in results], "verdict": verdict.to_dict() if verdict else None})
    else:
        _print(results, verdict, base)
    if verdict is None:
        return
    safe_failed = any(not verdict.run_ok(r.run_dir.name) for r in results if not r.unsafe)
    unsafe_runs = [r for r in results if r.unsafe]
    # The contrast "shows a violation" only when a property FAILs: an INCONCLUSIVE run (lines it could not use)
    # shows nothing either way.
    contrast_failed = [verdict.run(r.run_dir.name).status == "FAIL" for r in unsafe_runs]
    if unsafe_runs and not all(contrast_failed):
        click.echo("note: the unsafe contrast broke no property this time (try another --seed)", err=True)
    if safe_failed or (unsafe and not all(contrast_failed)):
        raise SystemExit(1)


def _print(results: list[RunResult], verdict: Verdict | None, base: Path) -> None:
    """The runs, one line each with their problems, then the verdict's table (or where to analyse them)."""
    for r in results:
        faults = ", ".join(f"{k}={v}" for k, v in sorted(r.faults.items()) if not k.startswith("point:"))
        click.echo(
            f"{r.run_dir.name}: {r.seconds:.0f}s, produced {r.produced}, consumed {r.consumed}, "
            f"rebalances {r.rebalances}, faults: {faults}"
        )
        for problem in r.problems:
            click.echo(f"  problem: {problem}")
        for skipped in r.skipped:
            click.echo(f"  skipped (nothing to inject into): {skipped}")
    click.echo("")
    if verdict is None:
        click.echo(f"run directory: {base}  (not analysed: zkcoord analyze {base})")
    else:
        click.echo(verdict.table())
        click.echo(f"\nrun directory: {base}  (report: {base / 'analysis' / 'report.html'})")


def _many(
    seeds: range, base: Path, one: Callable[[int, Path], tuple[list[RunResult], Verdict | None]], as_json: bool
) -> None:
    """Run every seed of ``seeds`` into ``base/seed-N``; print a summary line per seed as it ends and a total; write
    ``base/seeds.json``.  A seed whose run could not be carried out (a process that did not start in time, Spark
    failing: a :class:`ZkCoordError`) is reported as ``ERROR`` with the reason and the next seed runs.  Exits 1 if a
    safe run of any seed is not PASS, or a seed ended in an error."""
    lines: list[dict[str, Any]] = []
    base.mkdir(parents=True, exist_ok=True)  # seeds.json is written there even when the first seed ends in an error
    for seed in seeds:
        try:
            results, verdict = one(seed, base / f"seed-{seed}")
        except ZkCoordError as e:
            entry: dict[str, Any] = {"seed": seed, "runs": {}, "error": str(e), "line": f"seed {seed}: ERROR {e}"}
        else:
            entry = seed_summary(seed, results, verdict)
        lines.append(entry)
        if not as_json:
            click.echo(entry["line"])
        (base / "seeds.json").write_text(json.dumps(lines, indent=2))
    total = seeds_total(lines)
    if as_json:
        echo_json({"seeds": lines, "total": total["line"]})
    else:
        click.echo(total["line"])
    if total["line"].endswith("not analysed"):
        click.echo(f"analyse a seed's runs with: zkcoord analyze {base}/seed-N", err=True)
    if total["safe_failed"]:
        raise SystemExit(1)


def seed_summary(seed: int, results: list[RunResult], verdict: Verdict | None) -> dict[str, Any]:
    """One seed's runs in one line: each run's status and its broken properties, the faults, the problems.  Without
    a verdict (``--no-analysis``) each run's status is ``not analysed``."""
    parts = []
    entry: dict[str, Any] = {"seed": seed, "runs": {}}
    for r in results:
        if verdict is None:
            entry["runs"][r.run_dir.name] = {
                **r.nemesis, "status": "not analysed", "broken": {}, "problems": r.problems, "skipped": r.skipped
            }  # fmt: skip
            parts.append(f"{r.run_dir.name} not analysed")
            continue
        run = verdict.run(r.run_dir.name)
        broken = {p.key: p.count for p in run.properties if not p.ok}
        entry["runs"][run.run] = {
            **r.nemesis, "status": run.status, "broken": broken, "problems": r.problems, "skipped": r.skipped
        }  # fmt: skip
        shown = f" ({', '.join(f'{k} {n}' for k, n in broken.items())})" if broken else ""
        parts.append(f"{run.run} {run.status}{shown}")
    first = results[0]
    if first.nemesis:
        n = first.nemesis
        parts.append(f"{n['faults']} faults, {n['overlapped']}/{n['overlapping']} two-at-once steps overlapped")
    else:
        parts.append(f"{sum(v for k, v in first.faults.items() if not k.startswith('point:'))} fault events")
    skipped = [f"{r.run_dir.name} {len(r.skipped)}" for r in results if r.skipped]
    if skipped:  # drawn (or scheduled) but not injected: not counted as overlapping either
        parts.append(f"skipped: {', '.join(skipped)}")
    problems = sum(len(r.problems) for r in results)
    parts.append(f"{problems} problems" if problems else "no problems")
    parts.append(f"{sum(r.seconds for r in results):.0f}s")
    entry["line"] = f"seed {seed}: " + "; ".join(parts)
    return entry


def seeds_total(lines: list[dict[str, Any]]) -> dict[str, Any]:
    """The total over the seeds' summaries: safe runs PASS, contrasts FAIL."""
    judged: dict[str, list[str]] = {"safe": [], "unsafe": []}
    for e in lines:
        for name, statuses in judged.items():
            if name in e["runs"] and e["runs"][name]["status"] != "not analysed":
                statuses.append(e["runs"][name]["status"])
    safe, unsafe = judged["safe"], judged["unsafe"]
    errors = sum("error" in e for e in lines)
    parts = [f"total: {len(lines)} seeds" + (f" ({errors} ended in an error)" if errors else "")]
    if safe:
        parts.append(f"safe runs PASS {safe.count('PASS')}/{len(safe)}")
    if unsafe:
        parts.append(f"unfenced contrast FAIL {unsafe.count('FAIL')}/{len(unsafe)}")
    if lines and not safe and not unsafe and not errors:
        parts.append("not analysed")
    return {"line": "; ".join(parts), "safe_failed": any(s != "PASS" for s in safe) or errors > 0}
