"""``zkcoord demo``: the end-to-end run (see :mod:`zkcoord.tour`)."""

from __future__ import annotations

import time
from pathlib import Path

import click

from zkcoord.tour import run_tour


@click.command()
@click.option(
    "--run-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where the run's journals, logs and data go [runs/<timestamp>].",
)
@click.option("--zk", default=None, metavar="HOST:PORT[/chroot]", help="Use this ZooKeeper instead of starting one.")
@click.option("--count", type=click.IntRange(1, 10_000_000), default=100_000, show_default=True, help="Records.")
@click.option("--partitions", type=click.IntRange(1, 1000), default=4, show_default=True, help="Topic partitions.")
def demo(run_dir: Path | None, zk: str | None, count: int, partitions: int) -> None:
    """Run everything end to end: ZooKeeper, a broker, a topic, a producer, read-back, shutdown."""
    run_dir = run_dir or Path("runs") / time.strftime("%Y%m%d-%H%M%S")

    def say(line: str) -> None:
        click.echo(f"[{time.strftime('%H:%M:%S')}] {line}")

    result = run_tour(run_dir, zk=zk, partitions=partitions, count=count, say=say)
    verdict = "PASS" if result.ok else "FAIL"
    say(
        f"{verdict}: produced {result.produced}, read back {result.read_back}, missing {result.missing} "
        f"({result.seconds:.1f} s); run directory: {run_dir}"
    )
    if not result.ok:
        raise SystemExit(1)
