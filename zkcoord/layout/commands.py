"""Codec of the command channel ``/consumers/groups/<g>/channel/<consumerId>``: what the coordinator tells a member,
and what the member acknowledged.

:class:`Command` (a ``stop-fetcher`` or ``start-fetcher``, ``docs/protocol.md``) and the ownership map it carries
(:data:`Ownership`, :func:`encode_ownership`, :func:`decode_ownership`, which :mod:`~zkcoord.layout.group_state`
shares for a group's target); the channel znode's own data, the last command its member acknowledged
(:func:`encode_acknowledged`, :func:`decode_acknowledged`).  Every ``decode`` validates and raises
:class:`~zkcoord.errors.CodecError` on anything malformed (S7).

Pure: no I/O, no clock.  May import :mod:`zkcoord.errors`, :mod:`zkcoord.layout.names` and
:mod:`zkcoord.layout.znodes` (the shared format), :mod:`zkcoord.layout.carried_offsets`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Self

from zkcoord.errors import CodecError, InvalidNameError
from zkcoord.layout.carried_offsets import CarriedOffsets, decode_carried, encode_carried
from zkcoord.layout.names import MAX_PARTITIONS, validate_group, validate_topic
from zkcoord.layout.znodes import FORMAT_VERSION, INT_TEXT, dump_object, get_field, load_object, nonneg_int


class CommandOption(Enum):
    STOP_FETCHER = "stop-fetcher"
    START_FETCHER = "start-fetcher"


Ownership = Mapping[str, Mapping[int, str]]
"""``topic -> partition -> consumer thread id``: the part of a group's ownership map a command carries."""


def encode_ownership(ownership: Ownership) -> dict[str, dict[str, str]]:
    return {t: {str(p): th for p, th in sorted(parts.items())} for t, parts in sorted(ownership.items())}


def decode_ownership(raw: Any, what: str, path: str | None) -> dict[str, dict[int, str]]:
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
            if not isinstance(p, str) or not INT_TEXT.fullmatch(p) or int(p) >= MAX_PARTITIONS:
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

    ``versions`` on a consumer-protocol ``start-fetcher`` (issue 16): for partitions of ``ownership`` whose owner
    znode the transaction that wrote this command also wrote, the version that transaction left it at.  The member
    claims them by a check of that version in the transaction that acknowledges, instead of reading each owner
    znode; a check that fails sends it back to reading them (``zkcoord.consumer.carried``).  ``offsets``, for
    partitions of ``versions`` only: each one's committed offset and its offset znode's version, as the previous
    owner's acknowledged stop left them (:mod:`~zkcoord.layout.carried_offsets`); checked in that same transaction
    instead of read.
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
    versions: Mapping[str, Mapping[int, int]] | None = None
    offsets: CarriedOffsets | None = None

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
            obj["ownership"] = encode_ownership(self.ownership)
            if self.incremental:
                obj["incremental"] = True
            if self.awaiting:
                obj["awaiting"] = {t: sorted(ps) for t, ps in sorted(self.awaiting.items())}
            if self.versions:
                obj["versions"] = {
                    t: {str(p): v for p, v in sorted(ps.items())} for t, ps in sorted(self.versions.items())
                }
            if self.offsets and any(self.offsets.values()):
                obj["offsets"] = encode_carried(self.offsets)
        elif self.revoke is not None:
            obj["revoke"] = {t: sorted(ps) for t, ps in sorted(self.revoke.items())}
            if self.handover:
                obj["handover"] = encode_ownership(self.handover)
        if self.incarnation is not None:
            obj["incarnation"] = self.incarnation
        return dump_object(obj)

    @classmethod
    def decode(cls, data: bytes | None, path: str | None = None) -> Self:
        what = "command"
        obj = load_object(what, data, path)
        raw_option = get_field(obj, "option", str, what, path)
        try:
            option = CommandOption(raw_option)
        except ValueError as e:
            raise CodecError(what, f"unknown option {raw_option!r}", path) from e
        group_name = get_field(obj, "group", str, what, path)
        try:
            validate_group(group_name)
        except InvalidNameError as e:
            raise CodecError(what, str(e), path) from e
        issued = obj.get("issued", "0")
        if not isinstance(issued, str) or not INT_TEXT.fullmatch(issued):
            raise CodecError(what, "field 'issued' must be a decimal string", path)
        incremental = obj.get("incremental", False)
        if not isinstance(incremental, bool):
            raise CodecError(what, "field 'incremental' must be a boolean", path)
        versions, offsets = None, None
        if option is CommandOption.START_FETCHER:
            ownership, awaiting = _decode_start(obj, incremental, what, path)
            versions = _decode_versions(obj["versions"], ownership, what, path) if "versions" in obj else None
            if "offsets" in obj:
                offsets = decode_carried(obj["offsets"], what, path, within=versions or {})
            revoke, handover = None, None
        else:
            if "versions" in obj or "offsets" in obj:
                raise CodecError(what, "'versions' and 'offsets' belong to start-fetcher only", path)
            revoke, handover = _decode_stop(obj, incremental, what, path)
            ownership, awaiting = {}, None
        return cls(
            option=option,
            epoch=nonneg_int(obj, "epoch", what, path),
            generation=nonneg_int(obj, "generation", what, path),
            group=group_name,
            ownership=ownership,
            issued_ms=int(issued),
            revoke=revoke,
            incremental=incremental,
            incarnation=nonneg_int(obj, "incarnation", what, path) if "incarnation" in obj else None,
            handover=handover,
            awaiting=awaiting,
            versions=versions,
            offsets=offsets,
        )


