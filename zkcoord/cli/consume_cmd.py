"""``zkcoord consume``: run one consumer of a group until SIGTERM or SIGINT."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import click

from zkcoord.cli.common import (
    data_dir_option,
    journal_option,
    metrics_options,
    open_journal,
    open_metrics,
    resolve_data_dir,
    zk_auth,
    zk_auth_option,
)
from zkcoord.cli.consume_app import App
from zkcoord.consumer import Consumer, ConsumerConfig, ConsumerRecord, Subscription
from zkcoord.consumer.config import Rebalance
from zkcoord.consumer.legacy import LegacyConfig, LegacyConsumer
from zkcoord.consumer.metrics import ConsumerCollector
from zkcoord.errors import AccessRefusedError, ConfigurationError
from zkcoord.protocol.offset_reset import check_policy
from zkcoord.runtime.refusals import describe
from zkcoord.runtime.settings import DEFAULT_ZK, default_zk
from zkcoord.runtime.shutdown import DEFAULT_CONSUMER_TIMEOUT_S, EXIT_REFUSED
from zkcoord.runtime.stopping import SignalStop, shutdown_timeout_option


def _subscription(topics: tuple[str, ...], whitelist: str | None, blacklist: str | None, threads: int) -> Subscription:
    chosen = sum(bool(x) for x in (topics, whitelist, blacklist))
    if chosen != 1:
        raise ConfigurationError("give --topic T[:THREADS] (repeatable), or --whitelist REGEX, or --blacklist REGEX")
    if whitelist:
        return Subscription.whitelist(whitelist, threads)
    if blacklist:
        return Subscription.blacklist(blacklist, threads)
    static: dict[str, int] = {}
    for item in topics:
        name, _, count = item.partition(":")
        if count and not count.isdigit():
            raise ConfigurationError(f"bad --topic {item!r}: expected TOPIC or TOPIC:THREADS")
        static[name] = int(count) if count else 1
    return Subscription.static(static)


def _print_record(r: ConsumerRecord) -> None:
    key = r.key.decode("utf-8", "replace") if r.key is not None else "-"
    click.echo(f"{r.topic}\t{r.partition}\t{r.offset}\t{key}\t{r.value.decode('utf-8', 'replace')}")


class _Status:
    """The live status line: records/s, partitions owned, lag."""

    def __init__(self, consumer: Consumer | LegacyConsumer) -> None:
        self.consumer = consumer
        self.tty = sys.stderr.isatty()
        self.last = time.monotonic()
        self.last_count = 0
        self.every = 1.0 if self.tty else 5.0

    def maybe_show(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self.last < self.every:
            return
        m = self.consumer.metrics()
        rate = (m.records_consumed_total - self.last_count) / max(now - self.last, 1e-9)
        self.last, self.last_count = now, m.records_consumed_total
        lease = "" if m.lease_valid else ", lease expired"
        line = (
            f"consumed {m.records_consumed_total} ({rate:,.0f} rec/s), {m.assigned_partitions} partitions owned, "
            f"lag {m.lag}{lease}"
        )
        click.echo(("\r" + line + "   ") if self.tty else line, err=True, nl=not self.tty)


@click.command()
@click.option("--group", "-g", required=True, help="Consumer group.")
@click.option("--topic", "-t", "topics", multiple=True, metavar="TOPIC[:THREADS]", help="Static subscription.")
@click.option(
    "--whitelist",
    metavar="REGEX",
    help="Subscribe to every topic whose whole name matches (the topic-pattern dialect: docs/consumer.md).",
)
@click.option(
    "--blacklist",
    metavar="REGEX",
    help="Subscribe to every topic whose whole name does not match (same dialect).",
)
@click.option("--threads", type=click.IntRange(1, 1024), default=1, show_default=True, help="Threads (wildcards).")
@click.option("--max-poll-records", type=click.IntRange(1, 1_000_000), default=500, show_default=True)
@click.option(
    "--from",
    "start_from",
    type=click.Choice(["earliest", "latest"]),
    default="earliest",
    show_default=True,
    help="Where a partition without a committed offset starts.",
)
@click.option(
    "--offset-reset",
    type=click.Choice(["earliest", "latest", "none"]),
    default="earliest",
    show_default=True,
    help="What to do with a position outside its partition's log (a committed offset beyond the log's end or below "
    "its start; Kafka's auto.offset.reset): move it to the log's start (earliest: re-reads, never skips) or end "
    "(latest: skips what is there), or hold the partition and report it (none) while the others go on.  Journalled "
    "as offsets.reset and shown by 'zkcoord group describe'.  A partition with no committed offset follows --from.",
)
@click.option("--print", "print_records", is_flag=True, help="Print each record: topic, partition, offset, key, value.")
@click.option("--max-records", type=click.IntRange(1), default=None, help="Exit 0 after this many records.")
@click.option("--auto-commit-interval", type=click.FloatRange(0.01, 3600), default=5.0, show_default=True)
@click.option(
    "--no-auto-commit",
    "manual_commit",
    is_flag=True,
    help="Commit only what was processed: after each batch and when partitions are revoked (Kafka's "
    "enable.auto.commit=false with commitSync in onPartitionsRevoked).",
)
@click.option(
    "--work-ms",
    type=click.FloatRange(0, 60_000),
    default=0.0,
    show_default=True,
    help="Simulated processing time per record (ms); each record is journalled as processed once done.",
)
@click.option("--consumer-id", default="", help="Fixed consumer id (default: Kafka's <group>_<host>-<ms>-<hex>).")
@click.option("--unsafe", is_flag=True, hidden=True, help="Demo contrast only: no stale-command check, no lease.")
@click.option(
    "--protocol",
    type=click.Choice(["coordinator", "classic", "consumer", "zk-client"]),
    default="coordinator",
    show_default=True,
    help="coordinator: the coordinator assigns partitions (seed 002); classic: a leader member computes the assignment "
    "with a strategy every member supports (--assignors; seed 001, docs/classic-protocol.md); consumer: KIP-848's "
    "consumer protocol, "
    "each member reconciled on its own with group and member epochs (docs/protocol.md); zk-client: Kafka 0.8.2's "
    "client-side rebalance.",
)
@click.option(
    "--instance-id",
    default=None,
    help="Static membership (KIP-848's group.instance.id; --protocol consumer only): a member that restarts with the "
    "same id soon enough gets its partitions back and nobody else is disturbed; two live members cannot share one.",
)
@click.option(
    "--migrating",
    is_flag=True,
    help="Join a group that still has zk-client members, to move it to the coordinator (docs/migration.md).",
)
@click.option(
    "--rebalance",
    type=click.Choice(["eager", "incremental"]),
    default="eager",
    show_default=True,
    help="incremental: when every member says so, rebalances move only the partitions that change owner, with the "
    "coordinator's uniform assignor (KIP-848's); the others keep fetching (docs/protocol.md).",
)
@click.option(
    "--max-poll-interval",
    type=float,
    default=300.0,
    show_default=True,
    metavar="SECONDS",
    help="How long the application may take between two polls (Kafka's max.poll.interval.ms; 1..86400).  "
    "Published in the member's registration: a rebalance's stop phase waits up to this long for this member "
    "(docs/protocol.md).",
)
@click.option(
    "--rack",
    default=None,
    metavar="RACK",
    help="This consumer's rack (Kafka's client.rack), published in its registration: the uniform assignor prefers "
    "to give it partitions with a replica on a broker of that rack (broker --rack), where that costs neither balance "
    "nor stickiness (docs/protocol.md). Not with --protocol zk-client.",
)
@click.option(
    "--assignors",
    "strategies",
    default="range",
    show_default=True,
    metavar="NAME[,NAME...]",
    help="(--protocol classic) The assignment strategies this member supports, most preferred first: range, "
    "roundrobin, sticky (uniform), or your own module:Class (docs/classic-protocol.md). The coordinator picks one "
    "every member supports, by vote; a rolling restart with a new first choice switches the group once all members "
    "have it.",
)
@click.option("--rebalance-max-retries", type=click.IntRange(1, 1000), default=4, show_default=True, help="(zk-client)")
@click.option(
    "--rebalance-backoff", type=click.FloatRange(0, 600), default=2.0, show_default=True, help="Seconds (zk-client)."
)
@click.option(
    "--assignor", type=click.Choice(["range", "roundrobin"]), default="range", show_default=True, help="(zk-client)"
)
@click.option("--zk", default=default_zk, show_default=DEFAULT_ZK, metavar="HOST:PORT[/chroot]", help="ZooKeeper.")
@zk_auth_option
@click.option("--session-timeout", type=click.FloatRange(0.5, 600), default=6.0, show_default=True)
@shutdown_timeout_option(DEFAULT_CONSUMER_TIMEOUT_S)
@metrics_options
@data_dir_option
@journal_option
def consume(
    group: str,
    topics: tuple[str, ...],
    whitelist: str | None,
    blacklist: str | None,
    threads: int,
    max_poll_records: int,
    start_from: str,
    offset_reset: str,
    print_records: bool,
    max_records: int | None,
    auto_commit_interval: float,
    manual_commit: bool,
    work_ms: float,
    consumer_id: str,
    unsafe: bool,
    protocol: str,
    instance_id: str | None,
    migrating: bool,
    rebalance: str,
    max_poll_interval: float,
    rack: str | None,
    strategies: str,
    rebalance_max_retries: int,
    rebalance_backoff: float,
    assignor: str,
    zk: str,
    session_timeout: float,
    shutdown_timeout: float,
    metrics_port: int,
    metrics_addr: str,
    data_dir: Path | None,
    journal_dir: Path | None,
) -> None:
    """Consume as a member of GROUP; the coordinator (or, with --protocol zk-client, the members themselves, as
    Kafka 0.8.2 did) decides which partitions this consumer gets.

    Journals what it consumed as offset ranges and shows a live status line.  On SIGTERM or SIGINT it stops
    fetching, commits, deregisters and exits 0, within --shutdown-timeout whatever ZooKeeper does: if ZooKeeper
    could not be reached it says what was left (uncommitted records are delivered again; the member znode stays
    until the session expires) and exits 3.  A second signal exits at once (130 or 143).  With --zk-auth, a write
    ZooKeeper's ACLs refuse it (a commit, an acknowledgement, its registration) stops it the same way, with one
    Error: line and exit 4 (docs/security.md).

    With --metrics-port it serves Prometheus metrics (partitions, records consumed, lag per partition, commits,
    the lease, commands; docs/metrics.md) at http://--metrics-addr:PORT/metrics.
    """
    config = ConsumerConfig(
        group=group,
        subscription=_subscription(topics, whitelist, blacklist, threads),
        zk=zk,
        data_dir=resolve_data_dir(data_dir),
        session_timeout_s=session_timeout,
        max_poll_records=max_poll_records,
        start_from="latest" if start_from == "latest" else "earliest",
        offset_reset=check_policy(offset_reset),
        auto_commit_interval_s=auto_commit_interval,
        auto_commit=not manual_commit,
        consumer_id=consumer_id,
        unsafe_no_fencing=unsafe,
        migrating=migrating,
        rebalance=_rebalance(protocol, rebalance),
        shutdown_timeout_s=shutdown_timeout,
        max_poll_interval_s=max_poll_interval,
        instance_id=instance_id,
        rack=rack,
        zk_auth=zk_auth(),
        assignors=tuple(s.strip() for s in strategies.split(",")),
    )
    _check_flags(
        protocol,
        strategies=strategies,
        rebalance=rebalance,
        unsafe=unsafe,
        rack=rack,
        migrating=migrating,
        zk_auth=config.zk_auth is not None,
    )
    registry, metrics = open_metrics(metrics_addr, metrics_port)
    stop = SignalStop("consumer", shutdown_timeout)
    journal = open_journal(journal_dir, f"consumer-{group}")
    app = App(journal, group, work_ms=work_ms, auto_commit=not manual_commit, stop=stop.requested)
    consumer: Consumer | LegacyConsumer
    if protocol == "zk-client":
        legacy = LegacyConfig(rebalance_max_retries, rebalance_backoff, assignor)
        consumer = LegacyConsumer(config, legacy=legacy, journal=journal, on_partitions_revoked=app.on_revoked)
    else:
        consumer = Consumer(
            config, journal=journal, on_partitions_revoked=app.on_revoked, on_partitions_lost=app.on_lost
        )
    app.bind(consumer)
    registry.register(ConsumerCollector(consumer, protocol))
    stop.attach(journal, group=group, consumer=consumer.consumer_id)
    consumer.start()
    click.echo(f"consumer {consumer.consumer_id} joined group {group}", err=True)
    if metrics is not None:
        click.echo(f"consumer {consumer.consumer_id} serves metrics at {metrics.url}", err=True)
    status = _Status(consumer)
    total = 0
    try:
        while not stop.requested.is_set() and (max_records is None or total < max_records):
            try:
                records = consumer.poll(0.2)
            except AccessRefusedError as e:  # journalled (zk.refused); retrying cannot help (docs/security.md)
                stop.fail(f"{describe(e)}: stopped", EXIT_REFUSED)
                break
            total += app.process(records, _print_record if print_records else None)
            status.maybe_show()
    finally:
        code = stop.finish(consumer.close(budget=stop.begin()))
        status.maybe_show(force=True)
        if status.tty:
            click.echo("", err=True)
        reason = "refused" if stop.failure else "signal" if stop.requested.is_set() else "done"
        journal.emit("process.stopped", reason=reason)
        journal.close()
        if metrics is not None:
            metrics.close()
    click.echo(f"consumer {consumer.consumer_id} left group {group} after {total} records", err=True)
    stop.exit(code)


def _rebalance(protocol: str, rebalance: str) -> Rebalance:
    """The consumer's ``rebalance`` for ``--protocol`` and ``--rebalance``."""
    if protocol in ("consumer", "classic"):
        return "consumer" if protocol == "consumer" else "classic"
    return "incremental" if rebalance == "incremental" else "eager"


