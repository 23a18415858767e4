"""Codecs of a group's persisted state and of its owner znodes.

``/consumers/groups/<g>/state`` (:class:`GroupState`, in the :class:`GroupPhase` of its rebalance) and
``/consumers/groups/<g>/owners/<t>/<p>`` (:func:`encode_owner`, :func:`decode_owner`).  Every ``decode`` validates and
raises :class:`~zkcoord.errors.CodecError` on anything malformed (S7).

Pure: no I/O, no clock.  May import :mod:`zkcoord.errors`, :mod:`zkcoord.layout.znodes` (the shared format) and
:mod:`zkcoord.layout.commands` (the ownership map, which a command carries a part of).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Self

from zkcoord.errors import CodecError
from zkcoord.layout.commands import Ownership, decode_ownership, encode_ownership
from zkcoord.layout.znodes import FORMAT_VERSION, INT_TEXT, dump_object, get_field, load_object, nonneg_int

# --- persisted group state ----------------------------------------------------------------------------------------


class GroupPhase(Enum):
    """Where a group's rebalance stands (``docs/protocol.md`` has the state machine)."""

    STABLE = "stable"
    STOPPING = "stopping"
    STARTING = "starting"
    FAILED = "failed"
    #: a consumer-protocol (KIP-848) group whose members are still reconciling to its target, one by one
    RECONCILING = "reconciling"


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
            "target": encode_ownership(self.target),
            "assignor": self.assignor,
            "updated": str(self.updated_ms),
            "sent": self.sent,
            "attempt": self.attempt,
            "error": self.error,
        }
        if self.legacy:
            obj["legacy"] = dict(sorted(self.legacy.items()))
        return dump_object(obj)

    @classmethod
    def decode(cls, data: bytes | None, path: str | None = None) -> Self:
        what = "group state"
        obj = load_object(what, data, path)
        raw_phase = get_field(obj, "phase", str, what, path)
        try:
            phase = GroupPhase(raw_phase)
        except ValueError as e:
            raise CodecError(what, f"unknown phase {raw_phase!r}", path) from e
        members = get_field(obj, "members", dict, what, path)
        legacy = obj.get("legacy", {})
        if not isinstance(legacy, dict):
            raise CodecError(what, "field 'legacy' must be an object", path)
        for consumer_id, czxid in [*members.items(), *legacy.items()]:
            if not isinstance(czxid, int) or isinstance(czxid, bool) or czxid < 0:
                raise CodecError(what, f"bad incarnation for member {consumer_id!r}", path)
        updated = obj.get("updated", "0")
        if not isinstance(updated, str) or not INT_TEXT.fullmatch(updated):
            raise CodecError(what, "field 'updated' must be a decimal string", path)
        error = obj.get("error", "")
        if not isinstance(error, str):
            raise CodecError(what, "field 'error' must be a string", path)
        return cls(
            generation=nonneg_int(obj, "generation", what, path),
            phase=phase,
            epoch=nonneg_int(obj, "epoch", what, path),
            members=dict(members),
            target=decode_ownership(obj.get("target", {}), what, path),
            assignor=get_field(obj, "assignor", str, what, path),
            updated_ms=int(updated),
            sent=nonneg_int(obj, "sent", what, path),
            attempt=nonneg_int(obj, "attempt", what, path),
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
