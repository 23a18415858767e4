"""``zkcoord bench rebalance``: rebalance latency of each consumer protocol, against the ZooKeeper floor."""

from __future__ import annotations

import json
import logging
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn

import click

from zkcoord.bench.cluster import BenchError
from zkcoord.bench.config import BenchConfig
from zkcoord.bench.rebalance import DEFAULT_OUT, RebalanceBench
from zkcoord.bench.report import format_report
from zkcoord.bench.timeline import PROTOCOLS
from zkcoord.cli.common import ZkCoordGroup


@click.group(cls=ZkCoordGroup)
def bench() -> None:
    """Benchmarks against a real ZooKeeper (docs/benchmarks.md)."""


@contextmanager
def _interruptible() -> Iterator[None]:
    """SIGTERM and SIGINT end the run through its clean-up (every process it started is stopped)."""

    def stop(signum: int, _frame: object) -> NoReturn:
        for s in (signal.SIGTERM, signal.SIGINT):  # once: the clean-up itself must not be interrupted
            signal.signal(s, signal.SIG_IGN)
        raise BenchError(f"interrupted by {signal.Signals(signum).name}; every process of the run was stopped")

    previous = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


@bench.command()
@click.option(
    "--protocol",
    "protocols",
    type=click.Choice(PROTOCOLS),
    multiple=True,
    help="Protocol to run (repeatable, in this order)  [default: coordinator, incremental, zk-client]",
)
@click.option("--consumers", type=click.IntRange(1, 5000), default=50, show_default=True, help="Members per group.")
@click.option("--partitions", type=click.IntRange(1, 10_000), default=500, show_default=True, help="Per group's topic.")
@click.option("--groups", type=click.IntRange(1, 100), default=1, show_default=True, help="Groups changing at once.")
@click.option("--trials", type=click.IntRange(1, 1000), default=5, show_default=True, help="Joins (and leaves).")
@click.option("--session-timeout", type=click.FloatRange(0.5, 600), default=6.0, show_default=True, help="Seconds.")
@click.option(
    "--legacy-backoff",
    type=click.FloatRange(0, 600),
    default=2.0,
    show_default=True,
    help="zk-client rebalance.backoff.ms, in seconds (Kafka's default: 2).",
)
@click.option(
    "--legacy-retries",
    type=click.IntRange(1, 1000),
    default=4,
    show_default=True,
    help="zk-client rebalance.max.retries (Kafka's default: 4).",
)
@click.option(
    "--workers",
    type=click.IntRange(1, 256),
    default=None,
    help="Consumer processes per protocol  [default: consumers x groups / 25, rounded up]",
)
@click.option(
    "--change-timeout",
    type=click.FloatRange(1, 3600),
    default=60.0,
    show_default=True,
    help="Seconds a membership change may take to settle before it counts as not completed.",
)
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=DEFAULT_OUT,
    show_default=True,
    help="JSON results.",
)
@click.option(
    "--zk",
    metavar="HOST:PORT[/chroot]",
    default=None,
    help="Use this ZooKeeper (mntr must be allowed) instead of starting one.",
)
@click.option(
    "--run-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Keep journals, logs and data here  [default: a temporary directory, removed]",
)
def rebalance(
    protocols: tuple[str, ...],
    consumers: int,
    partitions: int,
    groups: int,
    trials: int,
    session_timeout: float,
    legacy_backoff: float,
    legacy_retries: int,
    workers: int | None,
    change_timeout: float,
    out: Path,
    zk: str | None,
    run_dir: Path | None,
) -> None:
    """Run the same membership changes under each consumer protocol and compare their rebalances.

    The protocols: coordinator (eager rebalances: every member stops and restarts), incremental (the same
    coordinator, every member asking for incremental rebalances: only the members whose partitions move get
    commands) and zk-client (Kafka 0.8.2's client-side rebalance).

    Every consumer is a real ZooKeeper session, hosted many to a worker process.  For each protocol, the groups are
    formed, then TRIALS times one consumer joins each group and leaves again.  For each change: the time from the
    trigger until every member fetches its new share (p50, p95, max), stop-the-world time, ZooKeeper requests per
    rebalance (the server's own counters), conflicts and retries; and latency as a multiple of the ZooKeeper floor
    measured in the same run.  Progress while it runs, a table at the end, JSON to --out.
    """
    logging.getLogger("kazoo").setLevel(logging.ERROR)
    config = BenchConfig(
        protocols=protocols or PROTOCOLS,
        consumers=consumers,
        partitions=partitions,
        groups=groups,
        trials=trials,
        session_timeout_s=session_timeout,
        legacy_backoff_s=legacy_backoff,
        legacy_retries=legacy_retries,
        workers=workers,
        zk=zk,
        run_dir=run_dir,
        change_timeout_s=change_timeout,
    )
    with _interruptible():
        document = RebalanceBench(config, progress=lambda line: click.echo(line, err=True)).run()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(document, indent=2) + "\n")
    click.echo(format_report(document))
    click.echo(f"\nwrote {out}")
