"""One view of a group from every layout it lives in (:mod:`zkcoord.admin.group_reads`).  Pure: no I/O.

The rules (``docs/migration.md`` has the protocols they describe):

* **A member** is one consumer id, whichever registries hold it.  Its :class:`Protocol` comes from its
  registrations (:func:`protocol_of`): only in Kafka 0.8's registry and not ``migrating``: ``zk-client``; in the
  coordinator's: ``eager``, ``incremental`` or ``migrating`` as its registration says (a migrating consumer registers
  in 0.8's registry first, so one found there alone with ``"migrating": true`` is migrating, still joining).  Its
  ``counted_as`` is what the coordinator's persisted state counts this incarnation as: ``member``, ``legacy`` (a
  zk-client member of a migrating group) or nothing (not counted yet: a rebalance is due).
* **A partition's owner** is the thread that fetches it.  Where a member claims 0.8 owner znodes (zk-client and
  migrating members both fetch only while they hold one), the 0.8 znode is the lock that counts; the coordinator's
  registry names the owner of the others.  A migrating thread that the coordinator's registry names but that holds
  no 0.8 znode (yet) is ``pending``: it waits for the znode and fetches nothing meanwhile.
* **Ownership problems** (:data:`OWNERSHIP`, what ``--check`` fails on): a partition owned in both layouts at once
  by two members, the coordinator's one not migrating (it fetches without the 0.8 lock, beside the 0.8 owner: S2 is
  broken); a partition whose owner -- in either layout -- names a consumer registered in neither.
* **The committed offset that counts** is the one the owner reads: a zk-client member the 0.8 path, a coordinator
  member its own, a migrating member the newer of the two (both only move forward).  With no owner: the newer of the
  two while members claim in 0.8's layout (the next owner may be either kind), else the coordinator's.

Later protocols (the classic protocol of issue 17, KIP-848's ``consumer`` of issue 16) are :class:`Protocol`
values, each with its layout's registrations; nothing here assumes there are only two.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from zkcoord.admin.group_reads import GroupRead, Key, Layout, Registered, covers
from zkcoord.layout.group_state import GroupPhase, GroupState
from zkcoord.layout.registrations import MemberRegistration


class Protocol(Enum):
    """The protocol a member speaks (``PROTOCOL`` in ``group describe``; the value in ``--json``).

    ``eager`` and ``incremental`` are the coordinator's protocol in its two rebalance modes; ``migrating`` is a
    coordinator member that also claims Kafka 0.8's owner znodes (``--migrating``); ``consumer`` is KIP-848's
    consumer protocol (``--protocol consumer``, Kafka's group type name); ``classic`` the classic protocol of seed 001
    (``--protocol classic``: a leader member computes the assignment).  ``unknown``: no registration of the member
    can be read.
    """

    ZK_CLIENT = "zk-client"
    EAGER = "eager"
    INCREMENTAL = "incremental"
    MIGRATING = "migrating"
    CONSUMER = "consumer"
    CLASSIC = "classic"
    UNKNOWN = "unknown"

    @property
    def claims_0_8(self) -> bool:
        """Whether the member fetches only what it holds a Kafka 0.8 owner znode of."""
        return self in (Protocol.ZK_CLIENT, Protocol.MIGRATING)


class GroupStatus(Enum):
    """The group state shown to users (:func:`derive_status`)."""

    STABLE = "stable"
    REBALANCING = "rebalancing"
    #: a consumer-protocol group whose members are still reconciling to its target (KIP-848's RECONCILING)
    RECONCILING = "reconciling"
    FAILED = "failed"
    EMPTY = "empty"
    UNKNOWN = "unknown"


#: The kinds of problem ``group describe --check`` fails on.
DOUBLE_OWNER = "double owner"
GONE_OWNER = "owner gone"
OWNERSHIP = frozenset({DOUBLE_OWNER, GONE_OWNER})


def protocol_of(coordinator: Registered | None, legacy: Registered | None) -> Protocol:
    """The protocol of a member registered as ``coordinator`` and ``legacy`` (either may be absent)."""
    readable = [r.registration for r in (coordinator, legacy) if r is not None and r.registration is not None]
    if any(reg.migrating for reg in readable):
        return Protocol.MIGRATING
    if coordinator is not None:
        reg = coordinator.registration
        if reg is None:
            return Protocol.UNKNOWN
        if reg.consumer_protocol:
            return Protocol.CONSUMER
        if reg.classic:
            return Protocol.CLASSIC
        return Protocol.INCREMENTAL if reg.incremental else Protocol.EAGER
    return Protocol.ZK_CLIENT if readable else Protocol.UNKNOWN


def consumer_of(thread_id: str) -> str:
    """The consumer id of a thread id ``<consumerId>-<n>``."""
    return thread_id.rsplit("-", 1)[0]


def host_of(group: str, consumer_id: str) -> str | None:
    """The host part of Kafka's consumer id ``<group>_<host>-<ms>-<8 hex>``, or ``None`` if it has another form."""
    found = re.fullmatch(rf"{re.escape(group)}_(.+)-[0-9]+-[0-9a-f]{{8}}", consumer_id)
    return found.group(1) if found else None


@dataclass(frozen=True, slots=True)
class MemberView:
    """One member, from every registry that holds it (``registered``: coordinator's first).

    ``owned``: the partitions it owns (:class:`Ownership`); ``pending``: those the coordinator gave it that it has not
    claimed in 0.8's layout yet.  ``czxid``, ``ctime_ms`` and ``registration`` are those of its coordinator
    registration if it has one, else of its 0.8 one (``registration`` ``None``: unreadable).
    """

    consumer_id: str
    protocol: Protocol
    registered: tuple[Registered, ...]
    counted_as: str | None = None
    host: str | None = None
    owned: int = 0
    pending: int = 0

    def in_layout(self, layout: Layout) -> Registered | None:
        return next((r for r in self.registered if r.layout is layout), None)

    @property
    def czxid(self) -> int:
        return self.registered[0].czxid

    @property
    def ctime_ms(self) -> int:
        return self.registered[0].ctime_ms

    @property
    def registration(self) -> MemberRegistration | None:
        """The registration shown (``None``: unreadable)."""
        return self.registered[0].registration

    @property
    def threads(self) -> int:
        """Consumer threads the member asked for (over all its topics); 0 if its registration is unreadable."""
        return sum(self.registration.subscription.values()) if self.registration else 0

    def to_json(self) -> dict[str, Any]:
        reg = self.registration
        return {
            "consumer_id": self.consumer_id,
            "protocol": self.protocol.value,
            "host": self.host,
            "counted_as": self.counted_as,
            "registered": {
                r.layout.value: {"czxid": r.czxid, "ctime_ms": r.ctime_ms, "readable": r.registration is not None}
                for r in self.registered
            },
            "czxid": self.czxid,
            "ctime_ms": self.ctime_ms,
            "pattern": reg.pattern.value if reg else None,
            "subscription": dict(reg.subscription) if reg else None,
            "timestamp_ms": reg.timestamp_ms if reg else None,
            "threads": self.threads,
            "instance_id": reg.instance_id if reg else None,
            "rack": reg.rack if reg else None,
            "partitions": self.owned,
            "pending": self.pending,
        }


def merge_members(read: GroupRead) -> dict[str, MemberView]:
    """Every member of ``read``, by consumer id (sorted), without their partition counts (:func:`with_counts`)."""
    coordinator, legacy = read.layout(Layout.COORDINATOR), read.layout(Layout.ZK_CLIENT)
    state = coordinator.state
    out: dict[str, MemberView] = {}
    for cid in sorted(coordinator.members.keys() | legacy.members.keys()):
        c, z = coordinator.members.get(cid), legacy.members.get(cid)
        counted = None
        if state is not None and c is not None and state.members.get(cid) == c.czxid:
            counted = "member"
        elif state is not None and z is not None and state.legacy.get(cid) == z.czxid:
            counted = "legacy"
        registered = tuple(r for r in (c, z) if r is not None)
        out[cid] = MemberView(cid, protocol_of(c, z), registered, counted, host_of(read.group, cid))
    return out


def membership_changed(members: Mapping[str, MemberView], state: GroupState | None) -> bool:
    """Whether the registered members differ from those the coordinator's state counts (a rebalance is due): its
    own members (every coordinator registration, by incarnation) and the zk-client members (readable 0.8
    registrations that are not migrating, as the coordinator counts them)."""
    if state is None:
        return False
    own = {cid: r.czxid for cid, m in members.items() if (r := m.in_layout(Layout.COORDINATOR)) is not None}
    zk_client = {
        cid: r.czxid
        for cid, m in members.items()
        if m.protocol is Protocol.ZK_CLIENT and (r := m.in_layout(Layout.ZK_CLIENT)) is not None
    }
    return dict(state.members) != own or dict(state.legacy) != zk_client


def derive_status(
    members: Mapping[str, MemberView], state: GroupState | None, unclaimed: int, pending: int
) -> GroupStatus:
    """The user-facing state: ``empty`` without members; with members of the coordinator's, from its persisted
    phase (``unknown``: never rebalanced, or the state is unreadable); then, while members claim 0.8 owner znodes,
    ``rebalancing`` until every partition of their subscriptions has one (``unclaimed`` is how many have none) and
    no migrating member waits for one (``pending``)."""
    if not members:
        return GroupStatus.EMPTY
    status = GroupStatus.STABLE
    if any(m.in_layout(Layout.COORDINATOR) is not None for m in members.values()):
        if state is None:
            return GroupStatus.UNKNOWN
        if state.phase is GroupPhase.FAILED:
            return GroupStatus.FAILED
        if state.phase in (GroupPhase.STOPPING, GroupPhase.STARTING):
            return GroupStatus.REBALANCING
        if state.phase is GroupPhase.RECONCILING:
            return GroupStatus.RECONCILING
    if (unclaimed or pending) and any(m.protocol.claims_0_8 for m in members.values()):
        status = GroupStatus.REBALANCING
    return status


def unclaimed(read: GroupRead, members: Mapping[str, MemberView]) -> list[Key]:
    """The partitions of the topics that 0.8-claiming members subscribe to that have no 0.8 owner znode."""
    registrations = [
        r.registration for m in members.values() if m.protocol.claims_0_8 for r in m.registered if r.registration
    ]
    topics = {t for t in read.partition_counts if any(covers(reg, t) for reg in registrations)}
    owned = read.layout(Layout.ZK_CLIENT).owned
    return [(t, p) for t in sorted(topics) for p in range(read.partition_counts[t]) if (t, p) not in owned]


@dataclass(frozen=True, slots=True)
class Ownership:
    """Who owns one partition, and the committed offset that counts (module docstring has the rules).

    ``owners`` and ``offsets`` hold each layout's znode (value ``None``: unreadable; layout absent: no znode).
    ``committed`` is ``None`` when absent or unreadable (``committed_unreadable`` tells them apart).
    """

    owner: str | None
    protocol: Protocol | None
    live: bool
    pending: str | None
    owners: Mapping[Layout, str | None]
    offsets: Mapping[Layout, int | None]
    committed: int | None
    committed_from: Layout | None
    committed_unreadable: bool
    problems: tuple[tuple[str, str], ...] = field(default=())


def ownership(
    key: Key, read: GroupRead, members: Mapping[str, MemberView], claims_0_8: bool, coordinated: bool
) -> Ownership:
    """Merge ``key``'s owner znodes and offsets across the layouts.  ``claims_0_8``: some member claims 0.8 owner
    znodes; ``coordinated``: some member is the coordinator's."""
    c, z = read.layout(Layout.COORDINATOR), read.layout(Layout.ZK_CLIENT)
    where = f"{key[0]}-{key[1]}"
    problems: list[tuple[str, str]] = []
    owner: str | None = z.owners.get(key)
    pending: str | None = None
    theirs = c.owners.get(key)
    if theirs is not None and theirs != owner:
        holder = members.get(consumer_of(theirs))
        if holder is not None and holder.protocol is Protocol.MIGRATING:
            pending = theirs  # it claims the 0.8 znode before it fetches: it waits
        elif owner is None:
            owner = theirs  # no readable 0.8 owner: the coordinator's registry says who fetches
        elif holder is None:
            why = f"the coordinator's registry names {theirs}, of a consumer registered nowhere"
            problems.append((GONE_OWNER, f"{where}: {why} (Kafka 0.8's owner znode names {owner})"))
        else:
            problems.append(
                (
                    DOUBLE_OWNER,
                    f"{where} is owned in both layouts at once: {theirs} ({holder.protocol.value}, the coordinator's "
                    f"registry) and {owner} (Kafka 0.8's owner znode): a coordinator member without --migrating "
                    "fetches beside the 0.8 owner",
                )
            )
    member = members.get(consumer_of(owner)) if owner is not None else None
    if owner is not None and member is None:
        layout = "Kafka 0.8's owner znode" if owner == z.owners.get(key) else "the coordinator's registry"
        problems.append((GONE_OWNER, f"{where} is owned by {owner} ({layout}), whose consumer is registered nowhere"))
    protocol = member.protocol if member is not None else None
    offsets = {lay: lr.offsets[key] for lay, lr in read.layouts.items() if key in lr.offsets}
    committed, source, unreadable = counted_offset(
        protocol or (members[consumer_of(pending)].protocol if pending else None), offsets, claims_0_8, coordinated
    )
    return Ownership(
        owner=owner,
        protocol=protocol,
        live=member is not None,
        pending=pending,
        owners={lay: lr.owners.get(key) for lay, lr in read.layouts.items() if key in lr.owned},
        offsets=offsets,
        committed=committed,
        committed_from=source,
        committed_unreadable=unreadable,
        problems=tuple(problems),
    )


def counted_offset(
    protocol: Protocol | None, offsets: Mapping[Layout, int | None], claims_0_8: bool, coordinated: bool
) -> tuple[int | None, Layout | None, bool]:
    """``(offset, its layout, unreadable)``: the committed offset that counts for an owner speaking ``protocol``
    (``None``: no owner).  Newer-of-both is ``None`` and unreadable if either is unreadable (which is newer is
    unknown)."""
    if protocol is Protocol.ZK_CLIENT:
        wanted: Sequence[Layout] = (Layout.ZK_CLIENT,)
    elif protocol is Protocol.MIGRATING or (protocol is None and (claims_0_8 or not coordinated)):
        wanted = (Layout.COORDINATOR, Layout.ZK_CLIENT)
    else:
        wanted = (Layout.COORDINATOR,)
    present = {layout: offsets[layout] for layout in wanted if layout in offsets}
    if not present:
        return None, None, False
    if any(value is None for value in present.values()):
        return None, None, True
    layout = max(present, key=lambda lay: (present[lay], lay is Layout.COORDINATOR))
    return present[layout], layout, False


def with_counts(members: Mapping[str, MemberView], owned: Sequence[Ownership]) -> tuple[MemberView, ...]:
    """``members`` with their ``owned`` and ``pending`` partition counts."""
    owns = Counter(consumer_of(o.owner) for o in owned if o.owner is not None)
    waits = Counter(consumer_of(o.pending) for o in owned if o.pending is not None)
    return tuple(
        MemberView(m.consumer_id, m.protocol, m.registered, m.counted_as, m.host, owns[cid], waits[cid])
        for cid, m in members.items()
    )


def protocol_mix(members: Sequence[MemberView] | Mapping[str, MemberView]) -> dict[str, int]:
    """How many members speak each protocol (those present only), in :class:`Protocol` order."""
    views = members.values() if isinstance(members, Mapping) else members
    counts = Counter(m.protocol for m in views)
    return {p.value: counts[p] for p in Protocol if counts[p]}


def migration(members: Sequence[MemberView], state: GroupState | None) -> dict[str, Any] | None:
    """The migration's progress, or ``None`` for a group with no 0.8 side (no zk-client or migrating member, and
    none in the coordinator's ``legacy`` map): ``to_move`` the zk-client members, ``moved`` the others, ``done`` when
    no zk-client member is left."""
    if not any(m.protocol.claims_0_8 for m in members) and not (state and state.legacy):
        return None
    to_move = [m.consumer_id for m in members if m.protocol is Protocol.ZK_CLIENT]
    moved = [m.consumer_id for m in members if m.protocol is not Protocol.ZK_CLIENT]
    return {"to_move": to_move, "moved": moved, "done": not to_move}
