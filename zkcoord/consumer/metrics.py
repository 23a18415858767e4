"""A consumer's metrics in Prometheus' terms: the counters its threads add to (:class:`ConsumerStats`) and the
collector that shows them with the gauges of :meth:`~zkcoord.consumer.client.Consumer.metrics`
(:class:`ConsumerCollector`), for either consumer (the coordinator's and the ``zk-client`` one).

The metrics follow Kafka's consumer metrics where they apply (``assigned-partitions``, ``records-consumed-rate``,
``records-lag``, ``commit-latency``, ``last-rebalance-seconds-ago``: ``reference/modern-group-protocols.md`` §4) and
add this design's own: the lease (S6), commands applied and refused by kind (``stale`` ones are the S5 fence at
work), commits the ownership registry refused (S3's fence).  Lag is per partition (a consumer's partitions are few);
nothing is labelled by record, key or consumer id beyond the one ``zkcoord_consumer_info`` series.  Every family is
listed in ``docs/metrics.md`` (a unit test holds the two equal).

Threads: :class:`ConsumerStats` is thread-safe (prometheus_client's metrics lock each update); the commit path, the
command thread and the application's thread add to it.  :meth:`ConsumerCollector.collect` runs on the scraping
thread and reads the partition logs' ends there.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final, Protocol

from prometheus_client import Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric

from zkcoord.consumer.config import ConsumerConfig
from zkcoord.consumer.shared import ConsumerMetrics

#: why a command was refused (``zkcoord_consumer_commands_refused_total``'s ``reason``): ``stale``, older than one
#: applied (S5); ``forged``, not vouched for by the group's state or naming threads not ours; ``misaddressed``, for
#: another group or another registration of ours; ``malformed``, not a command at all
REFUSALS: Final = ("stale", "forged", "misaddressed", "malformed")
#: the commands a consumer applies
OPTIONS: Final = ("stop-fetcher", "start-fetcher")
#: commit latency buckets (seconds): one ZooKeeper transaction, from a fraction of a millisecond to a stalled server
COMMIT_BUCKETS: Final = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class ConsumerStats:
    """What a consumer counts as it goes (not registered anywhere: :class:`ConsumerCollector` shows it).  Any
    thread."""

    def __init__(self) -> None:
        self.commit_latency = Histogram(
            "zkcoord_consumer_commit_duration_seconds",
            "Time an offset commit took, over the commits ZooKeeper answered (landed, or refused by the fence).",
            buckets=COMMIT_BUCKETS,
            registry=None,
        )
        self.commit_failures = Counter(
            "zkcoord_consumer_commit_failures",
            "Offset commits that failed on ZooKeeper (nothing committed, or the outcome unknown).",
            registry=None,
        )
        self.commits_refused = Counter(
            "zkcoord_consumer_commit_partitions_refused",
            "Partitions whose commit the ownership registry refused: no longer ours (S3's fence).",
            registry=None,
        )
        self.commands_applied = Counter(
            "zkcoord_consumer_commands_applied", "Coordinator commands applied.", ["option"], registry=None
        )
        self.commands_refused = Counter(
            "zkcoord_consumer_commands_refused",
            "Coordinator commands refused (and deleted), by reason: stale is the S5 fence.",
            ["reason"],
            registry=None,
        )
        for option in OPTIONS:  # every series exists from the start, at 0 (a rate over a missing series is nothing)
            self.commands_applied.labels(option)
        for reason in REFUSALS:
            self.commands_refused.labels(reason)

    def committed(self, seconds: float, refused: int = 0) -> None:
        """A commit was answered after ``seconds``; ``refused`` partitions of it were fenced."""
        self.commit_latency.observe(seconds)
        if refused:
            self.commits_refused.inc(refused)

    def applied(self, option: str) -> None:
        self.commands_applied.labels(option).inc()

    def refused(self, reason: str) -> None:
        """A command was refused for ``reason``, one of :data:`REFUSALS`."""
        self.commands_refused.labels(reason).inc()

    def collect(self) -> Iterator[Metric]:
        for metric in (
            self.commit_latency,
            self.commit_failures,
            self.commits_refused,
            self.commands_applied,
            self.commands_refused,
        ):
            yield from metric.collect()


class MetricsSource(Protocol):
    """What :class:`ConsumerCollector` reads: :class:`~zkcoord.consumer.client.Consumer` and
    :class:`~zkcoord.consumer.legacy.client.LegacyConsumer` both are one."""

    @property
    def consumer_id(self) -> str: ...

    @property
    def config(self) -> ConsumerConfig: ...

    @property
    def stats(self) -> ConsumerStats: ...

    def metrics(self) -> ConsumerMetrics: ...


class ConsumerCollector:
    """Exposes one consumer (register it in the registry the process serves).  ``protocol``: ``coordinator`` or
    ``zk-client``, shown by ``zkcoord_consumer_info``."""

    def __init__(self, source: MetricsSource, protocol: str = "coordinator") -> None:
        self._source = source
        self._protocol = protocol

    def collect(self) -> Iterator[Metric]:
        source = self._source
        m = source.metrics()
        group = source.config.group
        yield InfoMetricFamily(
            "zkcoord_consumer",
            "This consumer: its group, id and protocol.",
            value={"group": group, "consumer": source.consumer_id, "protocol": self._protocol},
        )
        yield GaugeMetricFamily(
            "zkcoord_consumer_assigned_partitions", "Partitions being fetched now.", value=m.assigned_partitions
        )
        yield CounterMetricFamily(
            "zkcoord_consumer_records_consumed",
            "Records poll() handed to the application.",
            value=m.records_consumed_total,
        )
        lag = GaugeMetricFamily(
            "zkcoord_consumer_lag_records",
            "Records in an assigned partition's log beyond the consumed position (its log's end read at scrape time).",
            labels=["group", "topic", "partition"],
        )
        for tp, records in sorted(m.lag_by_partition.items()):
            lag.add_metric([group, tp.topic, str(tp.partition)], records)
        yield lag
        yield GaugeMetricFamily(
            "zkcoord_consumer_lease_valid",
            "1 while the lease holds (records may be handed out), 0 once it ran out (S6; zk-client: always 1).",
            value=int(m.lease_valid),
        )
        yield CounterMetricFamily(
            "zkcoord_consumer_rebalances", "Rebalances this consumer took part in, to the end.", value=m.rebalances
        )
        since = GaugeMetricFamily(
            "zkcoord_consumer_last_rebalance_seconds_ago", "Seconds since the last rebalance ended (none before one)."
        )
        took = GaugeMetricFamily(
            "zkcoord_consumer_last_rebalance_duration_seconds",
            "How long the last rebalance took here: stop received to start applied (none before one).",
        )
        if m.last_rebalance_seconds_ago is not None and m.rebalance_latency_ms_last is not None:
            since.add_metric([], m.last_rebalance_seconds_ago)
            took.add_metric([], m.rebalance_latency_ms_last / 1000)
        yield since
        yield took
        yield from source.stats.collect()
