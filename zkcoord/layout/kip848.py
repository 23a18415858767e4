"""The records KIP-848's consumer protocol persists, and their codecs (``reference/modern-group-protocols.md`` §1.1).

Kafka keeps a consumer group as records in ``__consumer_offsets``; this project keeps the same records in znodes:

* :class:`GroupEpochs` -- ``ConsumerGroupMetadata`` (the group epoch) and ``ConsumerGroupTargetAssignmentMetadata``
  (the assignment epoch) in one record, written together by the coordinator;
* :class:`MemberTarget` -- ``ConsumerGroupTargetAssignmentMember``: one member's target partitions, with the
  assignment epoch at which they were last written; :class:`TargetAssignment` is the whole target, assembled
  (:meth:`TargetAssignment.assemble`) from the group's epochs and every member's record;
* :class:`CurrentAssignment` -- ``ConsumerGroupCurrentMemberAssignment``: a member's epoch, its previous epoch, its
  :class:`MemberState`, its assigned partitions and those pending revocation.

The rules that move these records live in :mod:`zkcoord.protocol.kip848`, which re-exports them.  The records live
here, beside every other znode's codec, because they are the layout's contract: what a coordinator elected after a
failover reads back, and what ``docs/zookeeper-layout.md`` describes field by field.

Every record validates itself on construction (``ValueError``: a record that breaks KIP-848's invariants is never
built) and every ``decode`` refuses, with :class:`~zkcoord.errors.CodecError`, anything this code would not have
written: a wrong version, an unknown or missing field, a bad name, a duplicate partition, a negative or too large
epoch, a partition both assigned and pending revocation (S7).  The one leniency is Kafka's: a state code this
release does not know decodes as :attr:`MemberState.UNKNOWN` (a newer release wrote it; §1.3 fences such a member
unless it owns nothing), so a downgrade does not make the group unreadable.

Pure: no I/O, no clock.  May import :mod:`zkcoord.errors` and :mod:`zkcoord.layout` (names, the shared format).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from itertools import pairwise
from types import MappingProxyType
from typing import Any, Self, TypeVar

from zkcoord.errors import CodecError, InvalidNameError
from zkcoord.layout.carried_offsets import CarriedOffsets, decode_carried, encode_carried
from zkcoord.layout.names import MAX_PARTITIONS, validate_topic
from zkcoord.layout.partition_set import NO_PARTITIONS, PartitionSet
from zkcoord.layout.znodes import FORMAT_VERSION, dump_object, get_field, load_object

#: KIP-848's epochs are Java ints (``int32`` in every record and request): a larger one was never written by Kafka's
#: rules, and accepting it would let a forged record put a member past any epoch a real coordinator reaches.
MAX_EPOCH = 2**31 - 1

_R = TypeVar("_R")


class MemberState(Enum):
    """A member's reconciliation state, with Kafka's codes (``GC/modern/MemberState.java``; §1.3)."""

    #: fully reconciled with its target (at the target's epoch when ``member_epoch`` equals it)
    STABLE = 0
    #: must revoke some partitions before it can move to the target's epoch
    UNREVOKED_PARTITIONS = 1
    #: at the target's epoch, waiting for partitions that their previous owners have not released yet
    UNRELEASED_PARTITIONS = 2
    #: written by a newer release with a state this one does not know: fenced unless it owns nothing
    UNKNOWN = 127

    @classmethod
    def from_code(cls, code: int) -> MemberState:
        """Kafka's ``MemberState.fromValue``: a code this release does not know is :attr:`UNKNOWN`."""
        for state in cls:
            if state.value == code:
                return state
        return cls.UNKNOWN


def check_epoch(name: str, value: int) -> int:
    """:raises ValueError: ``value`` is not an int (a bool is not) in ``0..MAX_EPOCH``."""
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_EPOCH:
        raise ValueError(f"{name} must be an integer in 0..{MAX_EPOCH}, got {value!r}")
    return value


