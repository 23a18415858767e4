"""A consumer-protocol group as the coordinator holds it, and the pure rules that move it (KIP-848 over ZooKeeper).

:class:`GroupModel` is the coordinator's copy of what the group's znodes hold -- its epochs, every member's target
and current assignment, the ownership registry -- plus what only this term knows: the command each member has not
acknowledged yet.  The functions below are pure: :func:`basis` (what a target is computed from: a change bumps the
group epoch), :func:`compute_target` (the assignor, sticky to the previous target, as KIP-848's), :func:`round_steps`
(one reconciliation round: every member that is not waiting on a command takes its next step, until nothing moves)
and :func:`place` (which of a member's threads fetches a partition granted to it).

The safety rules are :func:`~zkcoord.protocol.kip848.reconcile`'s: revoke before assign, and a partition is granted
only while nobody holds it (assigned or pending revocation: the partition-epoch index).  A member waiting on a
command "reports" nothing: it is not reconciled until its acknowledgement arrives, which is this design's heartbeat.

Pure: no I/O, no clock.  Used by :mod:`~zkcoord.coordinator.kip848.engine` on the coordinator's worker thread.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from zkcoord.layout.commands import CommandOption
from zkcoord.layout.group_state import GroupPhase
from zkcoord.layout.kip848 import CurrentAssignment, GroupEpochs, MemberState, MemberTarget
from zkcoord.layout.partition_set import NO_PARTITIONS, PartitionSet
from zkcoord.protocol.assignors.classic import thread_id
from zkcoord.protocol.assignors.incremental import UniformGroup
from zkcoord.protocol.assignors.members import Holdings
from zkcoord.protocol.assignors.racks import PartitionRacks, Racks
from zkcoord.protocol.assignors.server_range import server_range
from zkcoord.protocol.assignors.uniform import uniform
from zkcoord.protocol.kip848 import partition_epochs, reconcile

#: what a target is computed from: members (id, incarnation), each member's topics and thread counts, the partition
#: count of every topic some member subscribes to, and, when some member has a rack, the members' racks and the racks
#: of those topics' partitions.  A change of any of it bumps the group epoch.
Basis = tuple[
    tuple[tuple[str, int], ...],
    tuple[tuple[str, tuple[tuple[str, int], ...]], ...],
    tuple[tuple[str, int], ...],
    tuple[tuple[str, str], ...],
    tuple[tuple[str, tuple[tuple[str, ...], ...]], ...],
]

#: the assignors a consumer-protocol group may use (its group config's ``assignor``), KIP-848's server-side ones
ASSIGNORS = ("uniform", "range")


@dataclass
class InFlight:
    """A command sent to a member and not acknowledged yet."""

    option: CommandOption
    #: its path once written (``None`` until then)
    path: str | None
    #: the zxid of the transaction that wrote it (its channel must be no newer for its deletion to count)
    zxid: int
    #: the timer that fences the member if a revocation is not acknowledged in time (0: no timer)
    token: int = 0
    #: the group epoch it was written at (its name's generation)
    generation: int = 0
    #: when it was sent, monotonic seconds
    sent_at: float = 0.0
    #: how long a revocation may take before its member is fenced
    timeout_s: float = 0.0


@dataclass
class GroupModel:
    """One consumer-protocol group, as this coordinator term holds it (worker thread only)."""

    group: str
    epochs: GroupEpochs
    targets: dict[str, MemberTarget]
    currents: dict[str, CurrentAssignment]
    #: the live members: consumer id -> incarnation (the ``czxid`` of its registration)
    members: dict[str, int]
    #: consumer id -> topic -> thread count, over the topics that exist
    threads: dict[str, dict[str, int]]
    #: the ownership registry as written: topic -> partition -> thread
    registry: dict[str, dict[int, str]]
    #: what the current target was computed from (None: compute one at the next look)
    basis: Basis | None = None
    #: consumer id -> the poll interval its registration publishes, ms (0: none)
    poll_interval_ms: dict[str, int] = field(default_factory=dict)
    #: consumer id -> the rack its registration publishes (members without one are absent)
    racks: dict[str, str] = field(default_factory=dict)
    #: the group state znode's version (-1: absent)
    state_version: int = -1
    #: members with a command not acknowledged yet
    inflight: dict[str, InFlight] = field(default_factory=dict)
    #: members whose fetching is unknown (a rebuilt model): each gets a stop of everything first
    must_stop: set[str] = field(default_factory=set)
    #: members whose last command was lost (deleted unacknowledged) or may not have been heard: sent again as is
    resend: dict[str, CommandOption] = field(default_factory=dict)
    #: static members' instance ids: consumer id -> instance id
    instances: dict[str, str] = field(default_factory=dict)
    #: static members that left and are held for their instance id: consumer id -> the token of their hold's timer
    absent: dict[str, int] = field(default_factory=dict)
    #: fenced members whose partitions stay held until they are known to have stopped: consumer id -> the token of
    #: their grace's timer (0: none armed yet, as read back by a new coordinator)
    fenced: dict[str, int] = field(default_factory=dict)
    #: the znodes known to exist: ``current/<m>``, ``target/<m>``, channels, owner topics
    have_epochs: bool = False
    #: whether ``target`` and ``current`` (the parents of the member records) exist
    target_root: bool = False
    current_root: bool = False
    have_current: set[str] = field(default_factory=set)
    have_target: set[str] = field(default_factory=set)
    channels: set[str] = field(default_factory=set)
    #: whether ``assignment`` exists, and the members whose ``assignment/<m>`` does
    assignment_root: bool = False
    have_assignment: set[str] = field(default_factory=set)
    #: members whose ``ack/<m>`` carries this coordinator's data watch (armed by a read, spent when it fires)
    ack_watched: set[str] = field(default_factory=set)
    owner_topics: set[str] = field(default_factory=set)
    assignor: str = "uniform"
    #: the last target as a homogeneous uniform group, to compute the next on the change (:func:`next_target`)
    uniform_cache: UniformCache | None = None
    #: the phase the group state was last written with (None: not by this model)
    phase: GroupPhase | None = None
    #: owner znode path -> the version this model's last write left it at (absent: not known, as read back): a
    #: start carries the version its own transaction leaves each granted partition's owner znode at
    owner_versions: dict[str, int] = field(default_factory=dict)
    #: (topic, partition) -> (committed offset, offset znode version) as the acknowledged stop of its last holder
    #: left them (its acknowledgement carries them): the start that grants the partition carries them on, and the
    #: new owner checks them instead of reading its offset (issue 16; absent: not known, the new owner reads)
    released: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict)

    def stable(self) -> bool:
        """Every member reconciled to the assignment epoch, and nothing in flight (KIP-848's STABLE group)."""
        return not self.inflight and all(
            self.currents.get(m, _JOINING).is_reconciled_to(self.epochs.assignment_epoch)
            for m in self.members
            if m not in self.absent
        )

    def holder(self, topic: str, partition: int) -> str | None:
        """The member holding a partition (assigned or pending revocation), fenced members included."""
        for member, current in self.currents.items():
            if current.assigned.has(topic, partition) or current.pending_revocation.has(topic, partition):
                return member
        return None


#: a member that has just joined: epoch 0, nothing (Kafka's member epoch 0 heartbeat)
_JOINING = CurrentAssignment(0, 0, MemberState.STABLE)


def joining() -> CurrentAssignment:
    return _JOINING


def rack_inputs(
    member_racks: Mapping[str, str], threads: Mapping[str, Mapping[str, int]], partition_racks: PartitionRacks
) -> Racks | None:
    """The racks a target is computed from: the members' and those of the partitions of the topics they subscribe
    to; None when no member has a rack (then partition racks change nothing, and their changes bump nothing)."""
    if not member_racks:
        return None
    topics = {t for subs in threads.values() for t in subs}
    return Racks(dict(member_racks), {t: partition_racks[t] for t in topics if t in partition_racks})


def basis(
    members: Mapping[str, int],
    threads: Mapping[str, Mapping[str, int]],
    partitions: Mapping[str, int],
    *,
    instances: Mapping[str, str] | None = None,
    racks: Racks | None = None,
) -> Basis:
    """What a target is computed from, in a form that compares by value (see :data:`Basis`).  A static member counts
    by its instance id, whatever its consumer id and session: one that comes back in its place changes nothing."""
    topics = {t for subs in threads.values() for t in subs}
    instances = instances or {}
    where = racks or Racks()

    def key(member: str) -> tuple[str, int]:
        instance = instances.get(member)
        return (f"instance:{instance}", 0) if instance is not None else (member, members[member])

    return (
        tuple(sorted(key(m) for m in members)),
        tuple(sorted((key(m)[0], tuple(sorted(threads.get(m, {}).items()))) for m in members)),
        tuple(sorted((t, partitions[t]) for t in topics if t in partitions)),
        tuple(sorted((key(m)[0], rack) for m, rack in where.members.items() if m in members)),
        tuple(sorted((t, tuple(tuple(sorted(r)) for r in rs)) for t, rs in where.partitions.items())),
    )


def compute_target(
    assignor: str,
    threads: Mapping[str, Mapping[str, int]],
    partitions: Mapping[str, int],
    previous: Mapping[str, PartitionSet],
    racks: Racks | None = None,
) -> dict[str, PartitionSet]:
    """The member-level target: ``uniform`` sticky to the ``previous`` target (KIP-848 computes a new target from
    the last one, not from what members own), preferring partitions of a member's rack where that costs neither
    balance nor stickiness (``racks``: :mod:`~zkcoord.protocol.assignors.racks`), or KIP-848's server-side
    ``range`` (which, as Kafka's, takes no racks)."""
    subscriptions = {m: frozenset(subs) for m, subs in threads.items()}
    counts = {t: partitions[t] for subs in subscriptions.values() for t in subs if t in partitions}
    if assignor == "range":
        result = server_range(subscriptions, counts)
    else:
        current = {m: p for m, p in previous.items() if m in subscriptions}
        result = uniform(subscriptions, counts, current, racks=racks)
    return {m: PartitionSet.of(result.get(m, {})) for m in subscriptions}


@dataclass(frozen=True, slots=True)
class UniformCache:
    """The last target a homogeneous ``uniform`` group was given, with its size classes
    (:class:`~zkcoord.protocol.assignors.UniformGroup`), so that the next one joins or drops one member on the change
    instead of over every member."""

    group: UniformGroup
    members: frozenset[str]


def next_target(
    cache: UniformCache | None,
    assignor: str,
    threads: Mapping[str, Mapping[str, int]],
    partitions: Mapping[str, int],
    previous: Mapping[str, PartitionSet],
    *,
    racks: Racks | None = None,
) -> tuple[dict[str, PartitionSet], UniformCache | None]:
    """:func:`compute_target`, on the change where it can be: for a homogeneous ``uniform`` group (every member on the
    same topics, no racks) whose ``cache`` holds the previous target, one member joining or leaving is
    :meth:`UniformGroup.join` / :meth:`~UniformGroup.leave` -- equal to the full computation sticky to the previous
    target, in time proportional to the change (Kafka's assignor works on the whole group: 1.98 ms at 10 000 members
    x 10 partitions; ``zkcoord bench assignor``).  Anything else is the full computation.  Returns the target and the
    cache for the next one (``None``: not homogeneous ``uniform``)."""
    topic_sets = {frozenset(subs) for subs in threads.values()}
    if assignor != "uniform" or racks is not None or len(topic_sets) != 1:
        return compute_target(assignor, threads, partitions, previous, racks), None
    [topics] = topic_sets
    counts = {t: partitions[t] for t in topics if t in partitions}
    members = frozenset(threads)
    group = None
    before: Mapping[str, Holdings] = {}
    if cache is not None and cache.group.topics == {t: n for t, n in counts.items() if n > 0}:
        joined, left = members - cache.members, cache.members - members
        if cache.members == frozenset(previous) and len(joined) + len(left) == 1:
            group = cache.group.join(next(iter(joined))) if joined else cache.group.leave(next(iter(left)))
            before = cache.group.assignment  # a member's holdings untouched by the change are the same object
    if group is None:
        current = {m: p for m, p in previous.items() if m in members}
        group = UniformGroup.start(members, counts, current)
    now = group.assignment
    target = {
        m: previous[m] if m in previous and m in before and now.get(m) is before[m] else PartitionSet.of(now.get(m, {}))
        for m in members
    }
    return target, UniformCache(group, members)


def place(member: str, topic: str, partitions: frozenset[int], count: int, held: Mapping[int, str]) -> dict[int, str]:
    """Which of ``member``'s ``count`` threads fetches each of ``partitions`` of ``topic``: a partition it already
    fetches stays on its thread (moving it would stop and restart it); the others go, in ascending order, to the
    thread with the fewest, ties to the lowest thread number."""
    threads = [thread_id(member, n) for n in range(max(count, 1))]
    out = {p: held[p] for p in partitions if held.get(p) in threads}
    load = {t: sum(1 for owner in out.values() if owner == t) for t in threads}
    for p in sorted(partitions - out.keys()):
        thread = min(threads, key=lambda t: (load[t], threads.index(t)))
        out[p] = thread
        load[thread] += 1
    return dict(sorted(out.items()))


@dataclass(frozen=True, slots=True)
class MemberStep:
    """One member's step in a round: its new current assignment, and the command that tells it (None: its epoch
    moved and nothing else; nothing to tell)."""

    member: str
    before: CurrentAssignment
    after: CurrentAssignment
    option: CommandOption | None
    #: a stop of everything (a rebuilt model's first step), not only ``after.pending_revocation``
    full_stop: bool = False

    @property
    def granted(self) -> PartitionSet:
        return self.after.assigned - self.before.assigned


def round_steps(model: GroupModel) -> list[MemberStep]:
    """One reconciliation round: each member not waiting on a command takes its next step, again and again until
    nothing moves (a revocation acknowledged frees partitions another member waits for: both steps are in the same
    round).  Updates ``model.currents`` as it goes; the caller writes the steps, then records the commands as in
    flight.  A member told something is not stepped again in the round (it has not heard yet)."""
    steps: dict[str, MemberStep] = {}
    told: set[str] = set(model.inflight) | set(model.absent)  # absent: held for a static member, not there to tell
    for member in sorted((model.must_stop & model.members.keys()) - told):
        current = model.currents.get(member, _JOINING)
        steps[member] = MemberStep(member, current, current, CommandOption.STOP_FETCHER, full_stop=True)
        told.add(member)
    for member, again in sorted(model.resend.items()):
        if member not in told and member in model.members:
            current = model.currents.get(member, _JOINING)
            steps[member] = MemberStep(member, current, current, again)
            told.add(member)
    model.resend.clear()
    moved = True
    while moved:
        moved = False
        index = partition_epochs(model.currents)
        for member in sorted(model.members):
            if member in told:
                continue
            current = model.currents.get(member, _JOINING)
            target = model.targets.get(member)
            after = reconcile(
                current,
                model.epochs.assignment_epoch,
                target.partitions if target is not None else NO_PARTITIONS,
                current.assigned,  # not waiting on a command: it owns what it was given, nothing it gave up
                _lookup(index),
            )
            # A joiner (epoch 0) hears its assignment, an empty one too (Kafka calls onPartitionsAssigned with it) --
            # but one whose target is all held by others hears nothing until its first grant: an empty start it
            # would acknowledge first would only delay that grant (a write and an acknowledgement per join).
            announce = current.member_epoch == 0 and after.state is MemberState.STABLE
            if after is current and not announce:
                continue
            option: CommandOption | None = None
            if after.state is MemberState.UNREVOKED_PARTITIONS:
                option = CommandOption.STOP_FETCHER
            elif after.assigned != current.assigned or announce:
                option = CommandOption.START_FETCHER
            previous = steps.get(member)
            steps[member] = MemberStep(member, previous.before if previous else current, after, option)
            model.currents[member] = after
            if option is not None:
                told.add(member)
            moved = True
            index = partition_epochs(model.currents)
    return [steps[m] for m in sorted(steps)]


def _lookup(index: Mapping[tuple[str, int], int]) -> Callable[[str, int], int]:
    return lambda topic, partition: index.get((topic, partition), -1)


def ownership(model: GroupModel, member: str, assigned: PartitionSet) -> dict[str, dict[int, str]]:
    """``member``'s threads for ``assigned`` (:func:`place`, sticky to the registry), as a start-fetcher's
    ``ownership`` carries them."""
    counts = model.threads.get(member, {})
    out: dict[str, dict[int, str]] = {}
    for topic, parts in assigned.items():
        held = {p: t for p, t in model.registry.get(topic, {}).items() if t.rsplit("-", 1)[0] == member}
        out[topic] = place(member, topic, frozenset(parts), counts.get(topic, 1), held)
    return out


def state_target(model: GroupModel) -> dict[str, dict[int, str]]:
    """The ownership the group state records: every partition held (assigned or pending revocation) by its thread
    in the registry, or, if the registry does not name one of the holder's threads, by the holder's first thread."""
    out: dict[str, dict[int, str]] = {}
    for member, current in model.currents.items():
        for topic, parts in (current.assigned | current.pending_revocation).items():
            for p in parts:
                thread = model.registry.get(topic, {}).get(p)
                if thread is None or thread.rsplit("-", 1)[0] != member:
                    thread = thread_id(member, 0)
                out.setdefault(topic, {})[p] = thread
    return out