def _decode_versions(
    raw: Any, ownership: Mapping[str, Mapping[int, str]], what: str, path: str | None
) -> dict[str, dict[int, int]]:
    """A start's owner znode versions: topic -> partition -> version, for partitions of its ownership only."""
    if not isinstance(raw, dict):
        raise CodecError(what, "'versions' must be an object topic -> {partition: version}", path)
    out: dict[str, dict[int, int]] = {}
    for topic_name, parts in raw.items():
        if not isinstance(parts, dict):
            raise CodecError(what, f"versions of topic {topic_name!r} must be an object", path)
        decoded: dict[int, int] = {}
        for p, version in parts.items():
            if not isinstance(p, str) or not INT_TEXT.fullmatch(p) or int(p) not in ownership.get(topic_name, {}):
                raise CodecError(what, f"versions name {topic_name}/{p}, which the start does not give", path)
            if not isinstance(version, int) or isinstance(version, bool) or not 0 <= version < 2**31:
                raise CodecError(what, f"bad owner znode version for {topic_name}/{p}", path)
            decoded[int(p)] = version
        out[topic_name] = decoded
    return out


def _decode_start(
    obj: dict[str, Any], incremental: bool, what: str, path: str | None
) -> tuple[dict[str, dict[int, str]], dict[str, tuple[int, ...]] | None]:
    """A start-fetcher's ownership and awaited partitions."""
    ownership = decode_ownership(obj.get("ownership"), what, path)
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
    handover = decode_ownership(obj["handover"], what, path)
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


# --- the channel's own data: the last command acknowledged in it ----------------------------------------------------

#: A command name a channel can record: printable ASCII ending in ZooKeeper's 10-digit sequence number.
_RECORDABLE = re.compile(r"[!-~]{0,190}?([0-9]{10})")


#: The name a consumer-protocol assignment goes by on the consumer's side: this prefix and the zxid of the write
#: (``assignment-<mzxid>``): each write of the znode is one command.
ASSIGNMENT_NAME = "assignment-"


def assignment_zxid(name: str) -> int:
    """The zxid in an assignment's name (:data:`ASSIGNMENT_NAME`); -1 if it is not one."""
    digits = name[len(ASSIGNMENT_NAME) :]
    return int(digits) if name.startswith(ASSIGNMENT_NAME) and digits.isascii() and digits.isdigit() else -1


def command_sequence(name: str) -> int:
    """The sequence number ZooKeeper appended to a command's name (10 digits); -1 if there is none."""
    m = _RECORDABLE.fullmatch(name)
    return int(m.group(1)) if m is not None else -1


@dataclass(frozen=True, slots=True)
class Acknowledged:
    """A channel's record of the last command its member acknowledged (deleted, having handled it)."""

    name: str
    sequence: int


def encode_acknowledged(name: str) -> bytes | None:
    """The channel data recording that command ``name`` was acknowledged: the name itself (ASCII); None for a name
    that records nothing (no sequence number: not a command ZooKeeper numbered, so never one a coordinator waits for).
    """
    return name.encode("ascii") if command_sequence(name) >= 0 else None


def decode_acknowledged(data: bytes | None, path: str | None = None) -> Acknowledged | None:
    """A channel's data: None if empty (nothing acknowledged in this channel yet, as its creator leaves it).

    :raises CodecError: anything but the name of a command with a sequence number (written by hand: it
        acknowledges nothing).
    """
    if not data:
        return None
    what = "channel acknowledgement"
    try:
        name = data.decode("ascii")
    except UnicodeDecodeError as e:
        raise CodecError(what, "not ASCII", path) from e
    sequence = command_sequence(name)
    if sequence < 0:
        raise CodecError(what, f"expected a command name ending in a 10-digit sequence number, got {name[:40]!r}", path)
    return Acknowledged(name, sequence)
