"""Planning a rebalance: pure functions from what ZooKeeper holds to the target assignment and whether it is needed.

Nothing here does I/O, so the necessity check (seed section D, steps 3.1–3.5) is tested on plain values (subscription
resolution lives in :mod:`zkcoord.protocol.subscriptions`).  :func:`plan` is called by the coordinator's worker with
a :class:`GroupSnapshot` it has just read.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from zkcoord.errors import ConfigurationError
from zkcoord.layout.group_config import GroupConfig
from zkcoord.layout.group_state import GroupPhase, GroupState
from zkcoord.layout.registrations import MemberRegistration
from zkcoord.protocol.assignors import (
    Assignment,
    PartitionRacks,
    Racks,
    get_assignor,
    range_assign,
    uniform_assign,
)
from zkcoord.protocol.subscriptions import resolve


@dataclass(frozen=True, slots=True)
class Member:
    consumer_id: str
    registration: MemberRegistration
    #: czxid of the registration znode: a re-registered consumer (new session) is a new incarnation.
    incarnation: int


@dataclass(frozen=True, slots=True)
class GroupSnapshot:
    """What the coordinator read of one group just before planning."""

    group: str
    members: Mapping[str, Member]
    state: GroupState | None
    #: the ownership registry: topic -> partition -> owning thread
    owners: Assignment
    #: (path, reason) of znodes that could not be decoded: reported, then left out (S7)
    rejected: tuple[tuple[str, str], ...] = ()
    #: a migrating group's ``zk-client`` members (``/consumers/<g>/ids``, less our own members' mirror registrations)
    legacy: Mapping[str, Member] = field(default_factory=dict)
    #: members whose registration znode exists but cannot be decoded: consumer id -> incarnation (its ``czxid``).
    #: Such a member is alive (its session holds the ephemeral).  If it may be fetching (:func:`unreadable_holders`)
    #: it is a member of the rebalance like any other -- stopped before anything it holds moves -- but, what it
    #: subscribes to being unknown, it is given nothing until its registration can be read again.
    unreadable: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Plan:
    """The target of one rebalance.

    In a migrating group (``docs/migration.md``) the assignment is computed over every member of both protocols,
    exactly as the ``zk-client`` members compute it themselves; :attr:`target` then holds only the coordinator
    members' share (the coordinator commands only them), and :attr:`legacy` the other members' incarnations.
    """

    group: str
    members: dict[str, int]
    subscriptions: dict[str, dict[str, int]]
    target: Assignment
    necessary: bool
    reason: str
    assignor: str
    #: (what, reason) pairs worth a journal event: subscriptions to missing topics, assignor fallbacks
    notes: list[tuple[str, str]] = field(default_factory=list)
    #: the zk-client members of a migrating group, consumer id -> incarnation
    legacy: dict[str, int] = field(default_factory=dict)
    #: partitions the assignment leaves to the zk-client members (they claim them themselves)
    legacy_partitions: int = 0
    #: every member registered ``incremental`` (and none is migrating): the group's assignor is ``uniform``, given what
    #: the members fetch now (:func:`still_held`), and, from a STABLE state, the rebalance may move only what changes
    #: (see :func:`moves`)
    incremental: bool = False
    #: the group's dynamic config the plan was made with (an attempt keeps it to its end: its steps' timeouts)
    config: GroupConfig = field(default_factory=GroupConfig)
    #: members beyond the config's ``max.size`` (:func:`admitted`): given nothing
    excluded: tuple[str, ...] = ()


def necessity(
    snapshot: GroupSnapshot, members: Mapping[str, int], target: Assignment, legacy: Mapping[str, int] | None = None
) -> str | None:
    """Why a rebalance is needed, or None (seed D 3.1–3.5, plus what a persisted state adds)."""
    state = snapshot.state
    legacy = legacy or {}
    if state is None:
        return "no persisted state"
    if state.phase is not GroupPhase.STABLE:
        return f"previous rebalance left the group {state.phase.value}"
    if dict(state.members) != dict(members):
        return "membership changed"
    if dict(state.legacy) != dict(legacy):
        return "zk-client membership changed"
    owners = snapshot.owners
    if not owners and target:
        return "no ownership registered"  # 3.1
    for topic, parts in target.items():
        held = owners.get(topic, {})
        if any(p not in held for p in parts):
            return "unowned partitions"  # 3.2
    for topic, parts in owners.items():
        if any(p not in target.get(topic, {}) for p in parts):
            return "owned partitions no longer assigned"  # 3.3
    if owners != target:
        return "ownership differs from the new assignment"  # 3.4
    return None  # 3.5


def plan(
    snapshot: GroupSnapshot,
    topics: Mapping[str, int],
    assignor: str,
    config: GroupConfig | None = None,
    racks: PartitionRacks | None = None,
) -> Plan:
    """Compute the target assignment for ``snapshot`` and decide whether a rebalance is necessary.

    ``assignor`` is the coordinator's, for eager groups; ``config`` the group's dynamic config
    (``/config/groups/<g>``), whose ``assignor`` replaces it (and uniform, for incremental groups) and whose
    ``max.size`` leaves the last registered members out (:func:`admitted`).  Neither applies to a migrating group:
    its zk-client members compute the assignment over every member with their own assignor, and must agree.
    ``racks`` (the racks of the topics' partitions) and the members' registered racks go to the uniform assignor of
    incremental groups.
    """
    config = config or GroupConfig()
    notes: list[tuple[str, str]] = []
    subscriptions: dict[str, dict[str, int]] = {}
    in_plan, excluded = admitted(snapshot, config)
    everyone = {**snapshot.legacy, **{cid: m for cid, m in snapshot.members.items() if cid not in excluded}}
    if snapshot.legacy:
        if not config.empty:
            notes.append(("group config", "not applied while zk-client members compute the assignment too"))
        # A member without --migrating takes no 0.8 owner znodes and the zk-client members do not count it: given
        # partitions, it would fetch beside them.  It gets none until the zk-client members are gone.
        for cid, member in sorted(snapshot.members.items()):
            if not member.registration.migrating:
                del everyone[cid]
                notes.append((f"member {cid}", "not --migrating in a group with zk-client members: given nothing"))
    for cid, member in sorted(everyone.items()):
        resolved, missing = resolve(member.registration, topics)
        for topic in missing:
            notes.append((f"subscription of {cid}", f"topic {topic!r} does not exist; left out until it does"))
        subscriptions[cid] = resolved
    partitions = {t: topics[t] for subs in subscriptions.values() for t in subs}
    incremental = incremental_group(snapshot)
    used = assignor if snapshot.legacy else config.assignor or ("uniform" if incremental else assignor)
    try:
        if incremental and used == "uniform":
            # Sticky to what the members fetch now (entries of a member given nothing, as an excluded one, are free).
            member_racks = {c: m.registration.rack for c, m in snapshot.members.items() if m.registration.rack}
            where = Racks(member_racks, racks or {})
            target = uniform_assign(subscriptions, partitions, previous=still_held(snapshot), racks=where)
        else:
            target = get_assignor(used)(subscriptions, partitions)
    except ConfigurationError as e:
        # Kafka fails the whole rebalance here; a coordinator serving many groups falls back and says why.
        notes.append(("assignor", f"{e}; falling back to range"))
        used = "range"
        target = range_assign(subscriptions, partitions)
    legacy_partitions = 0
    if snapshot.legacy:
        everything = sum(len(parts) for parts in target.values())
        target = restrict(target, snapshot.members)
        legacy_partitions = everything - sum(len(parts) for parts in target.values())
    members = {cid: m.incarnation for cid, m in snapshot.members.items() if cid in in_plan}
    members.update(unreadable_holders(snapshot))  # stopped with everyone, given nothing
    legacy = {cid: m.incarnation for cid, m in snapshot.legacy.items()}
    reason = necessity(snapshot, members, target, legacy)
    return Plan(
        group=snapshot.group,
        members=members,
        subscriptions=subscriptions,
        target=target,
        necessary=reason is not None,
        reason=reason or "assignment unchanged",
        assignor=used,
        notes=notes,
        legacy=legacy,
        legacy_partitions=legacy_partitions,
        incremental=incremental,
        config=config,
        excluded=tuple(excluded),
    )


def admitted(snapshot: GroupSnapshot, config: GroupConfig) -> tuple[set[str], list[str]]:
    """The members of the rebalance, and those of them beyond ``max.size`` (:meth:`GroupConfig.over_max_size`:
    the last registered), which are given nothing (Kafka's GROUP_MAX_SIZE_REACHED).

    An excluded member stays a member of the rebalance -- stopped before anything moves, sent its (empty) start --
    while it may be fetching or was told it has nothing: while the registry names it, or the state records its
    incarnation (it was a member of the last rebalance).  One that joins beyond the maximum is left out, as an
    unreadable registration holding nothing is: its join changes nothing, so no rebalance is started for it and it
    hears nothing until a place frees up (a member leaves, ``max.size`` is raised), which is a membership change.
    Not applied to a migrating group (see :func:`plan`); unreadable registrations are not counted (they are given
    nothing anyway).
    """
    everyone = set(snapshot.members)
    if snapshot.legacy:
        return everyone, []
    excluded = config.over_max_size({cid: m.incarnation for cid, m in snapshot.members.items()})
    if not excluded:
        return everyone, []
    recorded = snapshot.state.members if snapshot.state is not None else {}
    named = {thread.rsplit("-", 1)[0] for parts in snapshot.owners.values() for thread in parts.values()}
    waiting = {cid for cid in excluded if cid not in named and recorded.get(cid) != snapshot.members[cid].incarnation}
    return everyone - waiting, excluded


def incremental_group(snapshot: GroupSnapshot) -> bool:
    """Whether every member asked for incremental rebalancing, in a group with no migration going on (a migrating
    consumer's 0.8 claims are all-or-nothing, so such groups stay eager) and no member whose registration cannot be
    read (what it asked for is unknown: the group is rebalanced eagerly, every member stopped)."""
    members = snapshot.members.values()
    return (
        bool(snapshot.members)
        and not snapshot.legacy
        and not unreadable_holders(snapshot)
        and all(m.registration.incremental and not m.registration.migrating for m in members)
    )


def unreadable_holders(snapshot: GroupSnapshot) -> dict[str, int]:
    """The members whose registration cannot be read that may be fetching, consumer id -> incarnation: those the
    ownership registry names, or, in the incarnation the state recorded, the state's target names.  A consumer fetches
    only what a start-fetcher for its incarnation gave it, which the registry and the target record (the registry
    even when the state is lost).  The others -- a registration that never got anything, or an earlier incarnation's
    -- fetch nothing: they are left out of the rebalance (a znode no consumer stands behind would otherwise block it,
    never acknowledging a stop), and reported."""
    state = snapshot.state
    named = {thread.rsplit("-", 1)[0] for parts in snapshot.owners.values() for thread in parts.values()}
    if state is not None:
        named |= {
            cid
            for cid in snapshot.unreadable
            if state.members.get(cid) == snapshot.unreadable[cid]
            and any(t.rsplit("-", 1)[0] == cid for parts in state.target.values() for t in parts.values())
        }
    return {cid: incarnation for cid, incarnation in snapshot.unreadable.items() if cid in named}


def registry_vouched(snapshot: GroupSnapshot) -> bool:
    """Whether the ownership registry says what every live member may be fetching, so that an incremental rebalance
    may rely on it: the state is STABLE and, over the members still in the incarnation it recorded, the registry
    equals its target.

    A STABLE state's target and the registry are written together (the start step writes both; in a hand-over the
    old owners write the new threads before acknowledging, and the state is STABLE only once all did), so for live
    members they agree -- unless someone changed an owner znode.  One deleted by hand makes its partition look free
    although its member still fetches it (a new coordinator, which reads the registry afresh, would hand it to
    another member with no stop: S2); one rewritten names the wrong fetcher.  Then only the state's target says who
    fetches what, and no start may go out before everyone is stopped: the rebalance is eager.
    """
    state = snapshot.state
    if state is None or state.phase is not GroupPhase.STABLE:
        return False
    alive = {cid for cid, member in snapshot.members.items() if state.members.get(cid) == member.incarnation}
    alive |= {cid for cid, incarnation in snapshot.unreadable.items() if state.members.get(cid) == incarnation}
    return restrict(snapshot.owners, alive) == restrict(state.target, alive)


def still_held(snapshot: GroupSnapshot) -> Assignment:
    """The registry's entries whose thread belongs to a member still in its recorded incarnation.

    Only those may be fetching now: a member that left, or came back in a new session, stopped fetching before its
    old session could expire (S6), so its old entries count as free.
    """
    state = snapshot.state
    if state is None:
        return {}
    alive = {cid for cid, member in snapshot.members.items() if state.members.get(cid) == member.incarnation}
    alive |= {cid for cid, incarnation in snapshot.unreadable.items() if state.members.get(cid) == incarnation}
    return restrict(snapshot.owners, alive)


@dataclass(frozen=True, slots=True)
class Moves:
    """What an incremental rebalance changes: who stops what, who starts what (see :func:`moves`)."""

    #: consumer id -> topic -> partitions it must stop (it fetches them now and the target moves them)
    revoke: dict[str, dict[str, tuple[int, ...]]]
    #: consumers that get a start-fetcher: those the target gives a partition they do not fetch now, and every
    #: joiner (:func:`joiners`), given something or not -- a member hears its assignment, an empty one included
    gain: frozenset[str]
    #: how many partitions change thread
    moved: int
    #: consumer id -> topic -> partition -> thread: the revoked partitions that have a new owner, by old owner
    handover: dict[str, dict[str, dict[int, str]]] = field(default_factory=dict)
    #: consumer id -> topic -> partitions: what each gainer receives from a live previous owner (a hand-over)
    awaiting: dict[str, dict[str, tuple[int, ...]]] = field(default_factory=dict)

    def journal_fields(self) -> dict[str, object]:
        """``rebalance.started``'s fields for these moves."""
        return {"revoking": sorted(self.revoke), "gaining": sorted(self.gain), "moved": self.moved}

    @property
    def one_step(self) -> bool:
        """Whether the rebalance can run as one hand-over step: every revoked partition has a new owner to be
        handed to (none is removed), and no member both gives and receives (it would get two commands in one
        step, and one acknowledgement could not tell which of them it answers)."""
        handed = sum(len(ps) for topics in self.handover.values() for ps in topics.values())
        revoked = sum(len(ps) for topics in self.revoke.values() for ps in topics.values())
        return handed == revoked and not set(self.revoke) & self.gain


def moves(snapshot: GroupSnapshot, target: Assignment, members: Iterable[str] | None = None) -> Moves:
    """The difference between what the members fetch now (:func:`still_held`) and ``target``, by member.

    Revoking before assigning, per partition, is what keeps S2 in an incremental rebalance: a partition in
    ``revoke`` is given to its new thread only after its old one stopped it -- in two steps, once the old one
    acknowledged its stop; in one (a hand-over), once the old one wrote the new thread into the owner znode, after
    stopping.  A partition whose registry entry belongs to no live incarnation is free and needs no stop.

    Every joiner gets a start-fetcher, even with nothing in it: without one, a member that joins a group with more
    members than partitions could never tell "joined, nothing for me" from "still joining" (Kafka calls
    ``onPartitionsAssigned`` with an empty collection).  Members that neither gain nor join hear nothing.
    ``members``: the plan's members (default: the snapshot's); a joiner left out of the plan (one beyond
    ``max.size``: :func:`admitted`) hears nothing.
    """
    held = still_held(snapshot)
    revoke: dict[str, dict[str, list[int]]] = {}
    handover: dict[str, dict[str, dict[int, str]]] = {}
    awaiting: dict[str, dict[str, list[int]]] = {}
    gain: set[str] = set()
    moved = 0
    for topic in sorted(set(held) | set(target)):
        before, after = held.get(topic, {}), target.get(topic, {})
        for p in sorted(set(before) | set(after)):
            old, new = before.get(p), after.get(p)
            if old == new:
                continue
            moved += 1
            loser = old.rsplit("-", 1)[0] if old is not None else None
            gainer = new.rsplit("-", 1)[0] if new is not None else None
            if loser is not None:
                revoke.setdefault(loser, {}).setdefault(topic, []).append(p)
            if gainer is not None:
                gain.add(gainer)
            if loser is not None and gainer is not None and new is not None:
                handover.setdefault(loser, {}).setdefault(topic, {})[p] = new
                awaiting.setdefault(gainer, {}).setdefault(topic, []).append(p)
    gain |= joiners(snapshot) & set(snapshot.members if members is None else members)
    return Moves(
        {cid: {t: tuple(ps) for t, ps in topics.items()} for cid, topics in revoke.items()},
        frozenset(gain),
        moved,
        handover,
        {cid: {t: tuple(ps) for t, ps in topics.items()} for cid, topics in awaiting.items()},
    )


def joiners(snapshot: GroupSnapshot) -> set[str]:
    """The members new to the group since its state was written: an id the state does not record, or one it
    records in another incarnation (the consumer registered again, in a new session).  They fetch nothing yet
    (:func:`still_held`)."""
    state = snapshot.state
    recorded = state.members if state is not None else {}
    return {cid for cid, member in snapshot.members.items() if recorded.get(cid) != member.incarnation}


def restrict(target: Mapping[str, Mapping[int, str]], consumer_ids: Iterable[str]) -> Assignment:
    """The part of ``target`` whose threads belong to ``consumer_ids`` (thread ids are ``<consumerId>-<n>``)."""
    ids = set(consumer_ids)
    out: dict[str, dict[int, str]] = {}
    for topic, parts in target.items():
        for partition, thread in parts.items():
            if thread.rsplit("-", 1)[0] in ids:
                out.setdefault(topic, {})[partition] = thread
    return out
