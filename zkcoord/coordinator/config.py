"""The coordinator's settings."""

from __future__ import annotations

from dataclasses import dataclass

from zkcoord.errors import ConfigurationError
from zkcoord.protocol.assignors import ASSIGNORS


@dataclass(frozen=True, slots=True)
class CoordinatorConfig:
    """How the coordinator rebalances.  Validates itself; raises :class:`ConfigurationError`.

    :param assignor: for eager groups: ``range`` (Kafka 0.8.2's default), ``roundrobin``, or ``uniform`` (KIP-848's,
        here with no previous owners; ``sticky`` is its alias).  A group whose members all registered
        ``incremental`` always uses ``uniform``, given what they fetch now.
    :param rebalance_timeout_s: how long one phase (stop or start) waits for every acknowledgement; a phase that
        sends stop-fetchers waits this plus the longest poll interval its stopped members publish (their stop is
        acknowledged only after their application's next ``poll()``:
        :func:`~zkcoord.coordinator.attempt.phase_timeout_s`).
    :param max_rebalance_retries: attempts after the first before a rebalance is reported failed (seed D).
    :param rebalance_backoff_s: the pause before a retry, doubled on each further retry.
    :param batch_size: commands per ZooKeeper transaction; larger groups are written as several pipelined ones.
    :param max_concurrent: how many groups may be mid-rebalance at once (the rest wait in the request queue).
    :param examine_batch: how many queued groups are read together (pipelined across groups) before each is
        planned; a new coordinator re-examines every group in batches of this size.
    :param fence_grace_s: how long a consumer-protocol member fenced for not revoking in time keeps its partitions
        held unless it registers again first: ZooKeeper's longest session (``maxSessionTimeout``, 40 s by default),
        past which its session has expired and its lease (S6) has stopped its fetching.
    :param static_hold_s: how long a static member (an instance id) that left keeps its assignment for a member
        coming back with its instance id (Kafka's consumer-protocol session timeout, 45 s by default); nobody fetches
        its partitions meanwhile.  Held in the coordinator's memory: a failover ends every hold.
    :param unsafe_no_fencing: the ``--unsafe`` contrast of the demo: coordinator writes skip the epoch check.
        Never set it outside a demonstration.
    """

    assignor: str = "range"
    rebalance_timeout_s: float = 10.0
    max_rebalance_retries: int = 4
    rebalance_backoff_s: float = 0.2
    batch_size: int = 200
    max_concurrent: int = 64
    examine_batch: int = 200
    metrics_interval_s: float = 10.0
    fence_grace_s: float = 40.0
    static_hold_s: float = 45.0
    unsafe_no_fencing: bool = False

    def __post_init__(self) -> None:
        if self.assignor not in ASSIGNORS:
            raise ConfigurationError(f"unknown assignor {self.assignor!r}; choose one of {', '.join(ASSIGNORS)}")
        if not 0.05 <= self.rebalance_timeout_s <= 3600:
            raise ConfigurationError(f"rebalance timeout must be within 0.05..3600 s, got {self.rebalance_timeout_s}")
        if not 0 <= self.max_rebalance_retries <= 100:
            raise ConfigurationError(f"max rebalance retries must be within 0..100, got {self.max_rebalance_retries}")
        if not 0 <= self.rebalance_backoff_s <= 600:
            raise ConfigurationError(f"rebalance backoff must be within 0..600 s, got {self.rebalance_backoff_s}")
        if not 1 <= self.batch_size <= 1000:
            raise ConfigurationError(f"batch size must be within 1..1000, got {self.batch_size}")
        if not 1 <= self.max_concurrent <= 10_000:
            raise ConfigurationError(f"max concurrent rebalances must be within 1..10000, got {self.max_concurrent}")
        if not 1 <= self.examine_batch <= 10_000:
            raise ConfigurationError(f"examine batch must be within 1..10000, got {self.examine_batch}")
        if not 0 <= self.static_hold_s <= 3600:
            raise ConfigurationError(f"static hold must be within 0..3600 s, got {self.static_hold_s}")
        if not 0 <= self.fence_grace_s <= 3600:
            raise ConfigurationError(f"fence grace must be within 0..3600 s, got {self.fence_grace_s}")
        if not 0.1 <= self.metrics_interval_s <= 3600:
            raise ConfigurationError(f"metrics interval must be within 0.1..3600 s, got {self.metrics_interval_s}")