def _check_flags(
    protocol: str, *, strategies: str, rebalance: str, unsafe: bool, rack: str | None, migrating: bool, zk_auth: bool
) -> None:
    """:raises ConfigurationError: a flag that does not apply to ``protocol``."""
    if zk_auth and protocol == "zk-client":
        raise ConfigurationError(
            "--zk-auth: zk-client members write Kafka 0.8's tree, which ACLs close (docs/security.md)"
        )
    if strategies != "range" and protocol != "classic":
        raise ConfigurationError("--assignors is the classic protocol's (--protocol classic)")
    if rebalance == "incremental" and protocol == "classic":
        raise ConfigurationError("--rebalance is the coordinator protocol's (the classic protocol is eager)")
    if unsafe and protocol == "zk-client":
        raise ConfigurationError("--unsafe applies to the coordinator protocol only (zk-client has no fencing at all)")
    if rebalance == "incremental" and protocol == "consumer":
        raise ConfigurationError("--rebalance is the coordinator protocol's (the consumer protocol is incremental)")
    if rebalance == "incremental" and protocol == "zk-client":
        raise ConfigurationError("--rebalance incremental is for coordinator consumers (zk-client rebalances eagerly)")
    if rack is not None and protocol == "zk-client":
        raise ConfigurationError("--rack is for coordinated consumers (zk-client members assign among themselves)")
    if migrating and protocol == "zk-client":
        raise ConfigurationError("--migrating is for coordinator consumers joining a zk-client group")
