"""Codecs of the classic protocol's records (seed 001, issue 17): ``/consumers/groups/<g>/classic/{join,sync}``.

:class:`JoinRecord` is the coordinator's JoinGroup answer for one generation: the strategy it chose, the leader, and
every member's metadata (its resolved subscription and the strategies it supports, in its order of preference), with
the partition counts and the group's current ownership (what a sticky assignor keeps).  :class:`SyncRecord` is the
leader's SyncGroup: the assignment it computed for that generation (or the error its assignor raised), which the
coordinator validates before distributing it through the command channels.  A strategy is named as a member's
``--assignors`` names it: a built-in (``range``, ``roundrobin``, ``sticky``, ``uniform``) or ``module:Class``.

Every ``decode`` validates and raises :class:`~zkcoord.errors.CodecError` on anything malformed (S7).  Pure: no I/O,
no clock.  May import :mod:`zkcoord.errors`, :mod:`zkcoord.layout.names`, :mod:`zkcoord.layout.znodes` and
:mod:`zkcoord.layout.commands` (the ownership map's codec).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Self

from zkcoord.errors import CodecError, InvalidNameError
from zkcoord.layout.commands import Ownership, decode_ownership, encode_ownership
from zkcoord.layout.names import MAX_PARTITIONS, validate_topic
from zkcoord.layout.znodes import FORMAT_VERSION, dump_object, get_field, load_object, nonneg_int

#: a strategy name: a built-in's, or ``package.module:Class`` (the class of a user's own assignor)
STRATEGY = re.compile(r"[A-Za-z_][A-Za-z0-9_.]{0,199}(:[A-Za-z_][A-Za-z0-9_]{0,99})?")
#: the most strategies one member may list
MAX_STRATEGIES = 16


def check_strategies(names: Any, what: str = "assignors", path: str | None = None) -> tuple[str, ...]:
    """A member's strategies: a non-empty list of distinct names of :data:`STRATEGY`'s form, in its order.

    :raises CodecError: anything else.
    """
    if not isinstance(names, list | tuple) or not names or len(names) > MAX_STRATEGIES:
        raise CodecError(what, f"strategies must be a list of 1..{MAX_STRATEGIES} names", path)
    for name in names:
        if not isinstance(name, str) or not STRATEGY.fullmatch(name):
            raise CodecError(what, f"bad strategy name {str(name)[:60]!r} (a built-in's, or module:Class)", path)
    if len(set(names)) != len(names):
        raise CodecError(what, "a strategy is listed twice", path)
    return tuple(names)


def _counts(raw: Any, what: str, path: str | None, name: str, low: int = 1) -> dict[str, int]:
    if not isinstance(raw, dict):
        raise CodecError(what, f"{name} must be an object topic -> count", path)
    out: dict[str, int] = {}
    for topic, count in raw.items():
        try:
            validate_topic(topic)
        except InvalidNameError as e:
            raise CodecError(what, str(e), path) from e
        if not isinstance(count, int) or isinstance(count, bool) or not low <= count <= MAX_PARTITIONS:
            raise CodecError(what, f"{name} of {topic!r} must be an integer in {low}..{MAX_PARTITIONS}", path)
        out[topic] = count
    return out


@dataclass(frozen=True, slots=True)
class MemberMetadata:
    """One member as the leader sees it (Kafka's JoinGroup member metadata)."""

    incarnation: int
    #: resolved: ``topic -> thread count``, topics that exist only
    subscription: Mapping[str, int]
    strategies: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class JoinRecord:
    """``classic/join``: one generation's strategy, leader and members (written by the coordinator, fenced)."""

    generation: int
    epoch: int
    leader: str
    strategy: str
    #: why this strategy (the vote, or the only one every member supports)
    reason: str
    members: Mapping[str, MemberMetadata]
    #: ``topic -> partition count`` of every subscribed topic
    partitions: Mapping[str, int]
    #: the group's ownership as the coordinator read it (``topic -> partition -> thread``): a sticky assignor's input
    current: Ownership = field(default_factory=dict)
    #: how long the coordinator waits for the leader's sync (its rebalance timeout); 0: not said (an older record).
    #: The leader gives its assignor no longer: past it the generation is retried without this leader anyway
    rebalance_timeout_ms: int = 0

    @property
    def leader_incarnation(self) -> int:
        return self.members[self.leader].incarnation

    def encode(self) -> bytes:
        return dump_object(
            {
                "version": FORMAT_VERSION,
                "generation": self.generation,
                "epoch": self.epoch,
                "leader": self.leader,
                "strategy": self.strategy,
                "reason": self.reason,
                "members": {
                    cid: {
                        "incarnation": m.incarnation,
                        "subscription": dict(sorted(m.subscription.items())),
                        "assignors": list(m.strategies),
                    }
                    for cid, m in sorted(self.members.items())
                },
                "partitions": dict(sorted(self.partitions.items())),
                "current": encode_ownership(self.current),
                **({"rebalance_timeout_ms": self.rebalance_timeout_ms} if self.rebalance_timeout_ms else {}),
            }
        )

    @classmethod
    def decode(cls, data: bytes | None, path: str | None = None) -> Self:
        what = "classic join record"
        obj = load_object(what, data, path)
        raw_members = get_field(obj, "members", dict, what, path)
        members: dict[str, MemberMetadata] = {}
        for cid, raw in raw_members.items():
            if not isinstance(raw, dict):
                raise CodecError(what, f"member {cid[:60]!r} must be an object", path)
            members[cid] = MemberMetadata(
                incarnation=nonneg_int(raw, "incarnation", what, path),
                subscription=_counts(raw.get("subscription"), what, path, "subscription"),
                strategies=check_strategies(raw.get("assignors"), what, path),
            )
        leader = get_field(obj, "leader", str, what, path)
        strategy = get_field(obj, "strategy", str, what, path)
        if leader not in members:
            raise CodecError(what, f"the leader {leader[:60]!r} is not a member", path)
        if not all(strategy in m.strategies for m in members.values()):
            raise CodecError(what, f"strategy {strategy[:60]!r} is not supported by every member", path)
        return cls(
            generation=nonneg_int(obj, "generation", what, path),
            epoch=nonneg_int(obj, "epoch", what, path),
            leader=leader,
            strategy=strategy,
            reason=get_field(obj, "reason", str, what, path),
            members=members,
            partitions=_counts(obj.get("partitions"), what, path, "partitions"),
            current=decode_ownership(obj.get("current", {}), what, path),
            rebalance_timeout_ms=nonneg_int(obj, "rebalance_timeout_ms", what, path)
            if "rebalance_timeout_ms" in obj
            else 0,
        )


@dataclass(frozen=True, slots=True)
class SyncRecord:
    """``classic/sync``: the leader's assignment for one generation (Kafka's SyncGroup), or its assignor's error.

    ``assignment`` is ``topic -> partition -> thread`` over the whole group; ``error`` non-empty means the leader's
    assignor failed (raised, or returned something that is not an assignment) and ``assignment`` is empty.
    """

    generation: int
    leader: str
    strategy: str
    assignment: Ownership
    compute_ms: float = 0.0
    error: str = ""

    def encode(self) -> bytes:
        obj: dict[str, Any] = {
            "version": FORMAT_VERSION,
            "generation": self.generation,
            "leader": self.leader,
            "strategy": self.strategy,
            "assignment": encode_ownership(self.assignment),
            "compute_ms": round(self.compute_ms, 3),
        }
        if self.error:
            obj["error"] = self.error[:500]
        return dump_object(obj)

    @classmethod
    def decode(cls, data: bytes | None, path: str | None = None) -> Self:
        what = "classic sync record"
        obj = load_object(what, data, path)
        compute = obj.get("compute_ms", 0.0)
        if not isinstance(compute, int | float) or isinstance(compute, bool) or compute < 0:
            raise CodecError(what, "field 'compute_ms' must be a non-negative number", path)
        error = obj.get("error", "")
        if not isinstance(error, str):
            raise CodecError(what, "field 'error' must be a string", path)
        return cls(
            generation=nonneg_int(obj, "generation", what, path),
            leader=get_field(obj, "leader", str, what, path),
            strategy=get_field(obj, "strategy", str, what, path),
            assignment=decode_ownership(obj.get("assignment", {}), what, path),
            compute_ms=float(compute),
            error=error,
        )
