"""The coordinator's metrics: its counters (journalled as ``coordinator.metrics``) and their Prometheus exposition.

:class:`Metrics` holds what a broker's coordinator counted since the broker started, across its terms, in the spirit
of KIP-848's group coordinator metrics (``reference/modern-group-protocols.md`` §4): rebalances started, completed,
skipped and failed, attempts retried and aborted, their latency, the commands sent and acknowledged, the writes the
fence refused.  The worker thread alone counts (plain integers); any thread reads them.

:class:`CoordinatorCollector` shows them to Prometheus (prometheus_client's custom-collector interface), with the
gauges read from the coordinator at scrape time (:class:`CoordinatorView`: its role, epoch, groups by state,
members).  No metric is labelled by group or member: a coordinator of 10 000 members must not make 10 000 series.
Every family is listed in ``docs/metrics.md`` (a unit test holds the two equal).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

from prometheus_client import Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

#: the group states the coordinator reports (``groups_by_state``); each is always exposed, at 0 if no group is in it
GROUP_STATES = ("empty", "rebalancing", "stable", "failed")
#: the commands a coordinator writes
COMMAND_OPTIONS = ("stop-fetcher", "start-fetcher")
#: rebalance latency buckets (seconds): a rebalance of a few members takes milliseconds, a stop that waits for
#: applications' polls up to their poll interval (minutes)
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
#: how many of the latest rebalances the journal's percentiles are computed over (bounded: a broker runs for months)
RECENT = 1000


def _per_option() -> dict[str, int]:
    return dict.fromkeys(COMMAND_OPTIONS, 0)


@dataclass
class Metrics:
    """Counters of one broker's coordinator since the broker started (see the module).  Worker thread writes."""

    rebalances_started: int = 0
    rebalances_completed: int = 0
    rebalances_skipped: int = 0
    rebalances_failed: int = 0
    attempts_aborted: int = 0
    attempts_retried: int = 0
    #: terms won (elections)
    elections: int = 0
    #: steps of the worker a fenced write ended (each ends the term: the write was refused, S1)
    fenced_writes: int = 0
    #: by option: commands written, acknowledged by their member, deleted without an acknowledgement (lost)
    commands_sent: dict[str, int] = field(default_factory=_per_option)
    commands_acked: dict[str, int] = field(default_factory=_per_option)
    commands_lost: dict[str, int] = field(default_factory=_per_option)
    #: the latency (ms) of the last :data:`RECENT` completed rebalances, for the journal's percentiles
    latency_ms: deque[float] = field(default_factory=lambda: deque(maxlen=RECENT))
    #: every completed rebalance's latency, request to stable (thread-safe; not registered anywhere by itself)
    latency: Histogram = field(
        default_factory=lambda: Histogram(
            "zkcoord_coordinator_rebalance_duration_seconds",
            "Time from a group's rebalance request to its stable state, over the rebalances completed.",
            buckets=LATENCY_BUCKETS,
            registry=None,
        )
    )

    def completed(self, latency_ms: float) -> None:
        """A rebalance completed, ``latency_ms`` after it was requested."""
        self.rebalances_completed += 1
        self.latency_ms.append(latency_ms)
        self.latency.observe(latency_ms / 1000)

    def snapshot(self, groups_by_state: Mapping[str, int]) -> dict[str, object]:
        """The ``coordinator.metrics`` journal event's fields."""
        lat = sorted(self.latency_ms)

        def pct(q: float) -> float | None:
            return round(lat[min(len(lat) - 1, int(q * len(lat)))], 1) if lat else None

        return {
            "rebalances_started": self.rebalances_started,
            "rebalances_completed": self.rebalances_completed,
            "rebalances_skipped": self.rebalances_skipped,
            "rebalances_failed": self.rebalances_failed,
            "attempts_aborted": self.attempts_aborted,
            "attempts_retried": self.attempts_retried,
            "latency_ms_p50": pct(0.5),
            "latency_ms_p95": pct(0.95),
            "latency_ms_max": lat[-1] if lat else None,
            "groups_by_state": dict(groups_by_state),
        }


