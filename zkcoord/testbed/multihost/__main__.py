"""``python -m zkcoord.testbed.multihost hosts|compose``: the multi-host scenario by hand (docs/deployment.md).

``hosts`` runs it on network namespaces made here (as ``tests/integration/test_multihost.py`` does); ``compose``
injects the same faults into the running Compose deployment (``make compose-up``) for ``--duration`` seconds, drains
and stops it, and prints the faults; then ``zkcoord analyze`` judges the volume's journal.  Both need root.
"""

from __future__ import annotations

from pathlib import Path

import click

from zkcoord.errors import ZkCoordError
from zkcoord.testbed.multihost.cluster import run_hosts
from zkcoord.testbed.multihost.compose import ComposeDeployment, run_compose


@click.group()
def main() -> None:
    """The multi-host scenario: partitions that drop packets between hosts."""


@main.command()
@click.option("--run-dir", type=click.Path(file_okay=False, path_type=Path), required=True)
@click.option("--seed", type=int, default=1, show_default=True)
def hosts(run_dir: Path, seed: int) -> None:
    """Every process on a network namespace of its own; the journal in RUN_DIR/journal."""
    try:
        result = run_hosts(run_dir, seed=seed)
    except ZkCoordError as e:
        raise click.ClickException(str(e)) from e
    click.echo(f"{len(result.done)} faults in {result.seconds:.0f} s; journal: {run_dir / 'journal'}")


@main.command()
@click.option("--project", default="zkcoord", show_default=True, help="The Compose project (scripts/compose.sh's).")
@click.option("--duration", type=click.FloatRange(10, 24 * 3600), default=600, show_default=True, help="Seconds.")
@click.option("--seed", type=int, default=1, show_default=True)
def compose(project: str, duration: float, seed: int) -> None:
    """Faults on the running Compose deployment, then drain and stop it."""
    try:
        deployment = ComposeDeployment(project)
        try:
            done = run_compose(deployment, duration, seed=seed)
        finally:
            deployment.close()
    except ZkCoordError as e:
        raise click.ClickException(str(e)) from e
    unsettled = [f for f in done if "did not settle" in f]
    skipped = [f for f in done if ": skipped: " in f]
    click.echo(
        f"{len(done)} faults, {len(skipped)} skipped, {len(unsettled)} unsettled; journal: {deployment.journal_dir}"
    )
    if unsettled:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
