"""``zkcoord bench``: the benchmarks' command group, and ``zkcoord bench rebalance`` (rebalance latency of each
consumer protocol, against the ZooKeeper floor).  The other benchmarks and ``bench all``: :mod:`.bench_suite_cmd`.
"""

from __future__ import annotations

import logging
from pathlib import Path

import click

from zkcoord.bench.common import default_out, interruptible, preset, preset_help, write_document
from zkcoord.bench.rebalance.config import JOIN_LEAVE, SCENARIOS, BenchConfig
from zkcoord.bench.rebalance.report import format_report
from zkcoord.bench.rebalance.run import RebalanceBench
from zkcoord.bench.rebalance.timeline import CONSUMER, DEFAULT_PROTOCOLS, PROTOCOLS
from zkcoord.cli.bench_suite_cmd import (
    all_benchmarks,
    analyze,
    assignor,
    consumer,
    out_option,
    partlog,
    scale,
    size_option,
)
from zkcoord.cli.common import ZkCoordGroup


@click.group(cls=ZkCoordGroup)
def bench() -> None:
    """Benchmarks, each against a floor measured in the same run (docs/benchmarks.md).

    \b
    Each writes one JSON document (bench-results/NAME.json unless --out) that
    'zkcoord analyze --bench FILE' tabulates and plots; --size small|medium|large
    picks a preset.  'zkcoord bench all' runs every one (what 'make bench' runs).
    """


@bench.command()
@size_option
@click.option(
    "--protocol",
    "protocols",
    type=click.Choice(PROTOCOLS),
    multiple=True,
    help="Protocol to run (repeatable, in this order; classic only when named)  [default: coordinator, incremental, "
    "consumer, zk-client; "
    "with --scenario rolling-restart alone: consumer]",
)
@click.option(
    "--scenario",
    "scenarios",
    type=click.Choice(SCENARIOS),
    multiple=True,
    help="What to measure (repeatable): join-leave (one member joins, then leaves, TRIALS times, under each "
    "protocol); rolling-restart (consumer protocol: a group of static members, each closed and started again with "
    "its instance id, one after the other)  [default: join-leave]",
)
@click.option(
    "--restarts",
    type=click.IntRange(1, 5000),
    default=None,
    help="rolling-restart: members restarted, one after the other  [default: every one (--consumers)]",
)
@click.option(
    "--consumers", type=click.IntRange(1, 5000), help=f"Members per group  {preset_help('rebalance', 'consumers')}"
)
@click.option(
    "--partitions", type=click.IntRange(1, 10_000), help=f"Per group's topic  {preset_help('rebalance', 'partitions')}"
)
@click.option("--groups", type=click.IntRange(1, 100), default=1, show_default=True, help="Groups changing at once.")
@click.option(
    "--trials", type=click.IntRange(1, 1000), help=f"Joins (and leaves)  {preset_help('rebalance', 'trials')}"
)
@click.option("--session-timeout", type=click.FloatRange(0.5, 600), default=6.0, show_default=True, help="Seconds.")
@click.option(
    "--legacy-backoff",
    type=click.FloatRange(0, 600),
    help=f"zk-client rebalance.backoff.ms in seconds (Kafka's: 2)  {preset_help('rebalance', 'legacy_backoff')}",
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
@out_option("rebalance")
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
    size: str,
    protocols: tuple[str, ...],
    scenarios: tuple[str, ...],
    restarts: int | None,
    consumers: int | None,
    partitions: int | None,
    groups: int,
    trials: int | None,
    session_timeout: float,
    legacy_backoff: float | None,
    legacy_retries: int,
    workers: int | None,
    change_timeout: float,
    out: Path | None,
    zk: str | None,
    run_dir: Path | None,
) -> None:
    """Run the same membership changes under each consumer protocol and compare their rebalances.

    The protocols: coordinator (eager rebalances: every member stops and restarts), incremental (the same
    coordinator, every member asking for incremental rebalances: only the members whose partitions move get
    commands), classic (seed 001: the coordinator's eager rebalances with the assignment computed by a leader member,
    its computation time shown apart), consumer (KIP-848's consumer protocol: epochs, reconciliation member by
    member; a change ends when the group is stable again, every member at the assignment epoch) and zk-client
    (Kafka 0.8.2's client-side rebalance).

    Every consumer is a real ZooKeeper session, hosted many to a worker process.  For each protocol, the groups are
    formed, then TRIALS times one consumer joins each group and leaves again.  For each change: the time from the
    trigger until every member fetches its new share (p50, p95, max), stop-the-world time, ZooKeeper requests per
    rebalance (the server's own counters), conflicts and retries; and latency as a multiple of the ZooKeeper floor
    measured in the same run; ZooKeeper requests by who sent them (coordinator, the member joining, the others).

    --scenario rolling-restart (consumer protocol): one group of CONSUMERS static members (instance ids) over the
    first topic, whatever --groups; each member in turn is closed and started again with its instance id.  Per
    restart: whether any partition moved to another member (KIP-848: none), the longest time one partition was not
    fetched beside the session timeout, and when the group was stable again.

    Progress while it runs, a table at the end, JSON to --out.
    """
    logging.getLogger("kazoo").setLevel(logging.ERROR)
    given = {"consumers": consumers, "partitions": partitions, "trials": trials, "legacy_backoff": legacy_backoff}
    chosen = preset("rebalance", size, given)
    scenarios = scenarios or (JOIN_LEAVE,)
    if not protocols:
        protocols = DEFAULT_PROTOCOLS if JOIN_LEAVE in scenarios else (CONSUMER,)
    config = BenchConfig(
        protocols=protocols,
        scenarios=scenarios,
        restarts=restarts,
        consumers=chosen["consumers"],
        partitions=chosen["partitions"],
        groups=groups,
        trials=chosen["trials"],
        session_timeout_s=session_timeout,
        legacy_backoff_s=chosen["legacy_backoff"],
        legacy_retries=legacy_retries,
        workers=workers,
        zk=zk,
        run_dir=run_dir,
        change_timeout_s=change_timeout,
    )
    out = out or default_out("rebalance")
    with interruptible():
        document = RebalanceBench(config, progress=lambda line: click.echo(line, err=True)).run()
    write_document(out, document)
    click.echo(format_report(document))
    click.echo(f"\nwrote {out}")


bench.add_command(partlog)
bench.add_command(assignor)
bench.add_command(consumer)
bench.add_command(analyze)
bench.add_command(scale)
bench.add_command(all_benchmarks)
