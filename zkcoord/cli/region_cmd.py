"""``zkcoord region member|driver``: a consistent region's member application and its driver (issue 24,
``docs/regions.md``)."""

from __future__ import annotations

import threading
from pathlib import Path

import click

from zkcoord.admin.reset_spec import parse_datetime
from zkcoord.cli.common import (
    ZkCoordGroup,
    data_dir_option,
    journal_option,
    metrics_options,
    open_journal,
    open_metrics,
    resolve_data_dir,
    zk_auth,
    zk_auth_option,
)
from zkcoord.consumer import ConsumerConfig, Subscription
from zkcoord.consumer.metrics import ConsumerCollector
from zkcoord.errors import ConfigurationError, ZkCoordError
from zkcoord.layout.region import validate_member
from zkcoord.region.app import AggregateApp, RegionlessApp
from zkcoord.region.config import START_POSITIONS, RegionConfig, StartPosition
from zkcoord.region.driver import RegionDriver
from zkcoord.region.member import ConsistentRegion
from zkcoord.region.metrics import RegionCollector
from zkcoord.region.orders import OrderFollower
from zkcoord.runtime import settings
from zkcoord.runtime.settings import DEFAULT_ZK, default_zk
from zkcoord.runtime.shutdown import DEFAULT_CONSUMER_TIMEOUT_S, StopReport
from zkcoord.runtime.stopping import SignalStop, shutdown_timeout_option
from zkcoord.zk import ZkClient, ZkConfig


@click.group(cls=ZkCoordGroup)
def region() -> None:
    """A consistent region over a consumer group (seed 003, docs/regions.md): members that checkpoint their state
    with their offsets and reset together; a driver that orders checkpoints and resets."""


@region.command()
@click.option("--group", "-g", required=True, help="Consumer group.")
@click.option("--topic", "-t", "topics", multiple=True, required=True, metavar="TOPIC", help="Topic (repeatable).")
@click.option("--region", "region_id", required=True, help="Region id: every member of the group must give the same.")
@click.option("--member-name", required=True, help="This member's name in the region: unique, the same on a restart.")
@click.option(
    "--store-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="The local checkpoint store (default: $ZKCOORD_HOME/regions).",
)
@click.option(
    "--start-position",
    type=click.Choice(START_POSITIONS),
    default="beginning",
    show_default=True,
    help="Where a partition seen for the first time starts (its control variable): the log's beginning or end, the "
    "group's committed offset, or the first record at or after --start-timestamp.  Never a fixed offset.",
)
@click.option("--start-timestamp", default=None, metavar="ISO8601", help="With --start-position timestamp.")
@click.option("--reset-timeout", type=click.FloatRange(0.5, 3600), default=30.0, show_default=True, metavar="S")
@click.option("--max-poll-records", type=click.IntRange(1, 1_000_000), default=500, show_default=True)
@click.option("--max-poll-interval", type=click.FloatRange(1, 86400), default=300.0, show_default=True, metavar="S")
@click.option(
    "--unsafe",
    is_flag=True,
    help="The demo's contrast: a reset does not restore the checkpoint's state (records consumed again after it are "
    "counted again).",
)
@click.option("--zk", default=default_zk, show_default=DEFAULT_ZK, metavar="HOST:PORT[/chroot]", help="ZooKeeper.")
@zk_auth_option
@click.option("--session-timeout", type=click.FloatRange(0.5, 600), default=6.0, show_default=True)
@shutdown_timeout_option(DEFAULT_CONSUMER_TIMEOUT_S)
@metrics_options
@data_dir_option
@journal_option
def member(
    group: str,
    topics: tuple[str, ...],
    region_id: str,
    member_name: str,
    store_dir: Path | None,
    start_position: str,
    start_timestamp: str | None,
    reset_timeout: float,
    max_poll_records: int,
    max_poll_interval: float,
    unsafe: bool,
    zk: str,
    session_timeout: float,
    shutdown_timeout: float,
    metrics_port: int,
    metrics_addr: str,
    data_dir: Path | None,
    journal_dir: Path | None,
) -> None:
    """Run one member of a consistent region: it keeps a count and a sum per key of the records it processes,
    checkpoints them with its offsets and resets them when its driver orders (region.* journal events).  A member
    whose --region is not the group's is refused with one Error: line (exit 1), as is one whose application cannot
    restore a stored state (region.failed).  Stops on SIGTERM or SIGINT."""
    if (start_position == "timestamp") != (start_timestamp is not None):
        raise ConfigurationError("give --start-timestamp with --start-position timestamp, and only then")
    consumer_config = ConsumerConfig(
        group=group,
        subscription=Subscription.static(dict.fromkeys(topics, 1)),
        zk=zk,
        data_dir=resolve_data_dir(data_dir),
        session_timeout_s=session_timeout,
        max_poll_records=max_poll_records,
        auto_commit=False,
        shutdown_timeout_s=shutdown_timeout,
        max_poll_interval_s=max_poll_interval,
        zk_auth=zk_auth(),
    )
    position: StartPosition = start_position  # type: ignore[assignment]  # click.Choice checked it
    config = RegionConfig(
        region_id,
        member_name,
        store_dir or settings.zkcoord_home() / "regions",
        start_position=position,
        start_timestamp_ms=None if start_timestamp is None else parse_datetime(start_timestamp),
        reset_timeout_s=reset_timeout,
    )
    registry, metrics = open_metrics(metrics_addr, metrics_port)
    stop = SignalStop("region member", shutdown_timeout)
    journal = open_journal(journal_dir, f"member-{group}")
    app = RegionlessApp() if unsafe else AggregateApp()
    # A restore that raises (a malformed stored state) or a failed event thread: one Error: line, exit 1.
    member_region = ConsistentRegion(consumer_config, config, app, journal=journal, on_fatal=lambda m: stop.fail(m, 1))
    registry.register(ConsumerCollector(member_region.consumer))
    registry.register(RegionCollector(member_region.stats, region_id, member_name))
    stop.attach(journal, group=group, consumer=member_region.consumer.consumer_id)
    try:
        member_region.start()
    except ZkCoordError:
        journal.close()
        if metrics is not None:
            metrics.close()
        raise
    follower = OrderFollower(member_region, app.snapshot).start()
    click.echo(f"member {member_name} joined region {region_id} of group {group}", err=True)
    try:
        stop.requested.wait()
    finally:
        follower.stop()
        code = stop.finish(member_region.close(budget=stop.begin()))
        journal.emit("process.stopped", reason="failed" if stop.failure else "signal")
        journal.close()
        if metrics is not None:
            metrics.close()
    click.echo(f"member {member_name} left after {app.processed} records", err=True)
    stop.exit(code)


