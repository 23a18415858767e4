"""Reading a consumer-protocol group back from ZooKeeper, and the operations that write its records.

A coordinator that takes a group over -- after a failover, a connection loss that left a write's outcome unknown,
or the group's return from the classic path -- reads what the last writer left (:func:`load`): the epochs, every
member's target and current assignment, and the assignments not acknowledged yet.  Those records are written only in
fenced transactions with the group's state (S1), each transaction whole or not at all, so what is read is a state
some coordinator wrote, and the reconciliation carries on from it: nothing is stopped again.

Only when the records cannot be trusted is the group *rebuilt*, and the journal says why (``kip848.rebuilt``): a
record unreadable, the records and the state of different epochs (another protocol rebalanced the group since), or
no records at all.  A rebuilt group knows what its members fetch from the ownership registry when the classic state
vouches for it (STABLE, and the registry agrees with it); otherwise it stops every member first.

Threads: the coordinator's worker thread.  :raises ZkError: on I/O failure (the caller retries the group).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from zkcoord.coordinator.kip848.model import GroupModel, InFlight
from zkcoord.coordinator.plan import registry_vouched
from zkcoord.coordinator.snapshot import ReadResult
from zkcoord.errors import CodecError, NoNodeError
from zkcoord.layout import paths
from zkcoord.layout.commands import Command, CommandOption
from zkcoord.layout.group_state import GroupPhase, GroupState
from zkcoord.layout.kip848 import MAX_EPOCH, AssignmentAck, CurrentAssignment, GroupEpochs, MemberState, MemberTarget
from zkcoord.layout.partition_set import PartitionSet
from zkcoord.protocol.kip848 import Kip848Error, partition_epochs
from zkcoord.zk import Stat, ZkClient

#: a coordinator's command name: ``cmd-<epoch>-<generation>-<stop|start>-<10-digit sequence>``
COMMAND_NAME = re.compile(r"cmd-([0-9]{1,19})-([0-9]{1,19})-(stop|start)-([0-9]{10})")


def load(
    zk: ZkClient,
    group: str,
    read: ReadResult,
    threads: Mapping[str, Mapping[str, int]],
    *,
    distrust: str = "",
    known_generation: int = 0,
) -> tuple[GroupModel, str]:
    """The group as its records hold it, and ``""``; or a rebuilt model and why it was rebuilt (``distrust``: the
    records are known to break the protocol's rules, rebuild whatever they say).  ``known_generation``: the highest
    generation this coordinator term gave the group (a rebuild starts above it, and above every generation found in
    the state, the records and the members' channels, so no consumer sees a command's generation go back).

    :raises Kip848Error: the group's generation has reached KIP-848's int32 limit (it cannot be run any further).
    """
    snap = read.snapshot
    members = {cid: m.incarnation for cid, m in snap.members.items()}
    registry = {t: dict(ps) for t, ps in snap.owners.items()}
    model = GroupModel(
        group,
        GroupEpochs(0, 0),
        {},
        {},
        members,
        {m: dict(t) for m, t in threads.items()},
        registry,
        state_version=read.state_version,
        owner_topics=set(read.owner_topics),
    )
    try:
        model.channels = set(zk.get_children(paths.channel_root(group)))
    except NoNodeError:
        model.channels = set()  # no member has created its channel yet
    names = zk.children_many([paths.targets_root(group), paths.currents_root(group)])
    target_names, current_names = names[0] or [], names[1] or []
    model.have_target, model.have_current = set(target_names), set(current_names)
    model.target_root, model.current_root = names[0] is not None, names[1] is not None
    got = zk.get_many(
        [paths.kip848(group)]
        + [paths.target(group, m) for m in target_names]
        + [paths.current(group, m) for m in current_names]
    )
    epochs_read, targets_read = got[0], got[1 : 1 + len(target_names)]
    model.have_epochs = epochs_read is not None
    currents_read = got[1 + len(target_names) :]
    state = snap.state
    channels = _channels(zk, group, sorted(model.channels & (set(members) | set(state.members if state else {}))))
    assignments = _assignments(zk, model)
    why = distrust or _distrust(epochs_read, state)
    if not why and epochs_read is not None and state is not None:
        try:
            model.epochs = GroupEpochs.decode(epochs_read[0], paths.kip848(group))
            for m, r in zip(target_names, targets_read, strict=True):
                if r is not None:
                    model.targets[m] = MemberTarget.decode(r[0], paths.target(group, m))
            for m, r in zip(current_names, currents_read, strict=True):
                if r is not None:
                    model.currents[m] = CurrentAssignment.decode(r[0], paths.current(group, m))
        except CodecError as e:
            why = f"a record is unreadable: {e}"
        else:
            broken = _inconsistent(model, state.members, members)
            why = f"the records break KIP-848's rules: {broken}" if broken else ""
    if why or state is None:
        epoch = max(
            state.generation if state else 0,
            _epoch_of(epochs_read),
            known_generation,
            channels.generation,
            assignments.generation,
        )
        if epoch >= MAX_EPOCH:
            raise Kip848Error(f"group {group}'s generation {epoch} has reached KIP-848's limit ({MAX_EPOCH})")
        _rebuild(model, read, epoch)
        return model, why or "no group state"
    model.members = dict(state.members)  # whom the records were written for
    model.assignor = state.assignor
    model.phase = state.phase
    # A record of a member the state does not list is a fenced member's: the fence wrote the state without it and
    # kept the record, its partitions held until its grace ends (armed again by the caller, from now).
    model.fenced = {m: 0 for m in model.currents if m not in model.members}
    _find_inflight(model, assignments)
    return model, ""


def _inconsistent(model: GroupModel, recorded: Mapping[str, int], live: Mapping[str, int]) -> str:
    """Why records that decode cannot be carried on from ("": they can)."""
    try:
        partition_epochs(model.currents)
    except Kip848Error as e:
        return str(e)
    for member, current in sorted(model.currents.items()):
        if current.state is MemberState.UNKNOWN and (current.assigned or current.pending_revocation):
            return f"member {member} is in a state this release does not know, holding partitions"
    for member, incarnation in sorted(recorded.items()):
        if live.get(member) == incarnation and member not in model.currents:
            return f"live member {member} has no current assignment record"
    return ""


@dataclass(frozen=True, slots=True)
class Channels:
    """What the members' channels hold: the lowest coordinator command still in each, and the highest generation
    any command in them, or any acknowledgement they record, carries."""

    pending: dict[str, tuple[str, int, int]]  # member -> (path, czxid, generation)
    generation: int


def _channels(zk: ZkClient, group: str, members: list[str]) -> Channels:
    channel_paths = [paths.channel(group, m) for m in members]
    listings = zk.children_many(channel_paths)
    records = zk.get_many(channel_paths)
    highest = 0
    lowest: dict[str, str] = {}
    for member, children, record in zip(members, listings, records, strict=True):
        names = [c for c in children or [] if COMMAND_NAME.fullmatch(c)]  # anything else is not the coordinator's
        if names:
            lowest[member] = min(names, key=lambda c: c[-10:])
        acked = COMMAND_NAME.fullmatch(record[0].decode("ascii", "replace")) if record and record[0] else None
        generations = [int(m.group(2)) for m in map(COMMAND_NAME.fullmatch, names) if m]
        highest = max([highest, *generations, int(acked.group(2)) if acked else 0])
    stats = zk.get_many([f"{paths.channel(group, m)}/{n}" for m, n in lowest.items()])
    pending = {}
    for (member, name), got in zip(lowest.items(), stats, strict=True):
        match = COMMAND_NAME.fullmatch(name)
        if got is not None and match is not None:  # gone since the listing: acknowledged, nothing to wait for
            pending[member] = (f"{paths.channel(group, member)}/{name}", got[1].czxid, int(match.group(2)))
    return Channels(pending, highest)


@dataclass(frozen=True, slots=True)
class Assignments:
    """What the members' assignment znodes hold: the commands not acknowledged, those refused, and the highest
    generation any of them carries."""

    pending: dict[str, InFlight]
    refused: dict[str, CommandOption]
    generation: int


def _assignments(zk: ZkClient, model: GroupModel) -> Assignments:
    """Read every ``assignment/<m>`` with its ``ack/<m>`` (and note in ``model`` which exist).  An assignment is in
    flight unless its member's acknowledgement names its write (its ``mzxid``); one that does not decode is no
    coordinator's (it is overwritten at the member's next step)."""
    group = model.group
    try:
        names = zk.get_children(paths.assignments_root(group))
    except NoNodeError:
        return Assignments({}, {}, 0)
    model.assignment_root, model.have_assignment = True, set(names)
    got = zk.get_many([paths.assignment(group, m) for m in names] + [paths.ack(group, m) for m in names])
    pending: dict[str, InFlight] = {}
    refused: dict[str, CommandOption] = {}
    highest = 0
    for member, written, acked in zip(names, got[: len(names)], got[len(names) :], strict=True):
        if written is None:
            model.have_assignment.discard(member)
            continue
        try:
            command = Command.decode(written[0], paths.assignment(group, member))
        except CodecError:
            continue
        highest = max(highest, command.generation)
        ack = None
        if acked is not None and acked[0]:
            try:
                ack = AssignmentAck.decode(acked[0], paths.ack(group, member))
            except CodecError:
                ack = None
        if ack is not None and ack.assignment == written[1].mzxid and not ack.refused:
            continue  # acknowledged
        if ack is not None and ack.assignment >= written[1].mzxid:
            refused[member] = command.option  # refused, or overwritten by someone else since: written again
            continue
        path = paths.assignment(group, member)
        pending[member] = InFlight(command.option, path, written[1].mzxid, generation=command.generation)
    return Assignments(pending, refused, highest)


def _distrust(epochs_read: tuple[bytes, Stat] | None, state: GroupState | None) -> str:
    """Why the records cannot be carried on from ("": they can)."""
    if epochs_read is None:
        return "no consumer-protocol records"
    if state is None:
        return "no group state"
    if state.phase not in (GroupPhase.STABLE, GroupPhase.RECONCILING):
        return f"the group state is {state.phase.value}: another protocol's rebalance did not finish"
    try:
        epochs = GroupEpochs.decode(epochs_read[0])
    except CodecError as e:
        return f"the group epochs are unreadable: {e.reason}"
    if epochs.group_epoch != state.generation:
        return f"the records are of group epoch {epochs.group_epoch}, the state of generation {state.generation}"
    return ""


def _epoch_of(epochs_read: tuple[bytes, Stat] | None) -> int:
    if epochs_read is None:
        return 0
    try:
        return GroupEpochs.decode(epochs_read[0]).group_epoch
    except CodecError:
        return 0


def _rebuild(model: GroupModel, read: ReadResult, epoch: int) -> None:
    """Start over at ``epoch`` (the next bump goes past it, so commands' generations keep growing): what each member
    fetches is the registry's if the classic state vouches for it; otherwise every member is stopped first."""
    model.epochs = GroupEpochs(epoch, epoch)
    model.targets = {}
    model.basis = None
    vouched = registry_vouched(read.snapshot)
    state = read.snapshot.state
    recorded = state.members if state is not None else {}
    named = {th.rsplit("-", 1)[0] for ps in model.registry.values() for th in ps.values()}
    if state is not None:
        named |= {th.rsplit("-", 1)[0] for ps in state.target.values() for th in ps.values()}
    for member, incarnation in model.members.items():
        held = PartitionSet.from_pairs(
            (t, p) for t, ps in model.registry.items() for p, th in ps.items() if th.rsplit("-", 1)[0] == member
        )
        if state is not None and not (vouched and recorded.get(member) == incarnation):
            # What the state's target gives it too: an owner znode deleted by hand does not make a partition free.
            held |= PartitionSet.from_pairs(
                (t, p) for t, ps in state.target.items() for p, th in ps.items() if th.rsplit("-", 1)[0] == member
            )
        if member not in named:
            continue  # no start was ever written for it (the registry and the state would name it): it fetches nothing
        if vouched and recorded.get(member) == incarnation:
            model.currents[member] = CurrentAssignment(0, 0, MemberState.STABLE, assigned=held)
        else:
            model.currents[member] = CurrentAssignment(0, 0, MemberState.UNREVOKED_PARTITIONS, pending_revocation=held)
            model.must_stop.add(member)


def _find_inflight(model: GroupModel, assignments: Assignments) -> None:
    """The assignments a previous writer left unacknowledged: waited for as in flight (its deadline is armed by the
    caller, from now); refused ones are written again.  A member left revoking with nothing in flight may or may not
    have heard its stop: it is sent again (a stop of what it no longer fetches is harmless)."""
    for member, inflight in assignments.pending.items():
        if member in model.members:
            model.inflight[member] = inflight
    for member, option in assignments.refused.items():
        if member in model.members:
            model.resend[member] = option
    for member, current in model.currents.items():
        if member in model.members and member not in model.inflight and current.pending_revocation:
            model.resend[member] = CommandOption.STOP_FETCHER
