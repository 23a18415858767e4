"""``zkcoord topic create|alter|list|describe``."""

from __future__ import annotations

from pathlib import Path

import click

from zkcoord.cli.common import (
    ZkCoordGroup,
    data_dir_option,
    echo_json,
    journal_option,
    open_journal,
    resolve_data_dir,
    zk_config,
    zk_options,
)
from zkcoord.data.partlog import log_offsets
from zkcoord.data.topics import TopicAdmin, TopicInfo
from zkcoord.errors import TopicExistsError, ZkCoordError
from zkcoord.zk import ZkClient


@click.group(cls=ZkCoordGroup)
def topic() -> None:
    """Create, grow, list and describe topics (/brokers/topics, Kafka 0.8's format)."""


def _admin_call(zk: str, session_timeout: float, journal_dir: Path | None, action: str) -> tuple[ZkClient, TopicAdmin]:
    client = ZkClient(zk_config(zk, session_timeout), name=f"topic-{action}").start()
    return client, TopicAdmin(client, open_journal(journal_dir, f"topic-{action}"))


@topic.command()
@click.argument("name")
@click.option("--partitions", "-p", type=int, required=True, help="Number of partitions (1..10000).")
@click.option("--replication-factor", type=int, default=1, show_default=True, help="Replicas per partition.")
@click.option("--if-not-exists", is_flag=True, help="Succeed without change if the topic exists already.")
@zk_options
@journal_option
def create(
    name: str,
    partitions: int,
    replication_factor: int,
    if_not_exists: bool,
    zk: str,
    session_timeout: float,
    journal_dir: Path | None,
) -> None:
    """Create topic NAME with N partitions."""
    client, admin = _admin_call(zk, session_timeout, journal_dir, "create")
    try:
        info = admin.create(name, partitions, replication_factor)
    except TopicExistsError:
        if not if_not_exists:
            raise
        click.echo(f"topic {name} exists already ({admin.describe(name).partitions} partitions)")
        return
    except ZkCoordError as e:
        admin.journal.emit("topic.refused", topic=name, reason=str(e))
        raise
    finally:
        client.stop()
    click.echo(f"created topic {info.name} with {info.partitions} partitions")


@topic.command()
@click.argument("name")
@click.option("--partitions", "-p", type=int, required=True, help="New, larger number of partitions.")
@zk_options
@journal_option
def alter(name: str, partitions: int, zk: str, session_timeout: float, journal_dir: Path | None) -> None:
    """Grow topic NAME to M partitions (partitions are never removed)."""
    client, admin = _admin_call(zk, session_timeout, journal_dir, "alter")
    try:
        before = admin.describe(name).partitions
        info = admin.alter(name, partitions)
    except ZkCoordError as e:
        admin.journal.emit("topic.refused", topic=name, reason=str(e))
        raise
    finally:
        client.stop()
    click.echo(f"altered topic {info.name}: {before} -> {info.partitions} partitions")


@topic.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@zk_options
def list_(as_json: bool, zk: str, session_timeout: float) -> None:
    """List topics with their partition counts."""
    with ZkClient(zk_config(zk, session_timeout), name="topic-list") as client:
        infos, bad = TopicAdmin(client).describe_all()
    if as_json:
        echo_json(
            {
                "topics": [{"topic": i.name, "partitions": i.partitions} for i in infos],
                "unreadable": [{"path": e.path, "reason": e.reason} for e in bad],
            }
        )
        return
    width = max((len(i.name) for i in infos), default=5)
    click.echo(f"{'TOPIC':<{width}}  PARTITIONS")
    for i in infos:
        click.echo(f"{i.name:<{width}}  {i.partitions}")
    for e in bad:
        click.echo(f"warning: {e}", err=True)


def _describe_rows(info: TopicInfo, data_dir: Path) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for p, replicas in enumerate(info.assignment.replicas):
        start, end = log_offsets(data_dir, info.name, p)
        rows.append({"partition": p, "replicas": list(replicas), "log_start": start, "log_end": end})
    return rows


@topic.command()
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@zk_options
@data_dir_option
def describe(name: str, as_json: bool, zk: str, session_timeout: float, data_dir: Path | None) -> None:
    """Show each partition of NAME: replicas and the log's start and end offsets."""
    with ZkClient(zk_config(zk, session_timeout), name="topic-describe") as client:
        info = TopicAdmin(client).describe(name)
    rows = _describe_rows(info, resolve_data_dir(data_dir))
    if as_json:
        echo_json({"topic": info.name, "partitions": rows, "version": info.version})
        return
    click.echo(f"topic {info.name}: {info.partitions} partitions (altered {info.version} times)")
    click.echo(f"{'PARTITION':>9}  {'REPLICAS':<12} {'LOG-START':>10} {'LOG-END':>10}")
    for r in rows:
        replicas = ",".join(str(b) for b in r["replicas"])  # type: ignore[attr-defined]
        click.echo(f"{r['partition']:>9}  {replicas:<12} {r['log_start']:>10} {r['log_end']:>10}")