# --- the records -------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CurrentAssignment:
    """One member's current assignment (Kafka's ``ConsumerGroupCurrentMemberAssignment``).

    ``assigned`` are the partitions the member may fetch; ``pending_revocation`` those it must give up before its
    epoch can advance (they still count as its own: nobody else is granted them until it acknowledges).  Mappings
    given for either are normalized into :class:`PartitionSet`.

    :raises ValueError: an epoch outside ``0..MAX_EPOCH``; a partition both assigned and pending revocation; a
        partition pending revocation in a state other than ``UNREVOKED_PARTITIONS`` (or ``UNKNOWN``, which only a
        newer release writes and which is never kept).
    """

    member_epoch: int
    previous_member_epoch: int
    state: MemberState
    assigned: PartitionSet = NO_PARTITIONS
    pending_revocation: PartitionSet = NO_PARTITIONS

    def __post_init__(self) -> None:
        check_epoch("member_epoch", self.member_epoch)
        check_epoch("previous_member_epoch", self.previous_member_epoch)
        if not isinstance(self.state, MemberState):
            raise TypeError(f"state must be a MemberState, got {self.state!r}")
        object.__setattr__(self, "assigned", PartitionSet.of(self.assigned))
        object.__setattr__(self, "pending_revocation", PartitionSet.of(self.pending_revocation))
        overlap = self.assigned & self.pending_revocation
        if overlap:
            raise ValueError(f"partitions both assigned and pending revocation: {overlap!r}")
        if self.pending_revocation and self.state not in (MemberState.UNREVOKED_PARTITIONS, MemberState.UNKNOWN):
            raise ValueError(f"a member in state {self.state.name} has no partitions pending revocation")

    def is_reconciled_to(self, assignment_epoch: int) -> bool:
        """Kafka's ``isReconciledTo``: stable at that epoch."""
        return self.state is MemberState.STABLE and self.member_epoch == assignment_epoch

    def encode(self) -> bytes:
        return dump_object(
            {
                "version": FORMAT_VERSION,
                "member_epoch": self.member_epoch,
                "previous_member_epoch": self.previous_member_epoch,
                "state": self.state.value,
                "assigned": encode_partitions(self.assigned),
                "pending_revocation": encode_partitions(self.pending_revocation),
            }
        )

    @classmethod
    def decode(cls, data: bytes | None, path: str | None = None) -> Self:
        what = "current assignment"
        obj = _load(
            what, data, path, ("member_epoch", "previous_member_epoch", "state", "assigned", "pending_revocation")
        )
        code = get_field(obj, "state", int, what, path)
        if not -128 <= code <= 127:  # Kafka's State is an int8
            raise CodecError(what, f"field 'state' must be a state code in -128..127, got {str(code)[:40]}", path)
        return _build(
            cls,
            what,
            path,
            member_epoch=_epoch(obj, "member_epoch", what, path),
            previous_member_epoch=_epoch(obj, "previous_member_epoch", what, path),
            state=MemberState.from_code(code),
            assigned=decode_partitions(obj["assigned"], "assigned", what, path),
            pending_revocation=decode_partitions(obj["pending_revocation"], "pending_revocation", what, path),
        )


@dataclass(frozen=True, slots=True)
class GroupEpochs:
    """A group's epochs: ``group_epoch`` is bumped by every change of members, subscriptions or partition metadata;
    ``assignment_epoch`` is the group epoch the current target assignment was computed at.

    :raises ValueError: an epoch outside ``0..MAX_EPOCH``, or an assignment epoch ahead of the group epoch (a target
        is only ever computed at an epoch the group has reached).
    """

    group_epoch: int
    assignment_epoch: int

    def __post_init__(self) -> None:
        check_epoch("group_epoch", self.group_epoch)
        check_epoch("assignment_epoch", self.assignment_epoch)
        if self.assignment_epoch > self.group_epoch:
            raise ValueError(f"assignment epoch {self.assignment_epoch} is ahead of group epoch {self.group_epoch}")

    def encode(self) -> bytes:
        return dump_object(
            {"version": FORMAT_VERSION, "group_epoch": self.group_epoch, "assignment_epoch": self.assignment_epoch}
        )

    @classmethod
    def decode(cls, data: bytes | None, path: str | None = None) -> Self:
        what = "group epochs"
        obj = _load(what, data, path, ("group_epoch", "assignment_epoch"))
        return _build(
            cls,
            what,
            path,
            group_epoch=_epoch(obj, "group_epoch", what, path),
            assignment_epoch=_epoch(obj, "assignment_epoch", what, path),
        )


