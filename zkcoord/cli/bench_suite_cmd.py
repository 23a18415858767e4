"""``zkcoord bench partlog|assignor|consumer|analyze|scale`` and ``zkcoord bench all``: every benchmark but
``rebalance`` (:mod:`zkcoord.cli.bench_cmd`), each a thin layer over its module in :mod:`zkcoord.bench`.

Each command takes ``--size small|medium|large`` (a preset, :data:`zkcoord.bench.common.PRESETS`; an option given
explicitly overrides it) and ``--out`` (default ``bench-results/NAME.json``).  Bad settings are one ``Error:`` line
and exit 1 (:class:`~zkcoord.bench.common.BenchError` through :class:`~zkcoord.cli.common.ZkCoordGroup`); click's
own usage errors exit 2.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from zkcoord.bench.common import (
    NAMES,
    RESULTS_DIR,
    SIZES,
    BenchError,
    default_out,
    envelope,
    interruptible,
    preset,
    preset_help,
    write_document,
)

F = TypeVar("F", bound=Callable[..., Any])


def size_option(func: F) -> F:
    return click.option(
        "--size",
        type=click.Choice(SIZES),
        default="large",
        show_default=True,
        help="Preset of the options marked [small: ...] (an option given explicitly wins).",
    )(func)


def out_option(name: str) -> Callable[[F], F]:
    return click.option(
        "--out",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        help=f"JSON results  [default: {default_out(name)}]",
    )


def _scratch_dir(_ctx: click.Context, _param: click.Parameter, path: Path | None) -> Path | None:
    """``--dir``: created (with its parents) if it does not exist yet, as ``--out``'s directory is."""
    if path is not None:
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise click.BadParameter(f"cannot create {path}: {e.strerror}") from None
    return path


def _scratch_option(func: F) -> F:
    return click.option(
        "--dir",
        "scratch",
        type=click.Path(file_okay=False, path_type=Path),
        default=None,
        callback=_scratch_dir,
        help="Where to put the run's files (created if need be)  [default: a temporary directory, removed]",
    )(func)