@region.command()
@click.option("--group", "-g", required=True, help="Consumer group.")
@click.option("--region", "region_id", required=True, help="Region id.")
@click.option("--members", required=True, metavar="NAME[,NAME...]", help="The region's member names.")
@click.option("--interval", type=click.FloatRange(0.1, 3600), default=2.0, show_default=True, metavar="S")
@click.option("--order-timeout", type=click.FloatRange(0.5, 3600), default=20.0, show_default=True, metavar="S")
@click.option("--zk", default=default_zk, show_default=DEFAULT_ZK, metavar="HOST:PORT[/chroot]", help="ZooKeeper.")
@click.option("--session-timeout", type=click.FloatRange(0.5, 600), default=6.0, show_default=True)
@journal_option
def driver(
    group: str,
    region_id: str,
    members: str,
    interval: float,
    order_timeout: float,
    zk: str,
    session_timeout: float,
    journal_dir: Path | None,
) -> None:
    """Drive a consistent region: order a drain and checkpoint of every member each --interval seconds while all of
    --members are present (a member present but not named is driven too), and a reset to the last complete
    checkpoint (recorded in region/completed) when a member asks for one (a revocation after fetching, a restart) or
    the membership changes.  Stops on SIGTERM or SIGINT."""
    names = [validate_member(n.strip()) for n in members.split(",") if n.strip()]
    if not names:
        raise ConfigurationError("--members needs at least one name")
    stop = threading.Event()
    signals = SignalStop("region driver", 5.0)
    journal = open_journal(journal_dir, f"driver-{group}")
    with ZkClient(ZkConfig.from_string(zk, session_timeout_s=session_timeout)) as client:
        the_driver = RegionDriver(
            client, group, region_id, names, interval_s=interval, order_timeout_s=order_timeout, journal=journal
        )
        worker = threading.Thread(target=_drive, args=(the_driver, stop, signals), name="region-driver", daemon=True)
        worker.start()
        click.echo(f"driving region {region_id} of group {group} with members {', '.join(names)}", err=True)
        signals.requested.wait()
        signals.begin()
        stop.set()
        worker.join(timeout=3)
    code = signals.finish(StopReport())  # a failure: its one Error: line, exit 1
    journal.emit("process.stopped", reason="refused" if signals.failure else "signal")
    journal.close()
    signals.exit(code)


def _drive(the_driver: RegionDriver, stop: threading.Event, signals: SignalStop) -> None:
    try:
        the_driver.run(stop)
    except ZkCoordError as e:
        signals.fail(str(e), 1)
