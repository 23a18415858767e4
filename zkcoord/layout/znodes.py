"""Codecs for the data of every znode in the layout (``docs/zookeeper-layout.md``).

Where Kafka 0.8 had a format we use it byte for byte in spirit (``reference/legacy-kafka-zk.md`` §1): JSON objects
with a ``version`` field, ``timestamp`` as a *string* of epoch milliseconds, offsets and epochs as plain decimal
strings.  Every ``decode`` validates and raises :class:`~zkcoord.errors.CodecError` on anything malformed, so a bad
znode written by a buggy or hostile client is refused with a reason (S7) instead of crashing the reader.

Codecs are pure: no I/O, no clock (callers pass timestamps), so they are property-tested in isolation.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Self

from zkcoord.errors import CodecError, InvalidNameError
from zkcoord.layout.names import MAX_PARTITIONS, validate_group, validate_topic

#: The only ``version`` value this release writes and reads for Kafka-format znodes.
FORMAT_VERSION = 1

_INT_TEXT = re.compile(r"(0|[1-9][0-9]*)")


def _load_object(what: str, data: bytes | None, path: str | None) -> dict[str, Any]:
    if data is None or not data:
        raise CodecError(what, "empty data", path)
    try:
        obj = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CodecError(what, f"not JSON ({e})", path) from e
    if not isinstance(obj, dict):
        raise CodecError(what, f"expected a JSON object, got {type(obj).__name__}", path)
    version = obj.get("version")
    if version != FORMAT_VERSION:
        raise CodecError(what, f"unsupported version {version!r} (this release reads version {FORMAT_VERSION})", path)
    return obj


def _dump(obj: Mapping[str, Any]) -> bytes:
    # Compact and key-sorted: byte-identical encodings make znode contents comparable and diffable.
    return json.dumps(obj, separators=(",", ":"), sort_keys=True).encode("utf-8")


def _field(obj: Mapping[str, Any], key: str, kind: type | tuple[type, ...], what: str, path: str | None) -> Any:
    if key not in obj:
        raise CodecError(what, f"missing field {key!r}", path)
    value = obj[key]
    # bool is an int in Python, never a valid integer field here.
    if isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)):
        raise CodecError(what, f"field {key!r} must be {_kind_name(kind)}, got a boolean", path)
    if not isinstance(value, kind):
        raise CodecError(what, f"field {key!r} must be {_kind_name(kind)}, got {type(value).__name__}", path)
    return value


def _kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(k.__name__ for k in kinds)


#: Every integer the layout stores (epochs, generations, offsets, ids) is a Java long in Kafka; a larger one was not
#: written by any part of the system, and accepting it would let one forged command raise a consumer's newest
#: epoch past anything a real coordinator can reach.
MAX_LONG = 2**63 - 1


def _nonneg_int(obj: Mapping[str, Any], key: str, what: str, path: str | None) -> int:
    value: int = _field(obj, key, int, what, path)
    if not 0 <= value <= MAX_LONG:
        raise CodecError(what, f"field {key!r} must be an integer in 0..2^63-1, got {str(value)[:40]}", path)
    return value


def _timestamp(obj: Mapping[str, Any], what: str, path: str | None) -> int:
    raw = _field(obj, "timestamp", str, what, path)
    if not _INT_TEXT.fullmatch(raw):
        raise CodecError(what, f"timestamp must be a decimal string of epoch ms, got {raw!r}", path)
    return int(raw)


def encode_int(value: int) -> bytes:
    """Encode an offset or an epoch as Kafka does: a plain decimal string."""
    if value < 0:
        raise ValueError(f"cannot encode negative value {value}")
    return str(value).encode("ascii")


def decode_int(what: str, data: bytes | None, path: str | None = None) -> int:
    """Decode a plain decimal string (offsets, the coordinator epoch); raise CodecError if it is anything else."""
    try:
        text = (data or b"").decode("ascii").strip()
    except UnicodeDecodeError as e:
        raise CodecError(what, "not ASCII", path) from e
    if not _INT_TEXT.fullmatch(text) or len(text) > 19 or int(text) > MAX_LONG:
        raise CodecError(what, f"expected a decimal integer in 0..2^63-1, got {text[:40]!r}", path)
    return int(text)


# --- brokers -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    """``/brokers/ids/<id>``: Kafka 0.8.2's ``registerBrokerInZk`` JSON."""

    host: str
    port: int
    timestamp_ms: int
    jmx_port: int = -1

    def encode(self) -> bytes:
        return _dump(
            {
                "version": FORMAT_VERSION,
                "host": self.host,
                "port": self.port,
                "jmx_port": self.jmx_port,
                "timestamp": str(self.timestamp_ms),
            }
        )

    @classmethod
    def decode(cls, data: bytes | None, path: str | None = None) -> Self:
        what = "broker registration"
        obj = _load_object(what, data, path)
        host = _field(obj, "host", str, what, path)
        port = _nonneg_int(obj, "port", what, path)
        if port > 65535:
            raise CodecError(what, f"port {port} out of range", path)
        jmx = obj.get("jmx_port", -1)
        if not isinstance(jmx, int) or isinstance(jmx, bool):
            raise CodecError(what, "field 'jmx_port' must be int", path)
        return cls(host=host, port=port, timestamp_ms=_timestamp(obj, what, path), jmx_port=jmx)


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
        return _dump({"version": FORMAT_VERSION, "partitions": {str(p): list(r) for p, r in enumerate(self.replicas)}})

    @classmethod
    def decode(cls, data: bytes | None, path: str | None = None) -> Self:
        what = "topic assignment"
        obj = _load_object(what, data, path)
        parts = _field(obj, "partitions", dict, what, path)
        if not parts:
            raise CodecError(what, "no partitions", path)
        if len(parts) > MAX_PARTITIONS:
            raise CodecError(what, f"{len(parts)} partitions exceeds the limit {MAX_PARTITIONS}", path)
        replicas: dict[int, tuple[int, ...]] = {}
        for key, ids in parts.items():
            if not _INT_TEXT.fullmatch(key):
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
        return _dump(
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
        obj = _load_object(what, data, path)
        return cls(
            broker_id=_nonneg_int(obj, "brokerid", what, path),
            epoch=_nonneg_int(obj, "epoch", what, path),
            timestamp_ms=_timestamp(obj, what, path),
        )


# --- group members -----------------------------------------------------------------------------------------------


class Pattern(Enum):
    """Kafka 0.8's ``TopicCount`` patterns."""

    STATIC = "static"
    WHITE_LIST = "white_list"
    BLACK_LIST = "black_list"


MAX_THREADS = 1024


@dataclass(frozen=True, slots=True)
class MemberRegistration:
    """``/consumers/groups/<g>/ids/<consumerId>``: Kafka 0.8's consumer registration.

    ``subscription`` maps a topic (static) or a single regex (``white_list``/``black_list``) to a thread count.
    Regexes are checked for syntax here; matching them against topics is the coordinator's business.

    ``migrating`` marks a coordinator-protocol member of a group that still has ``zk-client`` members (live
    migration, ``docs/migration.md``); ``incremental`` says the member can be rebalanced incrementally (partial
    stop-fetcher, additive start-fetcher: ``docs/protocol.md``).  Each is written only when true, so other
    registrations stay byte-for-byte Kafka 0.8's, and 0.8's readers ignore the extra keys.
    """

    pattern: Pattern
    subscription: Mapping[str, int]
    timestamp_ms: int
    migrating: bool = False
    incremental: bool = False

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
        return _dump(obj)

    @classmethod
    def decode(cls, data: bytes | None, path: str | None = None) -> Self:
        what = "consumer registration"
        obj = _load_object(what, data, path)
        raw_pattern = _field(obj, "pattern", str, what, path)
        try:
            pattern = Pattern(raw_pattern)
        except ValueError as e:
            known = ", ".join(p.value for p in Pattern)
            raise CodecError(what, f"unknown pattern {raw_pattern!r} (expected one of {known})", path) from e
        sub = _field(obj, "subscription", dict, what, path)
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
            try:
                re.compile(regex)
            except re.error as e:
                raise CodecError(what, f"invalid regex {regex!r}: {e}", path) from e
        migrating = obj.get("migrating", False)
        if not isinstance(migrating, bool):
            raise CodecError(what, "field 'migrating' must be a boolean", path)
        incremental = obj.get("incremental", False)
        if not isinstance(incremental, bool):
            raise CodecError(what, "field 'incremental' must be a boolean", path)
        return cls(
            pattern=pattern,
            subscription=dict(sub),
            timestamp_ms=_timestamp(obj, what, path),
            migrating=migrating,
            incremental=incremental,
        )


# --- command channel ---------------------------------------------------------------------------------------------


class CommandOption(Enum):
    STOP_FETCHER = "stop-fetcher"
    START_FETCHER = "start-fetcher"


Ownership = Mapping[str, Mapping[int, str]]
"""``topic -> partition -> consumer thread id``: the part of a group's ownership map a command carries."""


def _encode_ownership(ownership: Ownership) -> dict[str, dict[str, str]]:
    return {t: {str(p): th for p, th in sorted(parts.items())} for t, parts in sorted(ownership.items())}


def _decode_ownership(raw: Any, what: str, path: str | None) -> dict[str, dict[int, str]]:
    if not isinstance(raw, dict):
        raise CodecError(what, "ownership must be an object topic -> {partition: thread}", path)
    out: dict[str, dict[int, str]] = {}
    for topic_name, parts in raw.items():
        try:
            validate_topic(topic_name)
        except InvalidNameError as e:
            raise CodecError(what, str(e), path) from e
        if not isinstance(parts, dict):
            raise CodecError(what, f"ownership of topic {topic_name!r} must be an object", path)
        decoded: dict[int, str] = {}
        for p, thread in parts.items():
            if not isinstance(p, str) or not _INT_TEXT.fullmatch(p) or int(p) >= MAX_PARTITIONS:
                raise CodecError(what, f"bad partition {p!r} in ownership of {topic_name!r}", path)
            if not isinstance(thread, str) or not thread:
                raise CodecError(what, f"bad thread id for {topic_name}/{p}", path)
            decoded[int(p)] = thread
        out[topic_name] = decoded
    return out


@dataclass(frozen=True, slots=True)
class Command:
    """One coordinator command in a consumer's channel (``docs/protocol.md``).

    ``epoch`` is the coordinator epoch and ``generation`` the group generation it was issued under; consumers refuse
    a command older than the newest they have seen (S5).  ``ownership`` is present on ``start-fetcher`` only and is
    restricted to the receiving consumer's threads.  ``issued_ms`` is informational (latency accounting).

    Incremental rebalances (``docs/protocol.md``): ``revoke`` on a ``stop-fetcher`` names the only partitions to
    stop (``None``: all of them, the eager protocol); ``incremental`` on a ``start-fetcher`` says ``ownership`` is the
    consumer's whole new assignment, of which the partitions it already fetches on the same thread keep running
    (without it, every fetcher starts afresh).

    A hand-over (an incremental rebalance in one step): ``handover`` on a ``stop-fetcher`` gives, for each revoked
    partition, the thread to hand it to -- the consumer writes that thread into the partition's owner znode in the
    transaction that commits its offset; ``awaiting`` on an incremental ``start-fetcher`` names the partitions of
    ``ownership`` whose previous owner hands them over so: the consumer starts each once its owner znode names it.

    ``incarnation`` is the ``czxid`` of the registration the command is meant for: a consumer that registered again
    since (a new session, under the same id) refuses it, so nothing planned for its previous session is applied in
    its new one.
    """

    option: CommandOption
    epoch: int
    generation: int
    group: str
    ownership: Ownership = field(default_factory=dict)
    issued_ms: int = 0
    revoke: Mapping[str, tuple[int, ...]] | None = None
    incremental: bool = False
    incarnation: int | None = None
    handover: Ownership | None = None
    awaiting: Mapping[str, tuple[int, ...]] | None = None

    def encode(self) -> bytes:
        obj: dict[str, Any] = {
            "version": FORMAT_VERSION,
            "option": self.option.value,
            "epoch": self.epoch,
            "generation": self.generation,
            "group": self.group,
            "issued": str(self.issued_ms),
        }
        if self.option is CommandOption.START_FETCHER:
            obj["ownership"] = _encode_ownership(self.ownership)
            if self.incremental:
                obj["incremental"] = True
            if self.awaiting:
                obj["awaiting"] = {t: sorted(ps) for t, ps in sorted(self.awaiting.items())}
        elif self.revoke is not None:
            obj["revoke"] = {t: sorted(ps) for t, ps in sorted(self.revoke.items())}
            if self.handover:
                obj["handover"] = _encode_ownership(self.handover)
        if self.incarnation is not None:
            obj["incarnation"] = self.incarnation
        return _dump(obj)

    @classmethod
    def decode(cls, data: bytes | None, path: str | None = None) -> Self:
        what = "command"
        obj = _load_object(what, data, path)
        raw_option = _field(obj, "option", str, what, path)
        try:
            option = CommandOption(raw_option)
        except ValueError as e:
            raise CodecError(what, f"unknown option {raw_option!r}", path) from e
        group_name = _field(obj, "group", str, what, path)
        try:
            validate_group(group_name)
        except InvalidNameError as e:
            raise CodecError(what, str(e), path) from e
        issued = obj.get("issued", "0")
        if not isinstance(issued, str) or not _INT_TEXT.fullmatch(issued):
            raise CodecError(what, "field 'issued' must be a decimal string", path)
        incremental = obj.get("incremental", False)
        if not isinstance(incremental, bool):
            raise CodecError(what, "field 'incremental' must be a boolean", path)
        if option is CommandOption.START_FETCHER:
            ownership, awaiting = _decode_start(obj, incremental, what, path)
            revoke, handover = None, None
        else:
            revoke, handover = _decode_stop(obj, incremental, what, path)
            ownership, awaiting = {}, None
        return cls(
            option=option,
            epoch=_nonneg_int(obj, "epoch", what, path),
            generation=_nonneg_int(obj, "generation", what, path),
            group=group_name,
            ownership=ownership,
            issued_ms=int(issued),
            revoke=revoke,
            incremental=incremental,
            incarnation=_nonneg_int(obj, "incarnation", what, path) if "incarnation" in obj else None,
            handover=handover,
            awaiting=awaiting,
        )


def _decode_start(
    obj: dict[str, Any], incremental: bool, what: str, path: str | None
) -> tuple[dict[str, dict[int, str]], dict[str, tuple[int, ...]] | None]:
    """A start-fetcher's ownership and awaited partitions."""
    ownership = _decode_ownership(obj.get("ownership"), what, path)
    if "revoke" in obj or "handover" in obj:
        raise CodecError(what, "a start-fetcher command carries no revoke list or hand-over", path)
    if "awaiting" not in obj:
        return ownership, None
    awaiting = _decode_revoke(obj["awaiting"], what, path, "awaiting")
    if not incremental or any(p not in ownership.get(t, {}) for t, ps in awaiting.items() for p in ps):
        raise CodecError(what, "'awaiting' must name partitions of an incremental start's ownership", path)
    return ownership, awaiting


def _decode_stop(
    obj: dict[str, Any], incremental: bool, what: str, path: str | None
) -> tuple[dict[str, tuple[int, ...]] | None, dict[str, dict[int, str]] | None]:
    """A stop-fetcher's revoke list and hand-over."""
    if "ownership" in obj:
        raise CodecError(what, "a stop-fetcher command carries no ownership", path)
    if incremental or "awaiting" in obj:
        raise CodecError(what, "'incremental' and 'awaiting' belong to start-fetcher only", path)
    revoke = _decode_revoke(obj["revoke"], what, path) if "revoke" in obj else None
    if "handover" not in obj:
        return revoke, None
    handover = _decode_ownership(obj["handover"], what, path)
    if revoke is None or any(p not in revoke.get(t, ()) for t, ps in handover.items() for p in ps):
        raise CodecError(what, "'handover' must name partitions of the revoke list", path)
    return revoke, handover


def _decode_revoke(raw: Any, what: str, path: str | None, name: str = "revoke") -> dict[str, tuple[int, ...]]:
    if not isinstance(raw, dict):
        raise CodecError(what, f"{name} must be an object topic -> [partitions]", path)
    out: dict[str, tuple[int, ...]] = {}
    for topic_name, parts in raw.items():
        try:
            validate_topic(topic_name)
        except InvalidNameError as e:
            raise CodecError(what, str(e), path) from e
        if not isinstance(parts, list) or not all(
            isinstance(p, int) and not isinstance(p, bool) and 0 <= p < MAX_PARTITIONS for p in parts
        ):
            raise CodecError(what, f"{name} of topic {topic_name!r} must be a list of partition numbers", path)
        out[topic_name] = tuple(sorted(set(parts)))
    return out


# --- persisted group state ----------------------------------------------------------------------------------------


class GroupPhase(Enum):
    """Where a group's rebalance stands (``docs/protocol.md`` has the state machine)."""

    STABLE = "stable"
    STOPPING = "stopping"
    STARTING = "starting"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class GroupState:
    """``/consumers/groups/<g>/state``: what a coordinator needs to finish or restart an interrupted rebalance.

    ``members`` maps each consumer id of the rebalance to the ``czxid`` of its registration znode (its incarnation:
    a consumer that re-registered after a session expiry has a new one).  ``target`` is the ownership map being
    installed.  ``sent`` counts the command batches of the current phase already written (each batch's transaction
    bumps it), so a writer that lost its connection knows exactly which batches landed.  ``legacy`` maps the
    ``zk-client`` members of a migrating group (``docs/migration.md``) to their incarnations, the same way; it is
    written only when there are some.
    """

    generation: int
    phase: GroupPhase
    epoch: int
    members: Mapping[str, int]
    target: Ownership
    assignor: str = "range"
    updated_ms: int = 0
    sent: int = 0
    attempt: int = 0
    error: str = ""
    legacy: Mapping[str, int] = field(default_factory=dict)

    def encode(self) -> bytes:
        obj: dict[str, Any] = {
            "version": FORMAT_VERSION,
            "generation": self.generation,
            "phase": self.phase.value,
            "epoch": self.epoch,
            "members": dict(sorted(self.members.items())),
            "target": _encode_ownership(self.target),
            "assignor": self.assignor,
            "updated": str(self.updated_ms),
            "sent": self.sent,
            "attempt": self.attempt,
            "error": self.error,
        }
        if self.legacy:
            obj["legacy"] = dict(sorted(self.legacy.items()))
        return _dump(obj)

    @classmethod
    def decode(cls, data: bytes | None, path: str | None = None) -> Self:
        what = "group state"
        obj = _load_object(what, data, path)
        raw_phase = _field(obj, "phase", str, what, path)
        try:
            phase = GroupPhase(raw_phase)
        except ValueError as e:
            raise CodecError(what, f"unknown phase {raw_phase!r}", path) from e
        members = _field(obj, "members", dict, what, path)
        legacy = obj.get("legacy", {})
        if not isinstance(legacy, dict):
            raise CodecError(what, "field 'legacy' must be an object", path)
        for consumer_id, czxid in [*members.items(), *legacy.items()]:
            if not isinstance(czxid, int) or isinstance(czxid, bool) or czxid < 0:
                raise CodecError(what, f"bad incarnation for member {consumer_id!r}", path)
        updated = obj.get("updated", "0")
        if not isinstance(updated, str) or not _INT_TEXT.fullmatch(updated):
            raise CodecError(what, "field 'updated' must be a decimal string", path)
        error = obj.get("error", "")
        if not isinstance(error, str):
            raise CodecError(what, "field 'error' must be a string", path)
        return cls(
            generation=_nonneg_int(obj, "generation", what, path),
            phase=phase,
            epoch=_nonneg_int(obj, "epoch", what, path),
            members=dict(members),
            target=_decode_ownership(obj.get("target", {}), what, path),
            assignor=_field(obj, "assignor", str, what, path),
            updated_ms=int(updated),
            sent=_nonneg_int(obj, "sent", what, path),
            attempt=_nonneg_int(obj, "attempt", what, path),
            error=error,
            legacy=dict(legacy),
        )


# --- owners and offsets ------------------------------------------------------------------------------------------

_THREAD_ID = re.compile(r"[a-zA-Z0-9._-]+-[0-9]+")


def encode_owner(thread_id: str) -> bytes:
    """``/consumers/groups/<g>/owners/<t>/<p>``: the owning thread id ``<consumerId>-<n>`` as a plain string."""
    if not _THREAD_ID.fullmatch(thread_id):
        raise ValueError(f"not a consumer thread id: {thread_id!r}")
    return thread_id.encode("utf-8")


def decode_owner(data: bytes | None, path: str | None = None) -> str:
    try:
        text = (data or b"").decode("utf-8")
    except UnicodeDecodeError as e:
        raise CodecError("owner", "not UTF-8", path) from e
    if not _THREAD_ID.fullmatch(text):
        raise CodecError("owner", f"not a consumer thread id: {text[:60]!r}", path)
    return text