@dataclass(frozen=True, slots=True)
class MemberTarget:
    """One member's target partitions and the assignment epoch at which they were written (a target is rewritten
    only for the members whose partitions change, as Kafka's ``TargetAssignmentBuilder`` does, so it may be older
    than the group's assignment epoch, never newer).

    :raises ValueError: an epoch outside ``0..MAX_EPOCH``.
    """

    epoch: int
    partitions: PartitionSet = NO_PARTITIONS

    def __post_init__(self) -> None:
        check_epoch("epoch", self.epoch)
        object.__setattr__(self, "partitions", PartitionSet.of(self.partitions))

    def encode(self) -> bytes:
        return dump_object(
            {"version": FORMAT_VERSION, "epoch": self.epoch, "partitions": encode_partitions(self.partitions)}
        )

    @classmethod
    def decode(cls, data: bytes | None, path: str | None = None) -> Self:
        what = "member target"
        obj = _load(what, data, path, ("epoch", "partitions"))
        return _build(
            cls,
            what,
            path,
            epoch=_epoch(obj, "epoch", what, path),
            partitions=decode_partitions(obj["partitions"], "partitions", what, path),
        )


@dataclass(frozen=True, slots=True)
class TargetAssignment:
    """A group's target assignment: its epoch (the group's assignment epoch) and each member's target partitions.

    :raises ValueError: an epoch outside ``0..MAX_EPOCH``, a member id that is not a non-empty string, or a
        partition in two members' targets (an assignor hands each partition to one member at most).
    """

    epoch: int
    members: Mapping[str, PartitionSet] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_epoch("epoch", self.epoch)
        members: dict[str, PartitionSet] = {}
        holder: dict[tuple[str, int], str] = {}
        for member, partitions in self.members.items():
            if not isinstance(member, str) or not member:
                raise ValueError(f"a member id must be a non-empty string, got {member!r}")
            members[member] = PartitionSet.of(partitions)
            for tp in members[member].pairs():
                other = holder.setdefault(tp, member)
                if other != member:
                    raise ValueError(f"partition {tp[0]}/{tp[1]} is in the targets of both {other!r} and {member!r}")
        object.__setattr__(self, "members", MappingProxyType(members))  # read-only, as the record is frozen

    def __hash__(self) -> int:
        return hash((self.epoch, frozenset(self.members.items())))

    def of(self, member: str) -> PartitionSet:
        """``member``'s target; nothing for a member without one."""
        return self.members.get(member, NO_PARTITIONS)

    @classmethod
    def assemble(cls, epochs: GroupEpochs, records: Mapping[str, MemberTarget], path: str | None = None) -> Self:
        """The target read back: ``epochs.assignment_epoch`` and every member's record.

        :raises CodecError: a member's record newer than the assignment epoch (written by a coordinator that did not
            finish writing its target), or two members' records holding one partition.
        """
        what = "target assignment"
        for member, record in records.items():
            if record.epoch > epochs.assignment_epoch:
                raise CodecError(
                    what,
                    f"the target of {member!r} is at epoch {record.epoch}, ahead of assignment epoch "
                    f"{epochs.assignment_epoch}",
                    path,
                )
        return _build(
            cls, what, path, epoch=epochs.assignment_epoch, members={m: r.partitions for m, r in records.items()}
        )


