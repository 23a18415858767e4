"""Codecs of the znodes that say who is there: brokers, topics, the coordinator, group members.

``/brokers/ids/<id>`` (:class:`BrokerRegistration`), ``/brokers/topics/<topic>`` (:class:`TopicAssignment`),
``/consumers/coordinator`` (:class:`CoordinatorInfo`) and ``/consumers/groups/<g>/ids/<consumerId>``
(:class:`MemberRegistration`), in Kafka 0.8's JSON where it had one (``docs/zookeeper-layout.md``).  Every ``decode``
validates and raises :class:`~zkcoord.errors.CodecError` on anything malformed (S7).

Pure: no I/O, no clock.  May import :mod:`zkcoord.errors`, :mod:`zkcoord.layout.names`,
:mod:`zkcoord.layout.znodes` (the shared format), :mod:`zkcoord.layout.topic_regex` (subscriptions' regexes) and
:mod:`zkcoord.layout.classic` (a classic member's strategy names).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, Self

from zkcoord.errors import CodecError, InvalidNameError
from zkcoord.layout import topic_regex
from zkcoord.layout.classic import check_strategies
from zkcoord.layout.names import MAX_PARTITIONS, validate_rack, validate_topic
from zkcoord.layout.znodes import (
    FORMAT_VERSION,
    INT_TEXT,
    dump_object,
    get_field,
    load_object,
    nonneg_int,
    timestamp_field,
)

# --- brokers -----------------------------------------------------------------------------------------------------


def rack_field(obj: Mapping[str, Any], what: str, path: str | None) -> str | None:
    """The optional ``rack`` key of a registration: absent (None), or a name under :func:`validate_rack`'s rules.

    :raises CodecError: present but not a string, or not a legal rack name.
    """
    if "rack" not in obj:
        return None
    rack = obj["rack"]
    if not isinstance(rack, str):
        raise CodecError(what, "field 'rack' must be a string", path)
    try:
        return validate_rack(rack)
    except InvalidNameError as e:
        raise CodecError(what, str(e), path) from e


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    """``/brokers/ids/<id>``: Kafka 0.8.2's ``registerBrokerInZk`` JSON.

    ``rack`` is the broker's rack (Kafka's ``broker.rack``, which later versions of this JSON carry as ``"rack"``):
    the racks of a partition are those of the brokers holding its replicas, and KIP-848's uniform assignor prefers to
    give a member partitions with a replica in its rack.  Written only when set, so a registration without one stays
    byte-for-byte 0.8's, and 0.8's readers ignore the key.
    """

    host: str
    port: int
    timestamp_ms: int
    jmx_port: int = -1
    rack: str | None = None

    def encode(self) -> bytes:
        obj: dict[str, Any] = {
            "version": FORMAT_VERSION,
            "host": self.host,
            "port": self.port,
            "jmx_port": self.jmx_port,
            "timestamp": str(self.timestamp_ms),
        }
        if self.rack is not None:
            obj["rack"] = self.rack
        return dump_object(obj)

    @classmethod
    def decode(cls, data: bytes | None, path: str | None = None) -> Self:
        what = "broker registration"
        obj = load_object(what, data, path)
        host = get_field(obj, "host", str, what, path)
        port = nonneg_int(obj, "port", what, path)
        if port > 65535:
            raise CodecError(what, f"port {port} out of range", path)
        jmx = obj.get("jmx_port", -1)
        if not isinstance(jmx, int) or isinstance(jmx, bool):
            raise CodecError(what, "field 'jmx_port' must be int", path)
        return cls(
            host=host,
            port=port,
            timestamp_ms=timestamp_field(obj, what, path),
            jmx_port=jmx,
            rack=rack_field(obj, what, path),
        )


# --- topics ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TopicAssignment:
    """``/brokers/topics/<topic>``: ``{"version":1,"partitions":{"0":[broker ids],...}}`` (Kafka's replica map).

    Partitions are numbered ``0..n-1`` without gaps; each lists its replica broker ids (the first is the preferred
    leader in Kafka; here the data plane is a shared disk, so the list records placement only).
    """

    replicas: tuple[tuple[int, ...], ...]

    @property
    def partition_count(self) -> int:
        return len(self.replicas)

    def encode(self) -> bytes:
        return dump_object(
            {"version": FORMAT_VERSION, "partitions": {str(p): list(r) for p, r in enumerate(self.replicas)}}
        )

    @classmethod
    def decode(cls, data: bytes | None, path: str | None = None) -> Self:
        what = "topic assignment"
        obj = load_object(what, data, path)
        parts = get_field(obj, "partitions", dict, what, path)
        if not parts:
            raise CodecError(what, "no partitions", path)
        if len(parts) > MAX_PARTITIONS:
            raise CodecError(what, f"{len(parts)} partitions exceeds the limit {MAX_PARTITIONS}", path)
        replicas: dict[int, tuple[int, ...]] = {}
        for key, ids in parts.items():
            if not INT_TEXT.fullmatch(key):
                raise CodecError(what, f"partition key {key!r} is not a partition number", path)
            if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
                raise CodecError(what, f"replicas of partition {key} must be a list of broker ids", path)
            replicas[int(key)] = tuple(ids)
        if sorted(replicas) != list(range(len(replicas))):
            raise CodecError(what, f"partitions must be numbered 0..{len(replicas) - 1} without gaps", path)
        return cls(replicas=tuple(replicas[p] for p in range(len(replicas))))


# --- coordinator -------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CoordinatorInfo:
    """``/consumers/coordinator``: who coordinates, and under which epoch (Kafka's ``/controller`` plus the epoch)."""

    broker_id: int
    epoch: int
    timestamp_ms: int

    def encode(self) -> bytes:
        return dump_object(
            {
                "version": FORMAT_VERSION,
                "brokerid": self.broker_id,
                "epoch": self.epoch,
                "timestamp": str(self.timestamp_ms),
            }
        )

    @classmethod
    def decode(cls, data: bytes | None, path: str | None = None) -> Self:
        what = "coordinator info"
        obj = load_object(what, data, path)
        return cls(
            broker_id=nonneg_int(obj, "brokerid", what, path),
            epoch=nonneg_int(obj, "epoch", what, path),
            timestamp_ms=timestamp_field(obj, what, path),
        )


# --- group members -----------------------------------------------------------------------------------------------


class Pattern(Enum):
    """Kafka 0.8's ``TopicCount`` patterns."""

    STATIC = "static"
    WHITE_LIST = "white_list"
    BLACK_LIST = "black_list"


MAX_THREADS = 1024
#: the longest poll interval a registration may publish (a day, as ``ConsumerConfig.max_poll_interval_s``): the
#: coordinator waits that long for a stop, so a larger value is refused rather than trusted
MAX_POLL_INTERVAL_MS = 86_400_000


@dataclass(frozen=True, slots=True)
class MemberRegistration:
    """``/consumers/groups/<g>/ids/<consumerId>``: Kafka 0.8's consumer registration.

    ``subscription`` maps a topic (static) or a single regex (``white_list``/``black_list``) to a thread count.
    A regex must be in the topic-pattern dialect (:mod:`zkcoord.layout.topic_regex`): one outside it makes the
    registration malformed, as Python and Java would not agree on what it covers.  Matching it against topics is
    :mod:`zkcoord.protocol.subscriptions`' business.

    ``migrating`` marks a coordinator-protocol member of a group that still has ``zk-client`` members (live
    migration, ``docs/migration.md``); ``incremental`` says the member can be rebalanced incrementally (partial
    stop-fetcher, additive start-fetcher: ``docs/protocol.md``).  Each is written only when true, so other
    registrations stay byte-for-byte Kafka 0.8's, and 0.8's readers ignore the extra keys.

    ``max_poll_interval_ms`` is the member's poll interval (Kafka's ``max.poll.interval.ms``): how long its
    application may take between two ``poll()`` calls, so how long acknowledging a stop-fetcher may take (it is
    acknowledged once the application's next ``poll()`` has run its revoke callback).  The coordinator lengthens a
    stop phase's timeout by it.  ``None`` (the key absent): unknown -- a ``zk-client`` member, or one older than the
    key.  Written only when known.

    ``rack`` is the member's rack (Kafka's ``client.rack``): the uniform assignor prefers to give it partitions with
    a replica on a broker of that rack, where that costs neither balance nor stickiness
    (:mod:`zkcoord.protocol.assignors.racks`).  Written only when set.
    """

    pattern: Pattern
    subscription: Mapping[str, int]
    timestamp_ms: int
    migrating: bool = False
    incremental: bool = False
    max_poll_interval_ms: int | None = None
    #: ``"consumer"``: the member speaks KIP-848's consumer protocol (``docs/protocol.md``, "KIP-848"); written only
    #: then (``"protocol": "consumer"``), like the other optional keys
    consumer_protocol: bool = False
    #: a static member's instance id (KIP-848's ``group.instance.id``; consumer protocol only), written only when set
    instance_id: str | None = None
    rack: str | None = None
    #: the classic protocol's (seed 001, ``"protocol": "classic"``): the assignment strategies the member supports, in
    #: its order of preference (its JoinGroup protocols); non-empty exactly for a classic member
    assignors: tuple[str, ...] = ()

    @property
    def classic(self) -> bool:
        """Whether the member speaks the classic protocol (a leader member computes the assignment)."""
        return bool(self.assignors)

    def encode(self) -> bytes:
        obj: dict[str, Any] = {
            "version": FORMAT_VERSION,
            "pattern": self.pattern.value,
            "subscription": dict(self.subscription),
            "timestamp": str(self.timestamp_ms),
        }
        if self.migrating:
            obj["migrating"] = True
        if self.incremental:
            obj["incremental"] = True
        if self.max_poll_interval_ms is not None:
            obj["max_poll_interval_ms"] = self.max_poll_interval_ms
        if self.consumer_protocol:
            obj["protocol"] = "consumer"
        if self.assignors:
            obj["protocol"] = "classic"
            obj["assignors"] = list(self.assignors)
        if self.instance_id is not None:
            obj["instance_id"] = self.instance_id
        if self.rack is not None:
            obj["rack"] = self.rack
        return dump_object(obj)

    @classmethod
    def decode(cls, data: bytes | None, path: str | None = None) -> Self:
        what = "consumer registration"
        obj = load_object(what, data, path)
        raw_pattern = get_field(obj, "pattern", str, what, path)
        try:
            pattern = Pattern(raw_pattern)
        except ValueError as e:
            known = ", ".join(p.value for p in Pattern)
            raise CodecError(what, f"unknown pattern {raw_pattern!r} (expected one of {known})", path) from e
        sub = get_field(obj, "subscription", dict, what, path)
        if not sub:
            raise CodecError(what, "empty subscription", path)
        for key, threads in sub.items():
            if not isinstance(threads, int) or isinstance(threads, bool) or not 1 <= threads <= MAX_THREADS:
                raise CodecError(what, f"thread count for {key!r} must be an integer in 1..{MAX_THREADS}", path)
            if pattern is Pattern.STATIC:
                try:
                    validate_topic(key)
                except InvalidNameError as e:
                    raise CodecError(what, str(e), path) from e
        if pattern is not Pattern.STATIC:
            if len(sub) != 1:
                raise CodecError(what, f"a {pattern.value} subscription holds exactly one regex", path)
            regex = next(iter(sub))
            reason = topic_regex.refusal(regex)
            if reason is not None:
                why = f"invalid regex {regex[:60]!r} (outside the topic-pattern dialect): {reason}"
                raise CodecError(what, why, path)
        migrating = obj.get("migrating", False)
        if not isinstance(migrating, bool):
            raise CodecError(what, "field 'migrating' must be a boolean", path)
        incremental = obj.get("incremental", False)
        if not isinstance(incremental, bool):
            raise CodecError(what, "field 'incremental' must be a boolean", path)
        interval = obj.get("max_poll_interval_ms")
        if "max_poll_interval_ms" in obj and (
            not isinstance(interval, int) or isinstance(interval, bool) or not 1 <= interval <= MAX_POLL_INTERVAL_MS
        ):
            raise CodecError(
                what, f"field 'max_poll_interval_ms' must be an integer in 1..{MAX_POLL_INTERVAL_MS}", path
            )
        return cls(
            pattern=pattern,
            subscription=dict(sub),
            timestamp_ms=timestamp_field(obj, what, path),
            migrating=migrating,
            incremental=incremental,
            max_poll_interval_ms=interval,
            consumer_protocol=(consumer := _speaks_consumer(obj, migrating or incremental, what, path)),
            instance_id=_instance_id(obj, consumer, what, path),
            rack=rack_field(obj, what, path),
            assignors=_classic_assignors(obj, migrating or incremental, what, path),
        )


def _classic_assignors(obj: Mapping[str, Any], other: bool, what: str, path: str | None) -> tuple[str, ...]:
    """The classic protocol's ``assignors`` (with ``"protocol": "classic"``, and only then)."""
    if obj.get("protocol") != "classic":
        if "assignors" in obj:
            raise CodecError(what, '\'assignors\' belongs to the classic protocol ("protocol": "classic")', path)
        return ()
    if other:
        raise CodecError(what, "a member of the classic protocol is neither 'migrating' nor 'incremental'", path)
    return check_strategies(obj.get("assignors"), what, path)


#: an instance id: as a topic name's characters, up to 249 of them (it names a znode under ``instances/``)
INSTANCE_ID = re.compile(r"[A-Za-z0-9._-]{1,249}")


def check_instance_id(instance_id: str) -> str:
    """:raises InvalidNameError: not an instance id (``.`` and ``..`` are not znode names)."""
    if not INSTANCE_ID.fullmatch(instance_id) or instance_id in (".", ".."):
        raise InvalidNameError("instance id", instance_id[:60], "1..249 of [A-Za-z0-9._-], not '.' or '..'")
    return instance_id


def _instance_id(obj: Mapping[str, Any], consumer: bool, what: str, path: str | None) -> str | None:
    raw = obj.get("instance_id")
    if raw is None and "instance_id" not in obj:
        return None
    if not isinstance(raw, str):
        raise CodecError(what, "field 'instance_id' must be a string", path)
    if not consumer:
        raise CodecError(what, 'an instance id is the consumer protocol\'s ("protocol": "consumer")', path)
    try:
        return check_instance_id(raw)
    except InvalidNameError as e:
        raise CodecError(what, str(e), path) from e


def _speaks_consumer(obj: Mapping[str, Any], classic: bool, what: str, path: str | None) -> bool:
    """The optional ``protocol`` key: ``consumer`` (KIP-848's) or ``coordinator`` (the default, when absent)."""
    protocol = obj.get("protocol", "coordinator")
    if protocol not in ("coordinator", "consumer", "classic"):
        raise CodecError(
            what, f"field 'protocol' must be 'coordinator', 'consumer' or 'classic', got {str(protocol)[:40]!r}", path
        )
    if protocol == "consumer" and classic:
        raise CodecError(what, "a member of the consumer protocol is neither 'migrating' nor 'incremental'", path)
    return bool(protocol == "consumer")
