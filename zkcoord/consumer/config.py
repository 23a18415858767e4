"""The consumer's settings: what it subscribes to and how it behaves.  Frozen; validates itself."""

from __future__ import annotations

import re
import socket
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from zkcoord.consumer.assignors import check_assignors
from zkcoord.errors import ConfigurationError
from zkcoord.layout import topic_regex
from zkcoord.layout.acl import Credential
from zkcoord.layout.legacy_paths import check_group
from zkcoord.layout.names import validate_group, validate_rack, validate_topic
from zkcoord.layout.registrations import (
    MAX_POLL_INTERVAL_MS,
    MAX_THREADS,
    MemberRegistration,
    Pattern,
    check_instance_id,
)
from zkcoord.protocol.offset_reset import DEFAULT as DEFAULT_OFFSET_RESET
from zkcoord.protocol.offset_reset import OffsetReset, check_policy
from zkcoord.runtime.shutdown import DEFAULT_CONSUMER_TIMEOUT_S, validate_timeout

StartFrom = Literal["earliest", "latest"]
Rebalance = Literal["eager", "incremental", "consumer", "classic"]


@dataclass(frozen=True, slots=True)
class Subscription:
    """Kafka 0.8's ``TopicCount``: static ``{topic: threads}``, or one ``white_list``/``black_list`` regex.

    A regex must be in the topic-pattern dialect (:mod:`zkcoord.layout.topic_regex`), which Python and Java evaluate
    alike; it matches whole topic names.  Raises :class:`~zkcoord.errors.ConfigurationError` (a
    :class:`~zkcoord.errors.TopicPatternError` for a regex outside the dialect).
    """

    pattern: Pattern
    topics: Mapping[str, int]

    @classmethod
    def static(cls, topics: Mapping[str, int]) -> Subscription:
        return cls(Pattern.STATIC, dict(topics))

    @classmethod
    def whitelist(cls, regex: str, threads: int = 1) -> Subscription:
        return cls(Pattern.WHITE_LIST, {regex: threads})

    @classmethod
    def blacklist(cls, regex: str, threads: int = 1) -> Subscription:
        return cls(Pattern.BLACK_LIST, {regex: threads})

    def __post_init__(self) -> None:
        if not self.topics:
            raise ConfigurationError("a subscription needs at least one topic")
        for key, threads in self.topics.items():
            if not 1 <= threads <= MAX_THREADS:
                raise ConfigurationError(f"thread count for {key!r} must be within 1..{MAX_THREADS}, got {threads}")
            if self.pattern is Pattern.STATIC:
                validate_topic(key)
        if self.pattern is not Pattern.STATIC:
            if len(self.topics) != 1:
                raise ConfigurationError("a wildcard subscription holds exactly one regex")
            topic_regex.check(next(iter(self.topics)))

    def registration(
        self,
        timestamp_ms: int,
        *,
        migrating: bool = False,
        incremental: bool = False,
        consumer_protocol: bool = False,
        max_poll_interval_ms: int | None = None,
        instance_id: str | None = None,
        rack: str | None = None,
        assignors: tuple[str, ...] = (),
    ) -> MemberRegistration:
        """The member znode's content for this subscription (``max_poll_interval_ms``, ``rack`` None: not
        published)."""
        return MemberRegistration(
            self.pattern,
            dict(self.topics),
            timestamp_ms,
            migrating=migrating,
            incremental=incremental,
            max_poll_interval_ms=max_poll_interval_ms,
            consumer_protocol=consumer_protocol,
            instance_id=instance_id,
            rack=rack,
            assignors=assignors,
        )


def new_consumer_id(group: str, host: str | None = None, now_ms: int | None = None) -> str:
    """Kafka's consumer id ``<group>_<host>-<ms>-<8 hex>`` (``ZookeeperConsumerConnector.consumerIdString``)."""
    host = re.sub(r"[^A-Za-z0-9.-]", "-", host or socket.gethostname()) or "host"
    ms = now_ms if now_ms is not None else time.time_ns() // 1_000_000
    return f"{group}_{host}-{ms}-{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True, slots=True)