def _sizes(_ctx: click.Context, _param: click.Parameter, text: str | None) -> tuple[int, ...] | None:
    """``10,50`` -> ``(10, 50)``: positive integers (``1e6`` accepted for event counts)."""
    if text is None:
        return None
    try:
        values = tuple(int(float(x)) for x in text.split(",") if x.strip())
    except ValueError:
        raise click.BadParameter(f"expected comma-separated positive integers, got {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise click.BadParameter(f"expected comma-separated positive integers, got {text!r}")
    return values


@click.command()
@size_option
@click.option(
    "--records", type=click.IntRange(100, 10**9), help=f"Records per batched run  {preset_help('partlog', 'records')}"
)
@click.option(
    "--repeats",
    type=click.IntRange(1, 100),
    help=f"Runs per row, the fastest counts  {preset_help('partlog', 'repeats')}",
)
@out_option("partlog")
@_scratch_option
def partlog(size: str, records: int | None, repeats: int | None, out: Path | None, scratch: Path | None) -> None:
    """Partition-log appends and reads against plain sequential file I/O of the same bytes (page cache, no fsync)."""
    from zkcoord.bench.partlog import bench_partlog  # noqa: PLC0415  # each benchmark's imports only when it runs

    chosen = preset("partlog", size, {"records": records, "repeats": repeats})
    bench_partlog(chosen["records"], chosen["repeats"], out or default_out("partlog"), scratch)


@click.command()
@size_option
@click.option(
    "--records",
    type=click.IntRange(800, 10**9),
    help=f"Records of the throughput topic  {preset_help('consumer', 'records')}",
)
@click.option(
    "--trials",
    type=click.IntRange(1, 1000),
    help=f"Joins (and leaves) per group size  {preset_help('consumer', 'trials')}",
)
@click.option(
    "--consumers",
    callback=_sizes,
    metavar="N[,N...]",
    help=f"Group sizes of the rebalance part  {preset_help('consumer', 'consumers')}",
)
@click.option(
    "--repeats", type=click.IntRange(1, 100), help=f"Runs per throughput row  {preset_help('consumer', 'repeats')}"
)
@click.option("--zk-no-fsync", is_flag=True, help="Run ZooKeeper with forceSync=no.")
@out_option("consumer")
@_scratch_option
def consumer(
    size: str,
    records: int | None,
    trials: int | None,
    consumers: tuple[int, ...] | None,
    repeats: int | None,
    zk_no_fsync: bool,
    out: Path | None,
    scratch: Path | None,
) -> None:
    """One consumer's records/s against the raw log read; rebalance latency with every consumer in this process.

    Starts its own ZooKeeper and a broker (coordinator); see docs/benchmarks.md.
    """
    from zkcoord.bench.consumer.run import bench_consumer  # noqa: PLC0415

    given = {"records": records, "trials": trials, "consumers": consumers, "repeats": repeats}
    chosen = preset("consumer", size, given)
    with interruptible():
        bench_consumer(
            records=chosen["records"],
            trials=chosen["trials"],
            consumers=chosen["consumers"],
            repeats=chosen["repeats"],
            out=out or default_out("consumer"),
            scratch=scratch,
            zk_fsync=not zk_no_fsync,
        )


@click.command()
@size_option
@click.option(
    "--members", type=click.IntRange(2, 1_000_000), help=f"After the join  {preset_help('assignor', 'members')}"
)
@click.option("--ratio", type=click.IntRange(1, 10_000), default=10, show_default=True, help="Partitions per member.")
@click.option(
    "--topics",
    callback=_sizes,
    metavar="N[,N...]",
    help=f"Topic counts, a row each  {preset_help('assignor', 'topics')}",
)
@click.option(
    "--repeats", type=click.IntRange(1, 10_000), help=f"Timed calls per row  {preset_help('assignor', 'repeats')}"
)
@out_option("assignor")
def assignor(
    size: str, members: int | None, ratio: int, topics: tuple[int, ...] | None, repeats: int | None, out: Path | None
) -> None:
    """The uniform assignor's time for one join into a group (KIP-848's server-side assignor), beside Kafka's JMH
    figure for the same shape in Java (1.98 ms at 10 000 members x 10 partitions, 100 topics)."""
    from zkcoord.bench.assignor import bench_assignor  # noqa: PLC0415

    chosen = preset("assignor", size, {"members": members, "topics": topics, "repeats": repeats})
    with interruptible():
        bench_assignor(chosen["members"], ratio, chosen["topics"], chosen["repeats"], out or default_out("assignor"))


@click.command()
@size_option
@click.option(
    "--events",
    callback=_sizes,
    metavar="N[,N...]",
    help=f"Total events of the two synthetic runs, per size  {preset_help('analyze', 'events')}",
)
@click.option("--master", default="local[2]", show_default=True, help="Spark master.")
@out_option("analyze")
@_scratch_option
def analyze(size: str, events: tuple[int, ...] | None, master: str, out: Path | None, scratch: Path | None) -> None:
    """The Spark analysis against one plain Python pass over the same synthetic journals (needs the spark extra).

    Exit 1 if the two disagree on any count or miss an injected violation.
    """
    from zkcoord.bench.analyze import bench_analyze  # noqa: PLC0415

    chosen = preset("analyze", size, {"events": events})
    bench_analyze(chosen["events"], out or default_out("analyze"), master, scratch)


@click.command()
@size_option
@click.option("--groups", type=click.IntRange(1, 100_000), help=f"Groups  {preset_help('scale', 'groups')}")
@click.option(
    "--consumers",
    type=click.IntRange(1, 1_000_000),
    help=f"Consumer sessions in total, a multiple of --groups  {preset_help('scale', 'consumers')}",
)
@click.option("--processes", type=click.IntRange(1, 256), help=f"Swarm processes  {preset_help('scale', 'processes')}")
@click.option(
    "--failovers", type=click.IntRange(1, 100), help=f"Coordinator kills in a row  {preset_help('scale', 'failovers')}"
)
@click.option("--partitions", type=click.IntRange(1, 10_000), default=4, show_default=True, help="Of the one topic.")
@click.option("--session-timeout", type=click.FloatRange(0.5, 600), default=4.0, show_default=True, help="Brokers'.")
@click.option("--consumer-session-timeout", type=click.FloatRange(0.5, 600), default=10.0, show_default=True)
@click.option("--zk-heap-mb", type=click.IntRange(64, 65_536), default=1024, show_default=True)
@click.option("--zk-no-fsync", is_flag=True, help="forceSync=no on the ZooKeeper server.")
@click.option("--profile", is_flag=True, help="py-spy the coordinators (formation, 1st failover).")
@click.option("--form-timeout", type=click.FloatRange(1, 86_400), default=900.0, show_default=True)
@click.option("--failover-timeout", type=click.FloatRange(1, 86_400), default=300.0, show_default=True)
@out_option("scale")
@click.option(
    "--keep",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Run directory to keep (logs, journals, profile).",
)
def scale(
    size: str,
    groups: int | None,
    consumers: int | None,
    processes: int | None,
    failovers: int | None,
    partitions: int,
    session_timeout: float,
    consumer_session_timeout: float,
    zk_heap_mb: int,
    zk_no_fsync: bool,
    profile: bool,
    form_timeout: float,
    failover_timeout: float,
    out: Path | None,
    keep: Path | None,
) -> None:
    """The coordinator with many groups and sessions: forming them, then coordinator failovers (SIGKILL).

    Goal: every group STABLE again < 10 s after the old coordinator's session expired.  The rows are kept in --out
    keyed by configuration, so runs of different sizes sit side by side.
    """
    from zkcoord.bench.scale.failover import bench_scale  # noqa: PLC0415
    from zkcoord.bench.scale.params import Params  # noqa: PLC0415

    given = {"groups": groups, "consumers": consumers, "processes": processes, "failovers": failovers}
    chosen = preset("scale", size, given)
    params = Params(
        groups=chosen["groups"],
        consumers=chosen["consumers"],
        processes=chosen["processes"],
        partitions=partitions,
        session_timeout_s=session_timeout,
        consumer_session_timeout_s=consumer_session_timeout,
        zk_heap_mb=zk_heap_mb,
        zk_fsync=not zk_no_fsync,
        failovers=chosen["failovers"],
        profile=profile,
        form_timeout_s=form_timeout,
        failover_timeout_s=failover_timeout,
    )
    logging.getLogger("kazoo").setLevel(logging.ERROR)
    with interruptible():
        bench_scale(params, out or default_out("scale"), keep)


@click.command("all")
@click.option("--size", type=click.Choice(SIZES), default="small", show_default=True, help="Every benchmark's preset.")
@click.option(
    "--results-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=RESULTS_DIR,
    show_default=True,
    help="Where every document goes (NAME.json, and all.json: what ran and how long).",
)
@click.option("--only", type=click.Choice(NAMES), multiple=True, help="Run only these (repeatable).")
@click.option("--skip", type=click.Choice(NAMES), multiple=True, help="Do not run these (repeatable).")
def all_benchmarks(size: str, results_dir: Path, only: tuple[str, ...], skip: tuple[str, ...]) -> None:
    """Run every benchmark at one size, one after the other, each in its own process.

    \b
    Order: partlog, consumer, rebalance, analyze, scale.  small: a few minutes on
    2 cores; large: the figures of docs/benchmarks.md (hours: scale starts 10 000
    sessions).  Exit 1 if any benchmark failed; the others still run.
    """
    names = [n for n in NAMES if (not only or n in only) and n not in skip]
    if not names:
        raise BenchError("--only and --skip leave no benchmark to run")
    results: list[dict[str, Any]] = []
    with interruptible():
        for name in names:
            out = results_dir / f"{name}.json"
            click.echo(f"=== zkcoord bench {name} --size {size} --out {out}", err=True)
            started = time.monotonic()
            code = _run_child(["bench", name, "--size", size, "--out", str(out)])
            seconds = round(time.monotonic() - started, 1)
            results.append(
                {"benchmark": name, "exit": code, "seconds": seconds, "out": str(out) if code == 0 else None}
            )
    write_document(results_dir / "all.json", envelope("all", {"size": size, "runs": results}))
    click.echo(f"\n{'benchmark':<12}{'exit':>6}{'seconds':>10}  document")
    for r in results:
        click.echo(f"{r['benchmark']:<12}{r['exit']:>6}{r['seconds']:>10.1f}  {r['out'] or '-'}")
    failed = [r["benchmark"] for r in results if r["exit"] != 0]
    if failed:
        raise BenchError(f"failed: {', '.join(failed)} (see their output above)")
    click.echo(f"total: {sum(r['seconds'] for r in results):.1f} s; documents in {results_dir}")


def _run_child(args: list[str]) -> int:
    """``python -m zkcoord ARGS``, waited for; its exit status.

    Interrupted (:func:`interruptible` raises in this thread), it is sent SIGTERM and waited for, so that it stops
    everything it started itself before this command exits.
    """
    child = subprocess.Popen([sys.executable, "-m", "zkcoord", *args])
    try:
        return child.wait()
    finally:
        if child.poll() is None:  # interrupted while waiting: stop it before this command exits
            child.terminate()
            try:
                child.wait(timeout=120)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
