"""What ``zkcoord bench rebalance`` runs: :class:`BenchConfig`, validated on construction."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from zkcoord.bench.rebalance.timeline import CONSUMER, DEFAULT_PROTOCOLS, LEGACY, PROTOCOLS
from zkcoord.errors import ConfigurationError

#: how a run reports its progress: one line at a time
Progress = Callable[[str], None]

#: consumers per worker process when ``workers`` is not given
CONSUMERS_PER_WORKER = 25

JOIN_LEAVE = "join-leave"
ROLLING_RESTART = "rolling-restart"
#: what a run measures: joins and leaves under every protocol, and a rolling restart of static members (KIP-848's
#: instance ids: the consumer protocol only)
SCENARIOS = (JOIN_LEAVE, ROLLING_RESTART)


@dataclass(frozen=True)
class BenchConfig:
    """What ``zkcoord bench rebalance`` runs.  Validated on construction (:class:`ConfigurationError`)."""

    protocols: tuple[str, ...] = DEFAULT_PROTOCOLS
    scenarios: tuple[str, ...] = (JOIN_LEAVE,)
    consumers: int = 50
    partitions: int = 500
    groups: int = 1
    trials: int = 5
    session_timeout_s: float = 6.0
    legacy_backoff_s: float = 2.0
    legacy_retries: int = 4
    workers: int | None = None
    zk: str | None = None
    run_dir: Path | None = None
    change_timeout_s: float = 60.0
    form_timeout_s: float | None = None
    floor_samples: int = 50
    max_poll_records: int = 50
    #: rolling-restart: how many static members are restarted, one after the other (None: every one)
    restarts: int | None = None

    def __post_init__(self) -> None:
        if not self.protocols:
            raise ConfigurationError("give at least one --protocol")
        for protocol in self.protocols:
            if protocol not in PROTOCOLS:
                raise ConfigurationError(f"unknown protocol {protocol!r}; choose from {', '.join(PROTOCOLS)}")
        if len(set(self.protocols)) != len(self.protocols):
            raise ConfigurationError("each --protocol may be given once")
        self._check_scenarios()
        ranges: list[tuple[str, float, float, float]] = [
            ("--consumers", self.consumers, 1, 5000),
            ("--partitions", self.partitions, 1, 10_000),
            ("--groups", self.groups, 1, 100),
            ("--trials", self.trials, 1, 1000),
            ("--workers", self.workers if self.workers is not None else 1, 1, 256),
            ("--legacy-backoff", self.legacy_backoff_s, 0, 600),
            ("--legacy-retries", self.legacy_retries, 1, 1000),
            ("--session-timeout", self.session_timeout_s, 0.5, 600),
            ("--change-timeout", self.change_timeout_s, 1, 3600),
            ("floor samples", self.floor_samples, 1, 10_000),
            ("max poll records", self.max_poll_records, 1, 10_000),
        ]
        for name, value, low, high in ranges:
            if not low <= value <= high:
                raise ConfigurationError(f"{name} must be within {low:g}..{high:g}, got {value:g}")

    def _check_scenarios(self) -> None:
        if not self.scenarios or len(set(self.scenarios)) != len(self.scenarios):
            raise ConfigurationError("give each --scenario once, at least one")
        for scenario in self.scenarios:
            if scenario not in SCENARIOS:
                raise ConfigurationError(f"unknown scenario {scenario!r}; choose from {', '.join(SCENARIOS)}")
        if ROLLING_RESTART in self.scenarios and CONSUMER not in self.protocols:
            raise ConfigurationError(
                f"--scenario {ROLLING_RESTART} restarts static members (instance ids), which only the {CONSUMER} "
                f"protocol has: add --protocol {CONSUMER}"
            )
        if JOIN_LEAVE not in self.scenarios and self.protocols != (CONSUMER,):
            others = ", ".join(p for p in self.protocols if p != CONSUMER)
            raise ConfigurationError(
                f"--scenario {ROLLING_RESTART} alone runs only the {CONSUMER} protocol, not {others}: give "
                f"--protocol {CONSUMER}, or add --scenario {JOIN_LEAVE}"
            )
        if self.restarts is not None and not 1 <= self.restarts <= self.consumers:
            raise ConfigurationError(
                f"--restarts must be within 1..{self.consumers} (--consumers), got {self.restarts}"
            )
        if self.restarts is not None and ROLLING_RESTART not in self.scenarios:
            raise ConfigurationError(f"--restarts needs --scenario {ROLLING_RESTART}")

    @property
    def worker_count(self) -> int:
        total = self.consumers * self.groups
        wanted = self.workers if self.workers is not None else math.ceil(total / CONSUMERS_PER_WORKER)
        return max(1, min(wanted, total + 1))

    @property
    def restart_count(self) -> int:
        """rolling-restart: the static members restarted."""
        return self.restarts if self.restarts is not None else self.consumers

    @property
    def form_deadline_s(self) -> float:
        if self.form_timeout_s is not None:
            return self.form_timeout_s
        legacy_round = self.legacy_retries * self.legacy_backoff_s if LEGACY in self.protocols else 0.0
        return 60.0 + 0.5 * self.consumers * self.groups + 4 * legacy_round