@dataclass(frozen=True, slots=True)
class CoordinatorView:
    """What the gauges show of a coordinator at one scrape (:meth:`zkcoord.coordinator.core.Coordinator.view`)."""

    #: this broker holds the coordinator term
    active: bool
    #: the term's epoch while active; else the highest epoch this broker has seen (0: none yet)
    epoch: int
    #: groups by state as this term last examined them (zeros while not active)
    groups_by_state: Mapping[str, int]
    #: member registrations of every group, as this term last listed them
    members: int
    #: groups with a rebalance attempt in flight, and groups queued for examination
    rebalancing: int
    queued: int


_COUNTERS: tuple[tuple[str, str, str], ...] = (
    ("rebalances_started", "zkcoord_coordinator_rebalances_started", "Rebalances begun (retries not counted)."),
    ("rebalances_completed", "zkcoord_coordinator_rebalances_completed", "Rebalances that reached the stable state."),
    (
        "rebalances_skipped",
        "zkcoord_coordinator_rebalances_skipped",
        "Examinations of a requested group that found nothing to rebalance.",
    ),
    (
        "rebalances_failed",
        "zkcoord_coordinator_rebalances_failed",
        "Rebalances given up after max-rebalance-retries (FAILED persisted and reported).",
    ),
    (
        "attempts_retried",
        "zkcoord_coordinator_rebalance_attempts_retried",
        "Rebalance attempts that timed out or failed a write and were retried after a backoff.",
    ),
    (
        "attempts_aborted",
        "zkcoord_coordinator_rebalance_attempts_aborted",
        "Rebalance attempts dropped because a member left mid-rebalance (the next starts at once).",
    ),
    ("elections", "zkcoord_coordinator_elections", "Coordinator terms this broker won."),
    (
        "fenced_writes",
        "zkcoord_coordinator_fenced_writes",
        "Writes of this broker's term refused by the epoch fence (each ends the term).",
    ),
)

_PER_OPTION: tuple[tuple[str, str, str], ...] = (
    ("commands_sent", "zkcoord_coordinator_commands_sent", "Commands written into members' channels."),
    (
        "commands_acked",
        "zkcoord_coordinator_commands_acknowledged",
        "Commands their member acknowledged (deleted and recorded in its channel).",
    ),
    (
        "commands_lost",
        "zkcoord_coordinator_commands_lost",
        "Commands deleted without their member's acknowledgement (by hand: the attempt is retried).",
    ),
)


class CoordinatorCollector:
    """Exposes one coordinator's :class:`Metrics` and :class:`CoordinatorView` (register it in the registry the
    process serves).  ``collect`` runs on the scraping thread: it reads the counters and calls ``view``."""

    def __init__(self, metrics: Metrics, view: Callable[[], CoordinatorView]) -> None:
        self._metrics = metrics
        self._view = view

    def collect(self) -> Iterator[Metric]:
        m, view = self._metrics, self._view()
        for attr, name, doc in _COUNTERS:
            yield CounterMetricFamily(name, doc, value=getattr(m, attr))
        for attr, name, doc in _PER_OPTION:
            family = CounterMetricFamily(name, doc, labels=["option"])
            counts: dict[str, int] = getattr(m, attr)
            for option in COMMAND_OPTIONS:
                family.add_metric([option], counts[option])
            yield family
        yield from m.latency.collect()
        yield GaugeMetricFamily(
            "zkcoord_coordinator_active", "1 if this broker is the acting coordinator, else 0.", value=int(view.active)
        )
        yield GaugeMetricFamily(
            "zkcoord_coordinator_epoch",
            "The coordinator epoch: the term's while acting, else the highest this broker has seen.",
            value=view.epoch,
        )
        groups = GaugeMetricFamily(
            "zkcoord_coordinator_groups",
            "Consumer groups by state (as the acting coordinator saw them).",
            labels=["state"],
        )
        for state in GROUP_STATES:
            groups.add_metric([state], view.groups_by_state.get(state, 0))
        yield groups
        yield GaugeMetricFamily(
            "zkcoord_coordinator_members", "Registered members of every group (0 unless acting).", value=view.members
        )
        yield GaugeMetricFamily(
            "zkcoord_coordinator_rebalances_in_progress",
            "Groups with a rebalance attempt in flight.",
            value=view.rebalancing,
        )
        yield GaugeMetricFamily(
            "zkcoord_coordinator_rebalance_queue",
            "Groups queued for examination (requested, not started).",
            value=view.queued,
        )
