"""What a scale run is: its parameters, its result record, and the constants the other modules share."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import Any

from zkcoord.errors import ConfigurationError

TOPIC = "scale-topic"
GROUP_PREFIX = "scale-"
GOAL_S = 10.0
PROFILE_RATE = 100  # py-spy samples per second (non-blocking: the target is not paused to sample)
STARTUP = "coordinator startup"  # the trigger of a new coordinator's first examination
#: journal events that mean the coordinator is working on a group
WORK_EVENTS = frozenset(
    {
        "rebalance.requested",
        "rebalance.skipped",
        "rebalance.started",
        "rebalance.barrier",
        "rebalance.completed",
        "rebalance.aborted",
        "rebalance.retrying",
        "rebalance.failed",
        "command.sent",
        "command.acked",
    }
)


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def seconds(ns: int) -> float:
    return round(ns / 1e9, 3)


@dataclass(frozen=True, slots=True)
class Params:
    """One run's configuration (the command line's options); :meth:`key` names its row in the results file."""

    groups: int = 1000
    consumers: int = 10_000
    processes: int = 4
    partitions: int = 4
    session_timeout_s: float = 4.0
    consumer_session_timeout_s: float = 10.0
    zk_heap_mb: int = 1024
    zk_fsync: bool = True
    failovers: int = 3
    profile: bool = False
    form_timeout_s: float = 900.0
    failover_timeout_s: float = 300.0

    def __post_init__(self) -> None:
        if self.groups < 1 or self.consumers < self.groups or self.consumers % self.groups:
            raise ConfigurationError(f"--consumers must be a positive multiple of --groups, got {self.consumers}")
        if not 1 <= self.processes <= self.groups:
            raise ConfigurationError(f"--processes must be within 1..{self.groups} (the groups), got {self.processes}")
        if self.failovers < 1:
            raise ConfigurationError(f"--failovers must be at least 1, got {self.failovers}")

    @property
    def per_group(self) -> int:
        return self.consumers // self.groups

    def group_names(self) -> list[str]:
        return [f"{GROUP_PREFIX}{i:04d}" for i in range(self.groups)]

    def key(self) -> str:
        return f"{self.groups}g/{self.consumers}c/{self.processes}p"


@dataclass
class Result:
    """What a run measured, filled in phase by phase and saved as one row (:func:`zkcoord.bench.scale.report.save`)."""

    key: str
    params: dict[str, Any]
    formation: dict[str, Any] = field(default_factory=dict)
    failovers: list[dict[str, Any]] = field(default_factory=list)
    swarm: dict[str, Any] = field(default_factory=dict)
    probe: dict[str, Any] = field(default_factory=dict)
    profile_files: dict[str, str] = field(default_factory=dict)