# --- the codec's parts ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AssignmentAck:
    """A member's acknowledgement of its assignment znode (``ack/<m>``, written by the member): ``assignment`` is
    the ``mzxid`` of the assignment it handled -- the zxid of the coordinator's transaction that wrote it, so it
    names one write, never another (versions start over when a znode is created again; zxids never do).  ``refused``:
    the member read it and did not apply it (malformed, stale, forged, meant for another registration); the
    coordinator takes its command for lost and writes it again.  ``offsets``: with a stop's acknowledgement, the
    committed offset of each partition given up and the version of the offset znode holding it, as the stop's own
    transaction leaves them (:mod:`~zkcoord.layout.carried_offsets`; absent from the data when empty): the
    coordinator carries them on to the partitions' next owner.  They are an optimisation (the next owner reads what
    is not carried), so bad ``offsets`` do not make the acknowledgement bad: :meth:`decode` leaves them out and says
    why in ``offsets_refused``.

    :raises ValueError: a negative zxid.
    """

    assignment: int
    refused: bool = False
    offsets: CarriedOffsets = field(default_factory=dict)
    #: why the data's ``offsets`` were left out (not part of the data; None: none were, or they were fine)
    offsets_refused: str | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.assignment < 0:
            raise ValueError(f"an assignment's zxid must be >= 0, got {self.assignment}")

    def encode(self) -> bytes:
        obj: dict[str, Any] = {"version": FORMAT_VERSION, "assignment": self.assignment, "refused": self.refused}
        if any(self.offsets.values()):
            obj["offsets"] = encode_carried(self.offsets)
        return dump_object(obj)

    @classmethod
    def decode(cls, data: bytes | None, path: str | None = None) -> Self:
        what = "assignment acknowledgement"
        obj = _load(what, data, path, ("assignment", "refused"), optional=("offsets",))
        assignment: int = get_field(obj, "assignment", int, what, path)
        refused: bool = get_field(obj, "refused", bool, what, path)
        offsets: CarriedOffsets = {}
        offsets_refused = None
        if "offsets" in obj:
            try:
                offsets = decode_carried(obj["offsets"], what, path)
            except CodecError as e:
                offsets_refused = str(e)
        return _build(
            cls, what, path, assignment=assignment, refused=refused, offsets=offsets, offsets_refused=offsets_refused
        )


def encode_partitions(partitions: PartitionSet) -> dict[str, list[int]]:
    """``{topic: [partitions, ascending]}``, topics with none absent: one encoding per set."""
    return {t: sorted(ps) for t, ps in sorted(partitions.items())}


def decode_partitions(raw: Any, name: str, what: str, path: str | None) -> PartitionSet:
    """The strict inverse of :func:`encode_partitions`.

    :raises CodecError: not an object; a bad topic name; a topic with no partitions; partitions that are not
        integers in ``0..MAX_PARTITIONS-1`` listed once each in ascending order.
    """
    if not isinstance(raw, dict):
        raise CodecError(what, f"field {name!r} must be an object topic -> [partitions]", path)
    out: dict[str, Iterable[int]] = {}
    for topic, parts in raw.items():
        try:
            validate_topic(topic)
        except InvalidNameError as e:
            raise CodecError(what, f"field {name!r}: {e}", path) from e
        if (
            not isinstance(parts, list)
            or not parts
            or not all(isinstance(p, int) and not isinstance(p, bool) and 0 <= p < MAX_PARTITIONS for p in parts)
            or any(a >= b for a, b in pairwise(parts))
        ):
            raise CodecError(
                what,
                f"field {name!r}: topic {topic!r} must list partition numbers 0..{MAX_PARTITIONS - 1}, "
                "at least one, each once, ascending",
                path,
            )
        out[topic] = parts
    return PartitionSet(out)


def _load(
    what: str, data: bytes | None, path: str | None, fields: tuple[str, ...], optional: tuple[str, ...] = ()
) -> dict[str, Any]:
    obj = load_object(what, data, path)
    unknown = sorted(set(obj) - {"version", *fields, *optional})
    if unknown:
        raise CodecError(what, f"unknown field {unknown[0][:40]!r}", path)
    for name in fields:
        if name not in obj:
            raise CodecError(what, f"missing field {name!r}", path)
    return obj


def _epoch(obj: Mapping[str, Any], key: str, what: str, path: str | None) -> int:
    value: int = get_field(obj, key, int, what, path)
    if not 0 <= value <= MAX_EPOCH:
        raise CodecError(what, f"field {key!r} must be an epoch in 0..{MAX_EPOCH}, got {str(value)[:40]}", path)
    return value


def _build(cls: type[_R], what: str, path: str | None, **fields: Any) -> _R:
    """``cls(**fields)``, its invariants broken turned into the codec's refusal."""
    try:
        return cls(**fields)
    except ValueError as e:
        raise CodecError(what, str(e), path) from e