class ConsumerConfig:
    """How a consumer joins its group and consumes.  Raises :class:`ConfigurationError` on bad values.

    :param zk: ZooKeeper connect string ``HOST:PORT[/chroot]``.
    :param data_dir: the partition logs' directory.
    :param session_timeout_s: the ZooKeeper session timeout; the lease (S6) is ``lease_fraction`` of it.
    :param max_poll_records: the most records one ``poll()`` returns (KIP-41).
    :param auto_commit: commit consumed positions every ``auto_commit_interval_s`` from ``poll()``.
    :param start_from: where a partition without a committed offset starts: ``earliest`` or ``latest``.
    :param offset_reset: what to do with a position outside its partition's log (a committed offset beyond the
        log's high water or below its start): ``earliest``, ``latest`` or ``none`` (hold the partition and report
        it); journalled as ``offsets.reset``.  Separate from ``start_from``, and ``earliest`` by default rather than
        Kafka's ``latest``: :mod:`zkcoord.protocol.offset_reset` says why.
    :param unsafe_no_fencing: the demo's contrast only: accept stale commands and fetch without a lease.
    :param migrating: join a group that still has ``zk-client`` members (live migration, ``docs/migration.md``):
        register in Kafka 0.8's registry too, fetch a partition only while holding its 0.8 owner znode, and commit
        offsets to both protocols' paths.
    :param rebalance: ``eager`` (the seed's protocol: every rebalance stops the whole group) or ``incremental``
        (the member says it can be rebalanced incrementally: when every member of the group says so, the coordinator
        moves only the partitions that change owner, with KIP-848's uniform assignor; ``docs/protocol.md``), or
        ``classic`` (seed 001's classic protocol: a leader member computes the assignment with a strategy every
        member supports, ``assignors``; ``docs/classic-protocol.md``), or
        ``consumer`` (KIP-848's consumer protocol, Kafka's ``group.protocol=consumer``: when every member speaks it,
        the coordinator reconciles each member on its own, with group and member epochs; ``docs/protocol.md``,
        "KIP-848").
    :param instance_id: a static member's instance id (KIP-848's ``group.instance.id``; consumer protocol only): a
        member that leaves and comes back with it within the coordinator's hold (``static_hold_s``) gets its
        partitions back and nobody else is disturbed; a second live member with it is refused
        (:class:`~zkcoord.errors.InstanceIdInUseError`, after waiting out a session that may be our own previous
        process's).
    :param shutdown_timeout_s: how long ``close()`` may take, whatever ZooKeeper does (Kafka's ``close(Duration)``;
        ``docs/consumer.md``, "Stopping").
    :param max_poll_interval_s: how long the application may take between two ``poll()`` calls (Kafka's
        ``max.poll.interval.ms``, 300 s by default; 1..86400).  Published in the member's registration, where the
        coordinator reads it: a stop-fetcher is acknowledged only once the application's next ``poll()`` has run its
        revoke callback, so a rebalance's stop phase waits up to this long for this member.  Past it the consumer
        takes the application for hung and leaves the group (KIP-62), rejoining at its next ``poll()``.
    :param rack: the consumer's rack (Kafka's ``client.rack``), published in its registration: the coordinator's
        uniform assignor prefers to give it partitions with a replica on a broker of that rack (``broker --rack``),
        where that costs neither balance nor stickiness.  None: no rack.
    :param assignors: the classic protocol's (``rebalance="classic"``, seed 001): the assignment strategies this
        member supports, most preferred first (Kafka's ``partition.assignment.strategy``): built-in names or
        ``module:Class`` (``docs/classic-protocol.md``).  The coordinator picks one every member supports; the leader
        member computes the assignment with it.  Each must load, or the config is refused.
    """

    group: str
    subscription: Subscription
    zk: str
    data_dir: Path
    session_timeout_s: float = 6.0
    max_poll_records: int = 500
    auto_commit: bool = True
    auto_commit_interval_s: float = 5.0
    start_from: StartFrom = "earliest"
    offset_reset: OffsetReset = DEFAULT_OFFSET_RESET
    consumer_id: str = field(default="")
    lease_fraction: float = 0.5
    unsafe_no_fencing: bool = False
    migrating: bool = False
    rebalance: Rebalance = "eager"
    shutdown_timeout_s: float = DEFAULT_CONSUMER_TIMEOUT_S
    max_poll_interval_s: float = 300.0
    instance_id: str | None = None
    rack: str | None = None
    zk_auth: Credential | None = None
    assignors: tuple[str, ...] = ("range",)

    def _check_protocol(self) -> None:
        if self.rebalance not in ("eager", "incremental", "consumer", "classic"):
            raise ConfigurationError(
                f"rebalance must be 'eager', 'incremental', 'consumer' or 'classic', got {self.rebalance!r}"
            )
        if self.rebalance == "classic":
            check_assignors(self.assignors)
            if self.migrating:
                raise ConfigurationError("a classic-protocol member cannot be migrating")
        if self.instance_id is not None:
            check_instance_id(self.instance_id)
            if self.rebalance != "consumer":
                raise ConfigurationError("an instance id is the consumer protocol's (--protocol consumer)")
        if self.rebalance == "consumer" and self.migrating:
            raise ConfigurationError("a consumer-protocol member cannot be migrating (migration is the classic path's)")

    def __post_init__(self) -> None:
        validate_group(self.group)
        if self.migrating:
            check_group(self.group)  # its zk-client registry lives at /consumers/<group>
            if self.unsafe_no_fencing:
                raise ConfigurationError("a migrating consumer cannot run unsafe: its claims are the migration's fence")
        if not 0.5 <= self.session_timeout_s <= 600:
            raise ConfigurationError(f"session timeout must be within 0.5..600 s, got {self.session_timeout_s}")
        if not 1 <= self.max_poll_records <= 1_000_000:
            raise ConfigurationError(f"max_poll_records must be within 1..1000000, got {self.max_poll_records}")
        if not 0.01 <= self.auto_commit_interval_s <= 3600:
            raise ConfigurationError(
                f"auto-commit interval must be within 0.01..3600 s, got {self.auto_commit_interval_s}"
            )
        if self.start_from not in ("earliest", "latest"):
            raise ConfigurationError(f"start_from must be 'earliest' or 'latest', got {self.start_from!r}")
        check_policy(self.offset_reset)
        self._check_protocol()
        validate_timeout(self.shutdown_timeout_s)
        if not 1 <= self.max_poll_interval_s <= MAX_POLL_INTERVAL_MS / 1000:
            raise ConfigurationError(f"max poll interval must be within 1..86400 s, got {self.max_poll_interval_s}")
        if not 0.1 <= self.lease_fraction <= 0.9:
            raise ConfigurationError(f"lease fraction must be within 0.1..0.9, got {self.lease_fraction}")
        if self.rack is not None:
            validate_rack(self.rack)
        if self.zk_auth is not None and self.migrating:
            raise ConfigurationError(
                "--zk-auth: a migrating member writes Kafka 0.8's tree, which these ACLs close (docs/security.md)"
            )
        if self.consumer_id and not self.consumer_id.startswith(f"{self.group}_"):
            raise ConfigurationError(f"consumer id {self.consumer_id!r} must start with '{self.group}_' (Kafka's form)")
