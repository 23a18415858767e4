"""``zkcoord produce`` and ``zkcoord fetch``: write records to a topic's logs, and read them back."""

from __future__ import annotations

import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import click

from zkcoord.cli.common import (
    data_dir_option,
    echo_json,
    journal_option,
    open_journal,
    resolve_data_dir,
    stop_on_signals,
    zk_config,
    zk_options,
)
from zkcoord.data.partlog import PartitionReader
from zkcoord.data.producer import ProduceConfig, Producer, ProduceStats
from zkcoord.data.topics import TopicAdmin
from zkcoord.errors import ConfigurationError
from zkcoord.zk import ZkClient


class _Progress:
    """A live progress line on stderr: rewritten in place on a terminal, one line per update otherwise."""

    def __init__(self, total: int | None) -> None:
        self.total = total
        self.tty = sys.stderr.isatty()

    def show(self, stats: ProduceStats) -> None:
        of = f"/{self.total}" if self.total is not None else ""
        line = f"produced {stats.records}{of} records ({stats.records_per_s:,.0f} rec/s, {stats.mb_per_s:.1f} MB/s)"
        click.echo(("\r" + line) if self.tty else line, err=True, nl=not self.tty)

    def done(self) -> None:
        if self.tty:
            click.echo("", err=True)


@dataclass(frozen=True, slots=True)
class _PartitionSummary:
    partition: int
    records: int
    first: int | None
    last: int | None


@click.command()
@click.argument("topic")
@click.option("--count", "-n", type=click.IntRange(0), default=1000, show_default=True, help="Records to produce.")
@click.option("--forever", is_flag=True, help="Produce until SIGTERM/SIGINT (ignores --count).")
@click.option("--rate", type=click.FloatRange(0, min_open=True), default=None, help="Records per second [unlimited].")
@click.option("--size", type=click.IntRange(1, 1 << 20), default=100, show_default=True, help="Value size in bytes.")
@click.option("--keys", type=click.IntRange(0), default=0, show_default=True, help="Distinct keys (0: round-robin).")
@click.option("--batch", type=click.IntRange(1, 100_000), default=100, show_default=True, help="Records per batch.")
@click.option(
    "--journal-records",
    is_flag=True,
    help="Journal every record's key and number (produce.records), for S8's expected aggregate; --size >= 32.",
)
@zk_options
@data_dir_option
@journal_option
def produce(
    topic: str,
    count: int,
    forever: bool,
    rate: float | None,
    size: int,
    keys: int,
    batch: int,
    journal_records: bool,
    zk: str,
    session_timeout: float,
    data_dir: Path | None,
    journal_dir: Path | None,
) -> None:
    """Produce records to TOPIC: keyed records by key hash, others round-robin; reports throughput."""
    config = ProduceConfig(
        topic=topic,
        count=None if forever else count,
        rate=rate,
        size=size,
        keys=keys,
        batch=batch,
        journal_records=journal_records,
    )
    stop = stop_on_signals()
    journal = open_journal(journal_dir, "producer")
    progress = _Progress(config.count)
    with ZkClient(zk_config(zk, session_timeout), name="producer") as client:
        producer = Producer(client, resolve_data_dir(data_dir), config, journal).start()
        try:
            producer.run(stop, progress=progress.show)
        finally:
            producer.close()
            progress.done()
    s = producer.stats
    click.echo(
        f"produced {s.records} records to {topic} ({producer.partitions} partitions) in {s.seconds:.2f} s: "
        f"{s.records_per_s:,.0f} records/s, {s.mb_per_s:.2f} MB/s"
    )
    journal.emit("process.stopped", reason="signal" if stop.is_set() else "done")
    journal.close()


@click.command()
@click.argument("topic")
@click.option("--partition", "-p", type=click.IntRange(0), default=None, help="Only this partition [all].")
@click.option("--offset", type=click.IntRange(0), default=0, show_default=True, help="First offset to read.")
@click.option("--max-records", type=click.IntRange(1), default=None, help="At most this many per partition.")
@click.option("--summary", is_flag=True, help="Print counts per partition instead of records.")
@click.option("--json", "as_json", is_flag=True, help="With --summary: print JSON.")
@zk_options
@data_dir_option
def fetch(
    topic: str,
    partition: int | None,
    offset: int,
    max_records: int | None,
    summary: bool,
    as_json: bool,
    zk: str,
    session_timeout: float,
    data_dir: Path | None,
) -> None:
    """Read TOPIC's records straight from the partition logs (no consumer group): one line per record."""
    with ZkClient(zk_config(zk, session_timeout), name="fetch") as client:
        info = TopicAdmin(client).describe(topic)
    if partition is not None and partition >= info.partitions:
        raise ConfigurationError(f"topic {topic!r} has partitions 0..{info.partitions - 1}, not {partition}")
    root = resolve_data_dir(data_dir)
    rows = [
        _fetch_partition(root, topic, p, offset, max_records, echo_records=not summary)
        for p in ([partition] if partition is not None else range(info.partitions))
    ]
    if not summary:
        return
    total = sum(r.records for r in rows)
    if as_json:
        echo_json({"topic": topic, "partitions": [asdict(r) for r in rows], "records": total})
        return
    for r in rows:
        click.echo(f"partition {r.partition}: {r.records} records (offsets {r.first}..{r.last})")
    click.echo(f"total: {total} records")


def _fetch_partition(
    root: Path, topic: str, partition: int, offset: int, max_records: int | None, *, echo_records: bool
) -> _PartitionSummary:
    n = 0
    first = last = None
    with PartitionReader(root, topic, partition) as reader:
        position = max(offset, reader.start_offset)
        while max_records is None or n < max_records:
            limit = 10_000 if max_records is None else min(10_000, max_records - n)
            records = reader.read(position, max_records=limit)
            if not records:
                break
            if echo_records:
                for rec in records:
                    key = rec.key.decode("utf-8", "replace") if rec.key is not None else "-"
                    value = rec.value.decode("utf-8", "replace")
                    click.echo(f"{partition}\t{rec.offset}\t{rec.timestamp_ms}\t{key}\t{value}")
            first = records[0].offset if first is None else first
            last = records[-1].offset
            n += len(records)
            position = records[-1].offset + 1
    return _PartitionSummary(partition, n, first, last)
