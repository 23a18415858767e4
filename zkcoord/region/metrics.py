"""A region member's metrics (the seed's): partitions assigned, topics consumed, last and maximum drain time, plus
the client state.  :class:`RegionStats` holds them (plain values, written by the event thread);
:class:`RegionCollector` shows them to a Prometheus registry (``docs/metrics.md`` lists them; a unit test holds the
two equal).  A scrape only reads."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric

from zkcoord.region.states import ClientState


class RegionStats:
    def __init__(self) -> None:
        self.partitions_assigned = 0
        self.topics_consumed = 0
        self.last_drain_ms = 0.0
        self.max_drain_ms = 0.0
        self.drains = 0
        self.state = ClientState.SUBSCRIBED

    def assigned(self, partitions: int, topics: int) -> None:
        self.partitions_assigned, self.topics_consumed = partitions, topics

    def drained(self, ms: float) -> None:
        self.last_drain_ms = ms
        self.max_drain_ms = max(self.max_drain_ms, ms)
        self.drains += 1


class RegionCollector:
    """prometheus_client's custom collector of one member's :class:`RegionStats`, labelled by region and member."""

    def __init__(self, stats: RegionStats, region: str, member: str) -> None:
        self.stats = stats
        self.labels = [region, member]

    def collect(self) -> Iterator[Metric]:
        names = ["region", "member"]
        for name, doc, value in (
            ("zkcoord_region_partitions_assigned", "Partitions assigned to this member (nPartitionsAssigned).",
             self.stats.partitions_assigned),
            ("zkcoord_region_topics_consumed", "Topics this member consumes in the group (nConsumedTopics).",
             self.stats.topics_consumed),
            ("zkcoord_region_drain_last_milliseconds", "Time the last drain took (drainTimeMillis).",
             self.stats.last_drain_ms),
            ("zkcoord_region_drain_max_milliseconds", "Longest drain so far (drainTimeMillisMax).",
             self.stats.max_drain_ms),
        ):  # fmt: skip
            family = GaugeMetricFamily(name, doc, labels=names)
            family.add_metric(self.labels, value)
            yield family
        state = GaugeMetricFamily(
            "zkcoord_region_client_state",
            "1 for the member's client state, 0 for the others.",
            labels=[*names, "state"],
        )
        for s in ClientState:
            state.add_metric([*self.labels, s.value], 1.0 if s is self.stats.state else 0.0)
        yield state
