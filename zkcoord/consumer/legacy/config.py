"""The legacy protocol's own settings: Kafka 0.8.2's ``rebalance.*`` and ``partition.assignment.strategy``."""

from __future__ import annotations

from dataclasses import dataclass

from zkcoord.errors import ConfigurationError

#: What Kafka 0.8.2's ``partition.assignment.strategy`` accepts.
KAFKA_08_ASSIGNORS = ("range", "roundrobin")


@dataclass(frozen=True, slots=True)
class LegacyConfig:
    """How a legacy consumer rebalances.  Frozen; raises :class:`ConfigurationError` on bad values.

    The rest of a legacy consumer's settings (group, subscription, ZooKeeper, offsets policy, auto-commit) come
    from :class:`zkcoord.consumer.config.ConsumerConfig`, shared with the coordinator consumer.

    :param rebalance_max_retries: attempts one rebalance makes before giving up (``rebalance.max.retries``,
        Kafka's default 4).  Kafka's FAQ rule of thumb: ``retries * backoff`` should exceed the session timeout,
        so that an owner znode of a dead member has expired before the last attempt.
    :param rebalance_backoff_s: the pause after each failed attempt (``rebalance.backoff.ms``, which defaults to
        ``zookeeper.sync.time.ms`` = 2000 in Kafka).
    :param assignor: ``range`` (Kafka's default) or ``roundrobin`` (``partition.assignment.strategy``).
    """

    rebalance_max_retries: int = 4
    rebalance_backoff_s: float = 2.0
    assignor: str = "range"

    def __post_init__(self) -> None:
        if not 1 <= self.rebalance_max_retries <= 1000:
            raise ConfigurationError(f"rebalance_max_retries must be within 1..1000, got {self.rebalance_max_retries}")
        if not 0.0 <= self.rebalance_backoff_s <= 600:
            raise ConfigurationError(f"rebalance_backoff_s must be within 0..600 s, got {self.rebalance_backoff_s}")
        if self.assignor not in KAFKA_08_ASSIGNORS:
            # The coordinator's uniform assignor needs the registry as it stands; 0.8 clients never had one.
            known = ", ".join(KAFKA_08_ASSIGNORS)
            raise ConfigurationError(f"unknown partition assignment strategy {self.assignor!r} (known: {known})")
