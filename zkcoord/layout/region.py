"""The records of a consistent region's shared data, under ``/consumers/groups/<g>/region`` (``docs/regions.md``,
``docs/zookeeper-layout.md``).

Issue 24 (seed 003): the seed keeps this in a job-scoped MXBean; here it lives in ZooKeeper beside the group.
Every record is a JSON object with ``version`` 1; offsets are keyed ``"topic/partition"`` (the journal's form).

Pure: no I/O, no clock.  May import :mod:`zkcoord.errors`, :mod:`zkcoord.layout.names`, :mod:`zkcoord.layout.znodes`.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from zkcoord.errors import CodecError, InvalidNameError
from zkcoord.layout.names import MAX_PARTITIONS, validate_name, validate_topic
from zkcoord.layout.znodes import FORMAT_VERSION, dump_object, get_field, load_object, nonneg_int

Op = Literal["checkpoint", "reset", "retire"]
OPS: tuple[Op, ...] = ("checkpoint", "reset", "retire")
#: ``{(topic, partition): next offset}``
Offsets = Mapping[tuple[str, int], int]


def validate_region(region: str) -> str:
    """A region id follows the topic-name rules.  :raises InvalidNameError:"""
    return validate_name("region", region)


def validate_member(name: str) -> str:
    """A member name (the seed's operator name) follows the topic-name rules; it is a znode name."""
    return validate_name("member", name)


def offsets_to_json(offsets: Offsets) -> dict[str, int]:
    return {f"{t}/{p}": o for (t, p), o in sorted(offsets.items())}


def offsets_from_json(raw: Any, what: str, path: str | None) -> dict[tuple[str, int], int]:
    if not isinstance(raw, dict):
        raise CodecError(what, "field 'offsets' must be an object", path)
    out: dict[tuple[str, int], int] = {}
    for key, value in raw.items():
        topic, slash, part = str(key).rpartition("/")
        try:
            validate_topic(topic)
        except InvalidNameError as e:
            raise CodecError(what, f"bad partition key {str(key)[:60]!r}: {e}", path) from e
        if not slash or not part.isdigit() or int(part) >= MAX_PARTITIONS:
            raise CodecError(what, f"bad partition key {str(key)[:60]!r} (expected topic/partition)", path)
        out[(topic, int(part))] = nonneg_int({"offset": value}, "offset", what, path)
    return out


def _names(obj: Mapping[str, Any], key: str, what: str, path: str | None) -> tuple[str, ...]:
    raw = get_field(obj, key, list, what, path)
    try:
        return tuple(validate_member(get_field({"name": n}, "name", str, what, path)) for n in raw)
    except InvalidNameError as e:
        raise CodecError(what, str(e), path) from e


def _optional_seq(obj: Mapping[str, Any], what: str, path: str | None) -> int | None:
    return None if obj.get("seq") is None else nonneg_int(obj, "seq", what, path)


@dataclass(frozen=True, slots=True)
class RegionRecord:
    """``region``: the id of the group's one region (``/region``'s data)."""

    region: str

    def encode(self) -> bytes:
        return dump_object({"region": self.region, "version": FORMAT_VERSION})

    @classmethod
    def decode(cls, data: bytes | None, path: str | None = None) -> RegionRecord:
        obj = load_object("region", data, path)
        try:
            return cls(validate_region(get_field(obj, "region", str, "region", path)))
        except InvalidNameError as e:
            raise CodecError("region", str(e), path) from e


@dataclass(frozen=True, slots=True)
class ControlOrder:
    """The driver's order (``/region/control``): ``id`` grows by one per order; ``epoch`` is the driver's (each driver
    that takes over raises it); ``op`` with its checkpoint ``seq`` (``None`` with ``reset``: the initial state);
    ``members``: the names the order is for (every one acknowledges it)."""

    epoch: int
    id: int
    op: Op
    seq: int | None
    members: tuple[str, ...]

    def encode(self) -> bytes:
        return dump_object(
            {
                "epoch": self.epoch,
                "id": self.id,
                "op": self.op,
                "seq": self.seq,
                "members": list(self.members),
                "version": FORMAT_VERSION,
            }
        )

    @classmethod
    def decode(cls, data: bytes | None, path: str | None = None) -> ControlOrder:
        what = "region control order"
        obj = load_object(what, data, path)
        op = get_field(obj, "op", str, what, path)
        if op not in OPS:
            raise CodecError(what, f"op must be one of {', '.join(OPS)}, got {op[:30]!r}", path)
        seq = _optional_seq(obj, what, path)
        if seq is None and op != "reset":
            raise CodecError(what, f"op {op!r} needs a seq", path)
        return cls(
            nonneg_int(obj, "epoch", what, path),
            nonneg_int(obj, "id", what, path),
            op,
            seq,
            _names(obj, "members", what, path),
        )


@dataclass(frozen=True, slots=True)
class Ack:
    """A member's answer to order ``id`` (``/region/acks/<name>``): ``ok`` False when it could not carry it out,
    with the ``reason``."""

    id: int
    ok: bool
    reason: str = ""

    def encode(self) -> bytes:
        return dump_object({"id": self.id, "ok": self.ok, "reason": self.reason, "version": FORMAT_VERSION})

    @classmethod
    def decode(cls, data: bytes | None, path: str | None = None) -> Ack:
        what = "region ack"
        obj = load_object(what, data, path)
        return cls(
            nonneg_int(obj, "id", what, path), get_field(obj, "ok", bool, what, path), str(obj.get("reason", ""))
        )


@dataclass(frozen=True, slots=True)
class ResetRequest:
    """A member asks for a reset of the region (``/region/requests/<name>``): ``after`` is the id of the last order
    it had carried out (a request is served by the first reset order with a greater id), ``reason`` why."""

    after: int
    reason: str

    def encode(self) -> bytes:
        return dump_object({"after": self.after, "reason": self.reason, "version": FORMAT_VERSION})

    @classmethod
    def decode(cls, data: bytes | None, path: str | None = None) -> ResetRequest:
        what = "region reset request"
        obj = load_object(what, data, path)
        return cls(nonneg_int(obj, "after", what, path), get_field(obj, "reason", str, what, path))


@dataclass(frozen=True, slots=True)
class Contribution:
    """One member's part of checkpoint ``seq``'s merge (``/region/merges/<seq>/<name>``): its ``member`` name, the
    ``members`` taking part at checkpoint time (their number is N) and its offset map (next offset to fetch)."""

    member: str
    members: tuple[str, ...]
    seq: int
    offsets: Offsets

    def encode(self) -> bytes:
        return dump_object(
            {
                "member": self.member,
                "members": list(self.members),
                "seq": self.seq,
                "offsets": offsets_to_json(self.offsets),
                "version": FORMAT_VERSION,
            }
        )

    @classmethod
    def decode(cls, data: bytes | None, path: str | None = None) -> Contribution:
        what = "region contribution"
        obj = load_object(what, data, path)
        try:
            member = validate_member(get_field(obj, "member", str, what, path))
        except InvalidNameError as e:
            raise CodecError(what, str(e), path) from e
        return cls(
            member,
            _names(obj, "members", what, path),
            nonneg_int(obj, "seq", what, path),
            offsets_from_json(get_field(obj, "offsets", dict, what, path), what, path),
        )


@dataclass(frozen=True, slots=True)
class CompletedRecord:
    """The driver's record of the region's last complete checkpoint (``/region/completed``): ``seq`` (``None``: none
    yet, the initial state), written by driver ``epoch`` after every member named in ``members`` answered ``ok`` and
    the merge was complete.  A driver that takes over resets to this one, never to a merge it infers complete."""

    epoch: int
    seq: int | None
    members: tuple[str, ...]

    def encode(self) -> bytes:
        return dump_object(
            {"epoch": self.epoch, "seq": self.seq, "members": list(self.members), "version": FORMAT_VERSION}
        )

    @classmethod
    def decode(cls, data: bytes | None, path: str | None = None) -> CompletedRecord:
        what = "region completed checkpoint"
        obj = load_object(what, data, path)
        return cls(
            nonneg_int(obj, "epoch", what, path), _optional_seq(obj, what, path), _names(obj, "members", what, path)
        )


@dataclass(frozen=True, slots=True)
class Merge:
    """What the contributions for one seq add up to: ``complete`` when N distinct members (N the size of their
    ``members``, all agreeing) contributed, no partition twice and every required partition covered; ``offsets`` the
    union; ``conflicts`` partitions two members gave; ``uncovered`` required partitions nobody gave."""

    seq: int
    complete: bool
    offsets: dict[tuple[str, int], int]
    conflicts: tuple[tuple[str, int], ...] = ()
    uncovered: tuple[tuple[str, int], ...] = ()
    #: the members whose contributions for ``seq`` were read (a member not among them has no state in the checkpoint)
    contributors: tuple[str, ...] = ()

    def why_not(self) -> str:
        """Why the merge is not complete (empty when it is)."""
        if self.complete:
            return ""
        if self.conflicts:
            return f"partitions given twice: {_keys(self.conflicts)}"
        if self.uncovered:
            return f"partitions with a control variable that no contribution covers: {_keys(self.uncovered)}"
        return "not every member named contributed"


def _keys(tps: tuple[tuple[str, int], ...]) -> str:
    shown = ", ".join(f"{t}/{p}" for t, p in tps[:10])
    return shown + (f" (+{len(tps) - 10})" if len(tps) > 10 else "")


def merge(seq: int, contributions: list[Contribution], required: Collection[tuple[str, int]] = ()) -> Merge:
    """Merge the contributions of checkpoint ``seq`` (pure).  Complete only when every name of the contributors'
    agreed ``members`` contributed for this very seq and every ``required`` partition (one that had a control variable
    when the checkpoint was taken) is covered: a reset to a merge without it would rewind it to its initial offset
    while the states count its records.  A partition given by two members is a conflict (the lower offset is kept:
    re-reading is recoverable, skipping is not) and makes the merge incomplete."""
    mine = [c for c in contributions if c.seq == seq]
    names = {c.member for c in mine}
    expected = {frozenset(c.members) for c in mine}
    complete = len(expected) == 1 and names == set(next(iter(expected))) and bool(names)
    offsets: dict[tuple[str, int], int] = {}
    conflicts: list[tuple[str, int]] = []
    for c in sorted(mine, key=lambda c: c.member):
        for tp, off in c.offsets.items():
            if tp in offsets:
                conflicts.append(tp)
                offsets[tp] = min(offsets[tp], off)
            else:
                offsets[tp] = off
    uncovered = tuple(sorted(set(required) - set(offsets)))
    return Merge(
        seq, complete and not conflicts and not uncovered, offsets, tuple(sorted(set(conflicts))), uncovered,
        tuple(sorted(names)),
    )  # fmt: skip
