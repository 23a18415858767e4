"""The coordinator's rebalance counters (``coordinator.metrics`` journal events)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass
class Metrics:
    """Counters in the spirit of Kafka's coordinator metrics (``coordinator.metrics`` journal events)."""

    rebalances_started: int = 0
    rebalances_completed: int = 0
    rebalances_skipped: int = 0
    rebalances_failed: int = 0
    attempts_aborted: int = 0
    attempts_retried: int = 0
    latency_ms: list[float] = field(default_factory=list)

    def snapshot(self, groups_by_state: Mapping[str, int]) -> dict[str, object]:
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
