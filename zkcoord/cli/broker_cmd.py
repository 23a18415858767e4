"""``zkcoord broker``: run one broker until SIGTERM or SIGINT."""

from __future__ import annotations

import logging
import socket
from pathlib import Path

import click

from zkcoord.broker import Broker, BrokerConfig, BrokerService
from zkcoord.cli.common import journal_option, metrics_options, open_journal, open_metrics, zk_config, zk_options
from zkcoord.coordinator import Coordinator, CoordinatorConfig
from zkcoord.protocol.assignors import ASSIGNORS
from zkcoord.runtime.refusals import describe
from zkcoord.runtime.shutdown import DEFAULT_BROKER_TIMEOUT_S, EXIT_REFUSED
from zkcoord.runtime.stopping import SignalStop, shutdown_timeout_option


@click.command()
@click.option("--id", "broker_id", type=click.IntRange(0, 2**31 - 1), required=True, help="Broker id (unique).")
@click.option("--host", default=socket.gethostname, show_default="this host", help="Host to advertise.")
@click.option("--port", type=click.IntRange(1, 65535), default=None, help="Port to advertise [default: 9092+id].")
@click.option(
    "--rack",
    default=None,
    metavar="RACK",
    help="This broker's rack (Kafka's broker.rack), published in its registration: a partition's racks are those of "
    "the brokers holding its replicas, and the uniform assignor prefers to give a consumer (consume --rack) partitions "
    "of its rack where that costs neither balance nor stickiness (docs/protocol.md). Letters, digits, '.', '_', '-'.",
)
@click.option(
    "--assignor",
    type=click.Choice(sorted(ASSIGNORS)),
    default="range",
    show_default=True,
    help="Partition assignor of eager groups (sticky is an alias of uniform); incremental groups use uniform. A "
    "group's dynamic config (zkcoord group config set GROUP assignor=...) overrides it for that group.",
)
@click.option(
    "--rebalance-timeout",
    type=click.FloatRange(0.05, 3600),
    default=10.0,
    show_default=True,
    help="Seconds a rebalance phase waits for every acknowledgement; a phase that stops members waits this plus the "
    "longest poll interval they publish (consume --max-poll-interval). A group's rebalance.timeout.ms (zkcoord group "
    "config) replaces it for that group.",
)
@click.option(
    "--max-rebalance-retries", type=click.IntRange(0, 100), default=4, show_default=True, help="Retries per rebalance."
)
@click.option(
    "--rebalance-backoff",
    type=click.FloatRange(0, 600),
    default=0.2,
    show_default=True,
    help="Seconds before the first retry (doubled each time).",
)
@click.option(
    "--static-hold",
    type=click.FloatRange(0, 3600),
    default=45.0,
    show_default=True,
    help="Seconds a consumer-protocol static member (consume --instance-id) that left keeps its partitions for a "
    "member coming back with its instance id (docs/protocol.md, KIP-848).",
)
@click.option(
    "--fence-grace",
    type=click.FloatRange(0, 3600),
    default=40.0,
    show_default=True,
    help="Seconds a consumer-protocol member fenced for not revoking in time keeps its partitions held unless it "
    "registers again first: ZooKeeper's longest session, past which its lease has stopped it.",
)
@click.option("--no-coordinator", is_flag=True, help="Do not take part in the coordinator election.")
@click.option("--unsafe", is_flag=True, hidden=True, help="Demo contrast only: coordinator writes skip the fence.")
@shutdown_timeout_option(DEFAULT_BROKER_TIMEOUT_S)
@metrics_options
@zk_options
@journal_option
def broker(
    broker_id: int,
    host: str,
    port: int | None,
    rack: str | None,
    assignor: str,
    rebalance_timeout: float,
    max_rebalance_retries: int,
    rebalance_backoff: float,
    static_hold: float,
    fence_grace: float,
    no_coordinator: bool,
    unsafe: bool,
    shutdown_timeout: float,
    metrics_port: int,
    metrics_addr: str,
    zk: str,
    session_timeout: float,
    journal_dir: Path | None,
) -> None:
    """Run broker ID: register /brokers/ids/ID, take part in the coordinator election, stay until stopped.

    Re-registers after a session expiry; refuses an id held by a live broker.  The elected broker coordinates every
    consumer group (docs/protocol.md).

    On SIGTERM or SIGINT it removes its registration and exits 0, within --shutdown-timeout whatever ZooKeeper
    does: if ZooKeeper could not be reached it says what was left (the registration then stays until the session
    expires) and exits 3.  A second signal exits at once (130 or 143).  With --zk-auth, a write ZooKeeper's ACLs
    refuse it while it runs (its registration, the election) stops it the same way, with one Error: line and exit 4;
    one group's znodes refused fail only that group's rebalance (docs/security.md).

    With --metrics-port it serves Prometheus metrics (its coordinator's: whether it acts, the epoch, groups,
    rebalances, commands; docs/metrics.md) at http://--metrics-addr:PORT/metrics.
    """
    config = BrokerConfig(
        broker_id=broker_id,
        zk=zk_config(zk, session_timeout),
        host=host,
        port=port if port is not None else min(9092 + broker_id, 65535),
        shutdown_timeout_s=shutdown_timeout,
        rack=rack,
    )
    registry, metrics = open_metrics(metrics_addr, metrics_port)
    stop = SignalStop(f"broker {broker_id}", shutdown_timeout)
    journal = open_journal(journal_dir, f"broker-{broker_id}")
    stop.attach(journal, broker=broker_id)
    services: list[BrokerService] = []
    if not no_coordinator:
        coordinator_config = CoordinatorConfig(
            assignor=assignor,
            rebalance_timeout_s=rebalance_timeout,
            max_rebalance_retries=max_rebalance_retries,
            rebalance_backoff_s=rebalance_backoff,
            static_hold_s=static_hold,
            fence_grace_s=fence_grace,
            unsafe_no_fencing=unsafe,
        )
        coordinator = Coordinator(broker_id, coordinator_config)
        registry.register(coordinator.collector())
        services.append(coordinator)
    node = Broker(config, journal, services, on_refused=lambda e: stop.fail(f"{describe(e)}: stopped", EXIT_REFUSED))
    node.start()
    # A running broker logs what it does at INFO; raised only now, so a refused start prints its one Error: line
    # and nothing before it (-v shows the start-up steps).
    logging.getLogger("zkcoord").setLevel(min(logging.getLogger("zkcoord").getEffectiveLevel(), logging.INFO))
    click.echo(f"broker {broker_id} registered at {config.zk.address} (session {node.zk.session_id:#x})", err=True)
    if metrics is not None:
        click.echo(f"broker {broker_id} serves metrics at {metrics.url}", err=True)
    try:
        stop.requested.wait()
    finally:
        code = stop.finish(node.stop(stop.begin()))
        journal.emit("process.stopped", reason="refused" if stop.failure else "signal")
        journal.close()
        if metrics is not None:
            metrics.close()
    click.echo(f"broker {broker_id} stopped", err=True)
    stop.exit(code)
